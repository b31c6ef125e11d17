"""Shard-local shuffle: documents are permuted within their input shard only.

Algorithm: bucket = input shard (pass 1 just groups), pass 2 permutes each bucket
uniformly (seeded by (seed, shard)). The output keeps the shards in their original order.

Trade-off: the cheapest shuffle (one read, no global exchange), and the worst: whatever
order the shards have (one crawl date, one source, one language after another) survives at
the scale of a shard, which shows as loss bumps. Offered as a baseline for the quality
page. Memory is one input shard, whatever the budget.
"""

from __future__ import annotations

import numpy as np

PASS2 = 2


def num_buckets(counts: np.ndarray, min_buckets: int, **options: object) -> int:
    return max(1, len(counts))


def assign(
    counts: np.ndarray, shard: int, seed: int, num_buckets: int, **options: object
) -> tuple[np.ndarray, np.ndarray]:
    n = int(counts[shard])
    return np.full(n, shard, dtype=np.int64), np.zeros(n, dtype=np.int64)


def order_bucket(keys: np.ndarray, seed: int, bucket: int, **options: object) -> np.ndarray:
    from shardcore.shuffle import rng

    return rng(seed, PASS2, bucket).permutation(len(keys))


def head(counts: np.ndarray, seed: int, num_buckets: int, n: int, **options: object) -> np.ndarray:
    """``permutation(counts, seed, num_buckets)[:n]`` in memory ``O(n + len(counts))``: the
    shards the first ``n`` positions come from, the last one's head of its permutation
    alone (``draws.permutation_head``)."""
    from shardcore.shuffle.draws import permutation_head

    counts = np.asarray(counts, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    n = min(int(n), int(starts[-1]))
    out, shard = [], 0
    while shard < counts.size and int(starts[shard]) < n:
        stop = min(int(counts[shard]), n - int(starts[shard]))
        part = permutation_head(seed, (PASS2, shard), int(counts[shard]), stop)
        out.append(part + starts[shard])
        shard += 1
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def permutation(counts: np.ndarray, seed: int, num_buckets: int, **options: object) -> np.ndarray:
    from shardcore.shuffle import compose
    from shardcore.shuffle import local as module

    return compose(module, counts, seed, num_buckets, **options)

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


def permutation(counts: np.ndarray, seed: int, num_buckets: int, **options: object) -> np.ndarray:
    from shardcore.shuffle import compose
    from shardcore.shuffle import local as module

    return compose(module, counts, seed, num_buckets, **options)

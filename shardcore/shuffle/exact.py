"""Exact global shuffle in two passes, with bounded memory (``shardyard pool --shuffle
exact``, the default; the passes run as the pool's units, ``shardcore.pool``).

Algorithm: pass 1, every input shard independently draws for each of its documents a
bucket in [0, K) i.i.d. uniformly (generator seeded by (seed, shard)); pass 2, every bucket
independently permutes its documents uniformly (generator seeded by (seed, bucket)). The
output is the buckets concatenated. This is sorting by i.i.d. random keys (bucket first,
then a uniform tie-break), so every permutation of the input is equally likely: an exact
uniform shuffle, not an approximation.

Trade-off: memory is one bucket (total / K) instead of the whole data, and the work is
S + K independent units, at the price of writing and reading the data twice (pass 1 output
is a temporary copy grouped by bucket). K comes from the memory budget. Bucket sizes are
binomial, so a bucket exceeds the mean by a few standard deviations at most.
"""

from __future__ import annotations

import numpy as np

PASS1, PASS2 = 1, 2


def num_buckets(counts: np.ndarray, min_buckets: int, **options: object) -> int:
    return max(1, int(min_buckets))


def assign(
    counts: np.ndarray, shard: int, seed: int, num_buckets: int, **options: object
) -> tuple[np.ndarray, np.ndarray]:
    from shardcore.shuffle import rng

    n = int(counts[shard])
    bucket = rng(seed, PASS1, shard).integers(0, num_buckets, size=n, dtype=np.int64)
    return bucket, np.zeros(n, dtype=np.int64)


def order_bucket(keys: np.ndarray, seed: int, bucket: int, **options: object) -> np.ndarray:
    from shardcore.shuffle import rng

    return rng(seed, PASS2, bucket).permutation(len(keys))


def permutation(counts: np.ndarray, seed: int, num_buckets: int, **options: object) -> np.ndarray:
    from shardcore.shuffle import compose
    from shardcore.shuffle import exact as module

    return compose(module, counts, seed, num_buckets, **options)

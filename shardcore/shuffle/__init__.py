"""Document shuffles, registered by name: ``exact``, ``grid``, ``local``, ``buffer``.

Every shuffle is a pure, seeded numpy module with the same two-pass interface, so the
pool stage runs any of them as the same units of work (pass 1: one unit per input shard,
pass 2: one unit per bucket) and the quality page compares them on equal terms:

``num_buckets(counts, min_buckets, **options) -> int``
    How many buckets (pass-2 units) the shuffle uses for input shards holding ``counts``
    documents, given the memory budget's lower bound ``min_buckets``.
``assign(counts, shard, seed, num_buckets, **options) -> (bucket, key)``
    Pass 1 for input shard ``shard``: each of its documents' bucket and an int64 key.
``order_bucket(keys, seed, bucket, **options) -> order``
    Pass 2: the order of one bucket's documents, which arrive grouped by input shard in
    shard order, each shard's in document order, with their pass-1 keys.
``permutation(counts, seed, num_buckets, **options) -> order``
    Both passes composed in memory: the whole output order as indices into the input
    stream (documents of shard 0, then shard 1, ...). For tests and the quality page.
``head(counts, seed, num_buckets, n, **options) -> order[:n]``
    The first ``n`` positions of ``permutation`` exactly, without the rest in memory
    (exact, local, buffer: ``n`` plus the buckets; grid: one bucket and one column), for
    a pool's quality report on its first records (``shardcore.pool.quality``).

Output order is the buckets concatenated in bucket order. Nothing depends on how many
workers ran the units.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from shardcore.errors import InputError
from shardcore.shuffle import buffer, exact, grid, local

SHUFFLES: dict[str, ModuleType] = {
    "exact": exact,
    "grid": grid,
    "local": local,
    "buffer": buffer,
}


def get_shuffle(name: str) -> ModuleType:
    """The shuffle module registered as ``name``; InputError names the known ones."""
    try:
        return SHUFFLES[name]
    except KeyError:
        raise InputError(f"unknown shuffle {name!r}; known: {', '.join(SHUFFLES)}") from None


def compose(
    module: ModuleType, counts: np.ndarray, seed: int, num_buckets: int, **options: object
) -> np.ndarray:
    """Run both passes of ``module`` in memory: indices into the input stream in output
    order. Shared by every shuffle's ``permutation``."""
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    buckets, keys = [], []
    for shard in range(counts.size):
        b, k = module.assign(counts, shard, seed, num_buckets, **options)
        buckets.append(b)
        keys.append(k)
    bucket = np.concatenate(buckets) if buckets else np.zeros(0, np.int64)
    key = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    # Pass 1 writes each shard's documents grouped by bucket; pass 2 reads bucket b from
    # every shard in shard order: a stable sort by bucket gives exactly that arrival order.
    arrival = np.argsort(bucket, kind="stable")
    sizes = np.bincount(bucket, minlength=num_buckets)
    out = np.empty(int(starts[-1]), dtype=np.int64)
    pos = 0
    for b in range(num_buckets):
        members = arrival[pos : pos + sizes[b]]
        out[pos : pos + sizes[b]] = members[module.order_bucket(key[members], seed, b, **options)]
        pos += sizes[b]
    return out


def rng(seed: int, *stream: int) -> np.random.Generator:
    """A generator for one (seed, pass, shard or bucket) stream: independent of any other."""
    return np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, *map(int, stream)])

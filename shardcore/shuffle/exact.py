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

from collections.abc import Iterator

import numpy as np

PASS1, PASS2 = 1, 2
CHUNK = 1 << 18  # pass 1's draws held at a time by ``head``


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


def _bucket_draws(
    counts: np.ndarray, seed: int, num_buckets: int, chunk: int = CHUNK
) -> Iterator[tuple[int, np.ndarray]]:
    """Pass 1's bucket draws, a chunk of a shard at a time: (first input position, buckets).
    A shard's draws in chunks equal its draws at once (numpy's bounded draws take words
    of the shard's generator one by one)."""
    from shardcore.shuffle import rng

    first = 0
    for shard, n in enumerate(np.asarray(counts, dtype=np.int64).tolist()):
        gen = rng(seed, PASS1, shard)
        for a in range(0, n, chunk):
            yield first + a, gen.integers(0, num_buckets, size=min(chunk, n - a), dtype=np.int64)
        first += n


def head(counts: np.ndarray, seed: int, num_buckets: int, n: int, **options: object) -> np.ndarray:
    """``permutation(counts, seed, num_buckets)[:n]`` in memory ``O(n + num_buckets)``: pass
    1's draws counted, then drawn again to keep the members of the buckets the first ``n``
    positions come from (every member of each but the last, of the last those its head
    of the permutation names: ``draws.permutation_head``)."""
    from shardcore.shuffle.draws import permutation_head

    sizes = np.zeros(num_buckets, dtype=np.int64)
    for _, drawn in _bucket_draws(counts, seed, num_buckets):
        sizes += np.bincount(drawn, minlength=num_buckets)
    n = min(int(n), int(sizes.sum()))
    ends = np.cumsum(sizes)
    last = int(np.searchsorted(ends, n)) if n else -1
    # Per bucket needed: the arrival ranks kept, in the order they are output.
    picks = []
    for b in range(last + 1):
        stop = n - (int(ends[b]) - int(sizes[b])) if b == last else int(sizes[b])
        picks.append(permutation_head(seed, (PASS2, b), int(sizes[b]), stop))
    return _members(counts, seed, num_buckets, picks)


def _members(
    counts: np.ndarray, seed: int, num_buckets: int, picks: list[np.ndarray]
) -> np.ndarray:
    """Per bucket ``b < len(picks)``, the input positions of its members of arrival ranks
    ``picks[b]`` (arrival: input order), concatenated."""
    wanted = [np.sort(p) for p in picks]
    found = [np.empty(len(p), dtype=np.int64) for p in picks]
    seen = np.zeros(len(picks), dtype=np.int64)
    for first, b in _bucket_draws(counts, seed, num_buckets):
        for k in range(len(picks)):
            at = np.flatnonzero(b == k)
            lo, hi = np.searchsorted(wanted[k], [seen[k], seen[k] + at.size])
            found[k][lo:hi] = first + at[wanted[k][lo:hi] - seen[k]]
            seen[k] += at.size
    out = [f[np.searchsorted(w, p)] for f, w, p in zip(found, wanted, picks, strict=True)]
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def permutation(counts: np.ndarray, seed: int, num_buckets: int, **options: object) -> np.ndarray:
    from shardcore.shuffle import compose
    from shardcore.shuffle import exact as module

    return compose(module, counts, seed, num_buckets, **options)

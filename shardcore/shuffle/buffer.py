"""Streaming shuffle buffer: what a data loader does when it cannot shuffle globally.

Algorithm: read documents in stream order into a buffer of ``buffer`` slots; once it is
full, each new document replaces a uniformly chosen slot whose occupant is emitted; at the
end the buffer is emitted in a uniform random order. The stream is cut into K consecutive
buckets (from the memory budget) and the buffer is drained at the end of each, as a
loader's buffer is at the end of each worker's stream.

Trade-off: O(buffer) memory and one pass, but a document moves forward from its input
position by about ``buffer`` places only (a geometric tail), never backward by more than
that: the input order survives at any scale larger than the buffer. Offered as a baseline
for the quality page. Runs a Python loop per document: fine for a baseline.
"""

from __future__ import annotations

import numpy as np

PASS2 = 2
DEFAULT_BUFFER = 1024


def num_buckets(counts: np.ndarray, min_buckets: int, **options: object) -> int:
    return max(1, min(int(min_buckets), int(np.sum(counts)) or 1))


def assign(
    counts: np.ndarray, shard: int, seed: int, num_buckets: int, **options: object
) -> tuple[np.ndarray, np.ndarray]:
    counts = np.asarray(counts, dtype=np.int64)
    total = max(1, int(counts.sum()))
    first = int(counts[:shard].sum())
    g = np.arange(first, first + int(counts[shard]), dtype=np.int64)
    return g * num_buckets // total, g


def order_bucket(
    keys: np.ndarray, seed: int, bucket: int, *, buffer: int = DEFAULT_BUFFER, **options: object
) -> np.ndarray:
    from shardcore.shuffle import rng

    if buffer < 1:
        raise ValueError(f"buffer shuffle needs buffer >= 1, got {buffer}")
    stream = np.argsort(np.asarray(keys), kind="stable")
    n = len(stream)
    gen = rng(seed, PASS2, bucket)
    size = min(buffer, n)
    slots = stream[:size].copy()
    out = np.empty(n, dtype=np.int64)
    picks = gen.integers(0, size, size=n - size) if n > size else np.zeros(0, np.int64)
    emitted = 0
    for item, j in zip(stream[size:].tolist(), picks.tolist(), strict=True):
        out[emitted] = slots[j]
        slots[j] = item
        emitted += 1
    out[emitted:] = slots[gen.permutation(size)]
    return out


def head(
    counts: np.ndarray,
    seed: int,
    num_buckets: int,
    n: int,
    *,
    buffer: int = DEFAULT_BUFFER,
    **options: object,
) -> np.ndarray:
    """``permutation(counts, seed, num_buckets)[:n]`` in memory ``O(n + buffer)``: buckets
    are consecutive input positions, and a bucket's first ``r`` outputs are its buffer's
    first ``r`` replacements (its first ``r`` slot draws, taken alone: a generator's
    bounded draws in pieces equal them at once)."""
    from shardcore.shuffle import rng

    total = int(np.sum(counts))
    n = min(int(n), total)
    out, b, done = [], 0, 0
    while done < n:
        lo = -(-b * max(1, total) // num_buckets)
        hi = min(total, -(-(b + 1) * max(1, total) // num_buckets))
        size, r = hi - lo, min(hi - lo, n - done)
        if size - min(buffer, size) < r:  # the buffer's drain reached: the whole bucket
            part = order_bucket(np.arange(size), seed, b, buffer=buffer)[:r]
        else:
            slots = np.arange(min(buffer, size))
            picks = rng(seed, PASS2, b).integers(0, slots.size, size=r)
            part = np.empty(r, dtype=np.int64)
            for k, j in enumerate(picks.tolist()):
                part[k] = slots[j]
                slots[j] = slots.size + k
        out.append(part + lo)
        done += r
        b += 1
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def permutation(counts: np.ndarray, seed: int, num_buckets: int, **options: object) -> np.ndarray:
    from shardcore.shuffle import buffer as module
    from shardcore.shuffle import compose

    return compose(module, counts, seed, num_buckets, **options)

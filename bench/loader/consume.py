"""The consumer every loader of bench/loader/loaders.py feeds, in its own process: reads
batches (or single samples) of token rows to the end and returns seconds, samples, tokens
and a digest of the rows as a multiset, the same whatever order a loader's workers return
them in. Needs numpy and xxhash only, so that every loader's environment can run it. Not a
test."""

from __future__ import annotations

import time

import numpy as np


def passes_over(loader, passes: int):
    """Every batch of ``passes`` passes over ``loader`` (an iterable made to restart, a
    dataset or a DataLoader): epochs, one after the other."""
    for _ in range(passes):
        yield from loader


def consume(batches, t: float, seq_len: int) -> dict:
    """Reads ``batches`` (arrays of shape (B, seq_len + 1) or (seq_len + 1,), any integer
    dtype, torch tensors included) to the end. Each row's checksum is its int64 dot product
    with fixed odd weights (wrapping): identical rows, identical checksums; the digest is
    the xxh3-128 of the sorted checksums. ``t``: the clock's start (before the loader was
    made, so start-up counts)."""
    import xxhash

    weights = np.random.default_rng(0).integers(1, 2**62, size=seq_len + 1) | 1
    sums = []
    samples = 0
    for batch in batches:
        rows = np.asarray(batch).reshape(-1, seq_len + 1)
        sums.append(rows.astype(np.int64, copy=False) @ weights)
        samples += rows.shape[0]
    seconds = time.perf_counter() - t
    checksums = np.sort(np.concatenate(sums)) if sums else np.zeros(0, np.int64)
    return {
        "seconds": seconds,
        "samples": samples,
        "tokens": samples * (seq_len + 1),
        "digest": xxhash.xxh3_128(checksums.tobytes()).hexdigest(),
    }

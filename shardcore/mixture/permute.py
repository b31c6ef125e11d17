"""The order a pool's records are read in, epoch by epoch, computed rather than stored.

Epoch 0 reads the (already globally shuffled) pool in order. Each repeat reads it in a
fresh keyed permutation of [0, n): a balanced Feistel network over the smallest even
number of bits b with 2^b >= n (at most 4n values), with cycle-walking (a value >= n is
permuted again until it falls in [0, n)), which is a bijection of [0, n) whose forward
and inverse maps cost O(1) memory per position, whatever n. Round keys are xxh64 of
(seed, pool key, epoch, round); the round function is splitmix64's finalizer. Positions
are permuted vectorized, each with its own domain and keys, so one call serves a chunk
of samples reading many pools in many epochs.

``"numpy"`` is the algorithm of schedules built before (``numpy.random.default_rng
([seed, pool, epoch, 0x6D6978]).permutation(n)``): materialized, 8 bytes per record. It is
kept for reading those schedules and for a run that continues one of them (its later
epochs must be the permutations it started with).
"""

from __future__ import annotations

import ctypes

import numpy as np
import xxhash

from shardcore.kernels import compile_kernel

FEISTEL = "feistel"
NUMPY = "numpy"
ALGORITHMS = (FEISTEL, NUMPY)
ROUNDS = 4  # Luby-Rackoff: four rounds of a pseudo-random function make a strong one

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _round_function(x: np.ndarray, key: np.ndarray) -> np.ndarray:
    z = (x + key) * _GOLD  # uint64 arithmetic wraps modulo 2^64
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def half_bits(n: np.ndarray | int) -> np.ndarray:
    """Half the Feistel width for domains of n values: the smallest h with 4^h >= n (h >= 1)."""
    n = np.maximum(np.asarray(n, dtype=np.int64), 2)
    bits = np.ceil(np.log2(n.astype(np.float64))).astype(np.int64)
    bits += (np.left_shift(np.int64(1), bits) < n).astype(np.int64)  # float log2 rounding
    return np.maximum((bits + 1) // 2, 1).astype(np.uint64)


def round_keys(seed: int, pool: int, epoch: int) -> np.ndarray:
    """The ``ROUNDS`` round keys of one pool's permutation in one epoch."""
    return np.array(
        [
            xxhash.xxh64_intdigest(f"shardyard-epoch:{seed}:{pool}:{epoch}:{r}".encode())
            for r in range(ROUNDS)
        ],
        dtype=np.uint64,
    )


def _network(x: np.ndarray, half: np.ndarray, keys: np.ndarray, inverse: bool) -> np.ndarray:
    mask = (np.uint64(1) << half) - np.uint64(1)
    left, right = x >> half, x & mask
    rounds = range(ROUNDS - 1, -1, -1) if inverse else range(ROUNDS)
    for r in rounds:
        if inverse:  # (L, R) <- (R ^ F(L), L)
            left, right = right ^ (_round_function(left, keys[:, r]) & mask), left
        else:  # (L, R) <- (R, L ^ F(R))
            left, right = right, left ^ (_round_function(right, keys[:, r]) & mask)
    return (left << half) | right


_C_SOURCE = r"""
#include <stdint.h>

#define ROUNDS 4

static inline uint64_t f(uint64_t x, uint64_t k) {
    uint64_t z = (x + k) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* out[j] = the keyed permutation (or its inverse) of pos[j] over [0, n[g]), g = group[j],
   round keys keys[g * ROUNDS ...], half widths half[g]. */
void sy_feistel(const int64_t *pos, const int32_t *group, const int64_t *n,
                const uint64_t *half, const uint64_t *keys, int64_t m, int inverse,
                int64_t *out) {
    for (int64_t j = 0; j < m; ++j) {
        int32_t g = group[j];
        const uint64_t *k = keys + (int64_t)g * ROUNDS;
        uint64_t h = half[g], mask = (1ULL << h) - 1, lim = (uint64_t)n[g];
        uint64_t x = (uint64_t)pos[j];
        do {
            uint64_t l = x >> h, r = x & mask;
            if (inverse) {
                for (int i = ROUNDS - 1; i >= 0; --i) { uint64_t t = l; l = r ^ (f(l, k[i]) & mask); r = t; }
            } else {
                for (int i = 0; i < ROUNDS; ++i) { uint64_t t = r; r = l ^ (f(r, k[i]) & mask); l = t; }
            }
            x = (l << h) | r;
        } while (x >= lim);
        out[j] = (int64_t)x;
    }
}
"""


def _kernel() -> ctypes.CDLL | None:
    lib = compile_kernel("feistel", _C_SOURCE)
    if lib is not None and not getattr(lib, "_sy_typed", False):
        ptr = np.ctypeslib.ndpointer
        lib.sy_feistel.argtypes = [
            ptr(np.int64, flags="C"),
            ptr(np.int32, flags="C"),
            ptr(np.int64, flags="C"),
            ptr(np.uint64, flags="C"),
            ptr(np.uint64, flags="C"),
            ctypes.c_int64,
            ctypes.c_int,
            ptr(np.int64, flags="C"),
        ]
        lib.sy_feistel.restype = None
        lib._sy_typed = True  # type: ignore[attr-defined]  # a mark on the loaded library
    return lib


def feistel_groups(
    positions: np.ndarray,
    group: np.ndarray,
    n: np.ndarray,
    keys: np.ndarray,
    *,
    inverse: bool = False,
    compiled: bool = True,
) -> np.ndarray:
    """Each position through its group's keyed permutation of [0, n[g]) (``group`` per
    position; ``n`` and ``keys`` (``ROUNDS`` round keys) per group). The compiled kernel
    and the numpy path give the same values."""
    pos = np.ascontiguousarray(positions, dtype=np.int64)
    group = np.ascontiguousarray(group, dtype=np.int32)
    n = np.ascontiguousarray(n, dtype=np.int64)
    keys = np.ascontiguousarray(keys, dtype=np.uint64).reshape(-1, ROUNDS)
    half = np.ascontiguousarray(half_bits(n), dtype=np.uint64)
    lib = _kernel() if compiled else None
    if lib is not None:
        out = np.empty_like(pos)
        lib.sy_feistel(pos, group, n, half, keys, pos.size, int(inverse), out)
        return out
    return feistel(pos, n[group], keys[group], inverse=inverse)


def feistel(
    positions: np.ndarray, n: np.ndarray, keys: np.ndarray, *, inverse: bool = False
) -> np.ndarray:
    """Each position in [0, n) through its keyed permutation of [0, n) (``keys``: one row
    of ``ROUNDS`` round keys per position; ``n`` per position or one for all). ``inverse``
    maps back: ``feistel(feistel(p, n, k), n, k, inverse=True) == p``. numpy only (the
    path without a C compiler; see ``feistel_groups``)."""
    x = np.asarray(positions, dtype=np.int64).astype(np.uint64)
    n = np.broadcast_to(np.asarray(n, dtype=np.int64), x.shape)
    keys = np.broadcast_to(np.asarray(keys, dtype=np.uint64), (x.size, ROUNDS))
    half = half_bits(n)
    out = x.copy()
    todo = np.arange(x.size)
    while todo.size:  # cycle-walking: at most 4n values, so 4 passes expected at worst
        out[todo] = _network(out[todo], half[todo], keys[todo], inverse)
        todo = todo[out[todo] >= n[todo].astype(np.uint64)]
    return out.astype(np.int64)


def _numpy_permutation(seed: int, pool: int, epoch: int, n: int) -> np.ndarray:
    rng = np.random.default_rng([seed, pool, epoch, 0x6D6978])
    return rng.permutation(n).astype(np.int64)


def records_for(
    seed: int, pool: int, n_records: int, consumed: np.ndarray, algorithm: str = FEISTEL
) -> np.ndarray:
    """The record read at each read number (0, 1, 2, ... over the pool's whole life,
    across stages and continued mixtures) of a pool of ``n_records`` records."""
    consumed = np.asarray(consumed, dtype=np.int64)
    out = consumed % n_records
    epochs = consumed // n_records
    repeat = epochs > 0
    if not repeat.any():
        return out
    if algorithm == NUMPY:
        for e in np.unique(epochs[repeat]).tolist():
            sel = epochs == e
            out[sel] = _numpy_permutation(seed, pool, int(e), n_records)[out[sel]]
        return out
    if algorithm != FEISTEL:
        raise ValueError(f"unknown record permutation {algorithm!r}; known: {ALGORITHMS}")
    rep = epochs[repeat]
    lo, hi = int(rep.min()), int(rep.max())  # a chunk reads a pool in a few epochs at most
    table = np.stack([round_keys(seed, pool, e) for e in range(lo, hi + 1)])
    sizes = np.full(hi - lo + 1, n_records, dtype=np.int64)
    out[repeat] = feistel_groups(out[repeat], rep - lo, sizes, table)
    return out


def positions_of(
    seed: int, pool: int, n_records: int, epoch: int, records: np.ndarray, algorithm: str = FEISTEL
) -> np.ndarray:
    """Where each record is read within ``epoch`` (its position in [0, n)): the inverse."""
    records = np.asarray(records, dtype=np.int64)
    if epoch == 0:
        return records.copy()
    if algorithm == NUMPY:
        perm = _numpy_permutation(seed, pool, epoch, n_records)
        where = np.empty(n_records, dtype=np.int64)
        where[perm] = np.arange(n_records, dtype=np.int64)
        return where[records]
    keys = round_keys(seed, pool, epoch)[None, :]
    group = np.zeros(records.size, dtype=np.int32)
    return feistel_groups(records, group, np.array([n_records]), keys, inverse=True)

"""numpy's shuffle draws replayed in pieces: the first positions of
``rng.permutation(m)`` without the other ``m - r`` in memory, for the shuffles' ``head``.

``Generator.permutation(m)`` is a Fisher-Yates shuffle of ``arange(m)``: for ``i`` from
``m - 1`` down to 1 it swaps positions ``i`` and ``j_i``, ``j_i`` a bounded draw in
``[0, i]`` (Lemire's method on 32-bit words of the PCG64 stream, a word rejected when its
low product falls under ``2**32 mod (i + 1)``). ``U32Stream`` gives those words from any
offset (``PCG64.advance``), ``bounded`` replays the draws of many ranges at once, and
``permutation_head`` traces the first ``r`` positions back through the swaps.

Trade-off: the swaps are drawn twice (once to find where each block of them starts in the
stream, once in reverse block order to trace the positions back), and time stays linear in
``m``; memory is ``r`` plus one block of draws. The replay equals numpy's exactly (the
shuffles' tests compare every ``head`` with ``permutation(...)[:n]``); it depends on
numpy's algorithm, which numpy keeps stable for a seeded ``Generator``.
"""

from __future__ import annotations

import math

import numpy as np

BLOCK = 1 << 18  # swaps drawn at a time: 2 MiB of draws


class U32Stream:
    """The 32-bit words a PCG64 ``Generator`` draws from (each 64-bit output low half
    first), from word ``offset`` on, with ``consumed`` counting the words taken."""

    def __init__(self, seed: int, stream: tuple[int, ...], offset: int = 0):
        from shardcore.shuffle import rng

        bits = rng(seed, *stream).bit_generator
        if not isinstance(bits, np.random.PCG64):
            raise TypeError(f"the shuffles draw from PCG64, not {type(bits).__name__}")
        self._bits = bits.advance(offset // 2)
        self._buf = np.zeros(0, dtype=np.uint64)
        self._pos = 0
        self.consumed = offset
        if offset % 2:
            self._refill(1)
            self._pos = 1

    def _refill(self, k: int) -> None:
        raw = self._bits.random_raw(max(k, BLOCK) // 2 + 1)
        self._buf = np.concatenate([self._buf[self._pos :], raw.view(np.uint32)]).astype(np.uint64)
        self._pos = 0

    def take(self, k: int) -> np.ndarray:
        if self._pos + k > len(self._buf):
            self._refill(k)
        out = self._buf[self._pos : self._pos + k]
        self._pos += k
        self.consumed += k
        return out

    def give_back(self, k: int) -> None:
        """Return the last ``k`` words taken (drawn ahead of a rejection)."""
        self._pos -= k
        self.consumed -= k


def _swaps(words: U32Stream, hi: int, lo: int) -> np.ndarray:
    """``j_i`` for ``i`` from ``hi - 1`` down to ``lo`` (>= 1), in that order: numpy's
    ``random_interval(i)``, a word masked to the bits of ``i`` and rejected while over
    ``i``. Vectorized: a word is surely taken when under ``i`` less the words before it,
    surely rejected when over ``i``; the first word in between is decided alone."""
    out = np.empty(hi - lo, dtype=np.int64)
    k, i = 0, hi - 1
    while i >= lo:
        bits = i.bit_length()
        need = i - max(lo, 1 << (bits - 1)) + 1  # draws left under this mask
        size = int(min(2 * need + 8, 4 * math.isqrt(1 << bits) + 64))
        v = (words.take(size) & np.uint64((1 << bits) - 1)).astype(np.int64)
        t = np.arange(size)
        unsure = np.flatnonzero((v > i - t) & (v <= i))
        a = int(unsure[0]) if unsure.size else size
        taken = np.flatnonzero(v[:a] <= i)
        if taken.size >= need:
            out[k : k + need] = v[taken[:need]]
            words.give_back(size - int(taken[need - 1]) - 1)
            k, i = k + need, i - need
            continue
        out[k : k + taken.size] = v[taken]
        k, i = k + taken.size, i - taken.size
        if a < size:
            if v[a] <= i:
                out[k] = v[a]
                k, i = k + 1, i - 1
            words.give_back(size - a - 1)
    return out


def permutation_head(
    seed: int, stream: tuple[int, ...], m: int, r: int, *, block: int = BLOCK
) -> np.ndarray:
    """``rng(seed, *stream).permutation(m)[:r]`` in memory ``O(r + block)``."""
    from shardcore.shuffle import rng

    r = max(0, min(int(r), int(m)))
    if r == 0:
        return np.zeros(0, dtype=np.int64)
    if m <= max(2 * r, block):  # the whole permutation costs no more than the trace
        return rng(seed, *stream).permutation(m)[:r]
    words = U32Stream(seed, stream)
    # Swaps i >= r move values into [0, r) from above; record where each block starts.
    starts = []
    for hi in range(m, r, -block):
        lo = max(r, hi - block)
        starts.append((hi, lo, words.consumed))
        _swaps(words, hi, lo)
    tail = _swaps(words, r, 1)  # i = r - 1 .. 1: within [0, r)
    # Traced back (i ascending), the value at each position p < r after the swaps i >= r:
    # a tracked position q < i moves to i when j_i == q.
    at = {p: p for p in range(r)}  # position now -> the position p it ends at
    for hi, lo, offset in reversed(starts):
        j = _swaps(U32Stream(seed, stream, offset), hi, lo)[::-1]  # i = lo .. hi - 1
        tracked = np.fromiter(at.keys(), dtype=np.int64, count=len(at))
        cand = np.flatnonzero(np.isin(j, tracked) | (j >= lo))
        for i, q in zip((cand + lo).tolist(), j[cand].tolist(), strict=True):
            if q != i and q in at:
                at[i] = at.pop(q)
    head = np.empty(r, dtype=np.int64)
    for value, p in at.items():
        head[p] = value
    for i, q in zip(range(r - 1, 0, -1), tail.tolist(), strict=True):
        head[i], head[q] = head[q], head[i]
    return head

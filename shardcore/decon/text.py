"""Text normalization and word n-gram hashing for decontamination, shared by the benchmark
side (``shardcore.decon.index``) and the document side, so that both hash identically.

Normalization, in this order (what the established tools do, made exact):

1. Unicode NFKC (compatibility forms fold: full-width letters, ligatures, superscripts);
2. ``str.casefold`` (case, including ``ß`` -> ``ss``);
3. every punctuation (Unicode category P*) and symbol (S*) character becomes a space;
4. whitespace runs collapse to one space; words are what remains between spaces.

Hashing is vectorized over a batch's bytes, with no per-word Python work: a word's hash
is a polynomial of its UTF-8 bytes modulo 2^64 (prefix sums of ``byte * B^i``, shifted back
by the inverse of the odd base ``B``), mixed by splitmix64's finalizer. The hash of the
L words starting at word j is ``H_L(j) = H_{L-1}(j) * B2 + w[j + L - 1]``, so one pass per
extra word gives every length up to n; a key mixes ``H_L`` with ``L``, so that lengths
never collide with each other. Keys are 64-bit: with K benchmark n-grams a document
n-gram matches one by chance with probability K / 2^64 (5e6 n-grams: 3e-13).
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterator, Sequence

import numpy as np

NORMALIZATION = "nfkc-casefold-punct-space-1"  # enters every index fingerprint

_B = np.uint64(0x100000001B3)  # odd, so invertible modulo 2^64
_B_INV = np.uint64(pow(0x100000001B3, -1, 1 << 64))
_B2 = np.uint64(0x9E3779B97F4A7C15)
_LEN = 0xD6E8FEB86659FD93
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
# Text bytes hashed at once: the arrays of one chunk are about 24 bytes per text byte.
CHUNK_BYTES = 1 << 20

_strip: dict[int, int] | None = None
_powers: tuple[np.ndarray, np.ndarray] = (np.ones(1, np.uint64), np.ones(1, np.uint64))


def _strip_table() -> dict[int, int]:
    """Every punctuation or symbol code point (categories P*, S*) -> a space, for
    ``str.translate`` (built once per process; CPython caches its ASCII part)."""
    global _strip
    if _strip is None:
        _strip = {
            cp: 32 for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp))[0] in "PS"
        }
    return _strip


def normalize(text: str) -> str:
    """``text`` normalized (module docstring): its words separated by single spaces."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(folded.translate(_strip_table()).split())


def words(text: str) -> list[str]:
    """The normalized words of ``text``."""
    return normalize(text).split()


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, in place."""
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def _power_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """B^i and B^-i modulo 2^64 for i < n (grown by doubling, kept for the process)."""
    global _powers
    if _powers[0].size < n:
        size = max(n, 2 * _powers[0].size)
        fwd = np.full(size, _B, dtype=np.uint64)
        fwd[0] = 1
        inv = np.full(size, _B_INV, dtype=np.uint64)
        inv[0] = 1
        _powers = (np.cumprod(fwd, dtype=np.uint64), np.cumprod(inv, dtype=np.uint64))
    return _powers[0][:n], _powers[1][:n]


def word_hashes(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """For normalized text ``data`` (UTF-8, words separated by single spaces; several texts
    joined by spaces): each word's hash and its first byte's offset."""
    b = np.frombuffer(data, dtype=np.uint8)
    if not b.size:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    word = b != 32
    edge = np.diff(word.astype(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edge == 1)
    ends = np.flatnonzero(edge == -1)
    fwd, inv = _power_tables(b.size)
    acc = b.astype(np.uint64)
    acc += np.uint64(1)
    acc *= fwd
    np.cumsum(acc, out=acc)
    before = np.where(starts > 0, acc[np.maximum(starts - 1, 0)], np.uint64(0))
    raw = (acc[ends - 1] - before) * inv[starts]
    return _mix(raw), starts.astype(np.int64)


def ngram_keys(
    hashes: np.ndarray, group: np.ndarray, lengths: Sequence[int]
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """For word hashes ``hashes`` whose text each word belongs to is ``group`` (ascending),
    per length L of ``lengths`` (ascending): ``(L, start, keys)``, the key of every run of
    L words inside one text and the index of its first word."""
    n = len(hashes)
    top = max(lengths, default=0)
    if not n or not top:
        return
    acc = hashes.copy()
    wanted = set(lengths)
    for length in range(1, top + 1):
        if length > 1:
            m = n - length + 1
            if m <= 0:
                return
            acc = acc[:m]
            acc *= _B2
            acc += hashes[length - 1 : length - 1 + m]
        if length not in wanted:
            continue
        m = n - length + 1
        start = np.flatnonzero(group[:m] == group[length - 1 : length - 1 + m])
        keys = acc[start] + np.uint64((_LEN * length) % (1 << 64))
        yield length, start, _mix(keys)

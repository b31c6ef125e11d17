"""Near-duplicates: MinHash signatures (datasketch) over word shingles, LSH banding,
candidate pairs verified on their signatures, connected components as duplicate
clusters; and an exact-duplicate hash.

Per document:

- ``exact_hash``: xxh3-64 of the normalized text (NFKC, lowercase, runs of whitespace as
  one space, trimmed); equal hashes are always put in one cluster, whatever LSH says.
- ``dup_cluster``: the smallest doc_id of the document's cluster (its own doc_id when it
  has no duplicate), ``dup_size``: documents in the cluster, ``dup_rank``: the document's
  position in the cluster by doc_id (0 = the first; ``dup_rank = 0`` keeps each text once).

Algorithm, with ``r = num_perm / bands`` rows per band: each document's shingles (``shingle``
consecutive words of the normalized text) are hashed with xxh32 into a datasketch MinHash
of ``num_perm`` permutations (the units: one per tokenized shard, signatures written to a
scratch ``.npy``, 4 * num_perm bytes per document). Then, band by band, every document's
band key (its r values folded into 64 bits) is sorted; documents sharing a key are
candidates, and each is joined to the first document of its run when their signatures
agree on at least ``threshold`` of the permutations (the estimated Jaccard similarity;
this check removes LSH's false candidates). Pairs become clusters with scipy's connected
components.

Memory: the signatures stay memory-mapped; one band's keys are 16 bytes per document (key
and index); when they exceed ``memory_mb`` a band is processed in several passes, each over
the keys of one hash partition; the accumulated pairs are compacted into one edge per
clustered document (to its cluster's smallest member) whenever they exceed the budget, so
the peak is about 16 bytes per document per pass plus 16 per clustered document.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import xxhash

from shardcore import atomic, pack
from shardcore.annotate import Annotator
from shardcore.errors import InputError
from shardcore.kernels import compile_kernel
from shardcore.npy_rows import RowsFile

_WORD = re.compile(r"\w+", re.UNICODE)
_FOLD = np.uint64(0x100000001B3)


def normalize(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def exact_hash(text: str) -> int:
    return xxhash.xxh3_64_intdigest(normalize(text).encode("utf-8"))


def _take_rows(arr: np.ndarray, ix: np.ndarray) -> np.ndarray:
    """Rows ``ix`` of ``arr``; of a memory-mapped file, read with ``pread`` (runs of
    consecutive rows at once): indexing the map keeps every page it touched resident (and
    the kernel maps their neighbours), soon the whole file's worth for rows read at
    random, as a bucket unit reads signatures."""
    name = getattr(arr, "filename", None)
    if not isinstance(arr, np.memmap) or name is None or not len(ix):
        return np.asarray(arr[ix])
    want, back = np.unique(ix, return_inverse=True)
    row = arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    cuts = np.flatnonzero(np.diff(want) != 1) + 1
    out = np.empty((len(want), *arr.shape[1:]), dtype=arr.dtype)
    flat = out.reshape(-1).view(np.uint8)
    fd = os.open(name, os.O_RDONLY)
    try:
        if os.fstat(fd).st_size != arr.offset + arr.nbytes:  # a view of part of the file
            return np.asarray(arr[ix])
        for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(want)].tolist(), strict=True):
            nbytes = (hi - lo) * row
            got = os.preadv(
                fd, [flat[lo * row : lo * row + nbytes].data], arr.offset + int(want[lo]) * row
            )
            if got != nbytes:
                raise OSError(f"{name}: short read of rows {want[lo]}-{want[hi - 1]}")
    finally:
        os.close(fd)
    return out[back]


def shingles(text: str, n: int) -> set[bytes]:
    """The document's word n-grams (words: runs of letters/digits of the normalized text);
    a text of fewer than n words is one shingle."""
    return _shingles_of(normalize(text), n)


def _shingles_of(norm: str, n: int) -> set[bytes]:
    """``shingles`` of an already normalized text."""
    words = _WORD.findall(norm)
    if len(words) < n:
        return {" ".join(words).encode("utf-8")}
    return {" ".join(words[i : i + n]).encode("utf-8") for i in range(len(words) - n + 1)}


def shingle_hashes(joined: list[bytes], words: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The xxh32 hashes of every document's word n-grams (uint32, document after document)
    and their number per document. Document d is given as its words joined by single
    spaces (``joined[d]``, UTF-8; ``words[d]`` words): its n-grams are then the runs of n
    consecutive words of that string, or the whole string when it has fewer words (so the
    hashes are those of ``shingles``' byte strings; a repeated n-gram is hashed again,
    which changes no minimum). Hashed by a compiled kernel, else one call per n-gram."""
    words = np.asarray(words, dtype=np.int64)
    lengths = np.fromiter(map(len, joined), dtype=np.int64, count=len(joined))
    doc_at = np.zeros(len(joined), dtype=np.int64)
    np.cumsum(lengths[:-1], out=doc_at[1:])
    buf = np.frombuffer(b"".join(joined), dtype=np.uint8)
    # Words in order over the whole batch (no word holds a space; a document of w >= 1
    # words has w - 1 spaces): a word starts at its document's start or after a space, and
    # ends at a space or at its document's end.
    space = buf == 0x20
    edge = np.zeros(buf.size + 1, dtype=bool)
    edge[doc_at[lengths > 0]] = True
    start = edge[:-1] | np.r_[False, space[:-1]]
    edge[:] = False
    edge[(doc_at + lengths)[lengths > 0]] = True
    end = edge[1:] | np.r_[space[1:], False]
    word_start = np.flatnonzero(start & ~space)
    word_end = np.flatnonzero(end & ~space) + 1
    first_word = np.zeros(len(joined), dtype=np.int64)
    np.cumsum(words[:-1], out=first_word[1:])
    long = words >= n
    counts = np.where(long, words - n + 1, 1)
    out_at = np.zeros(len(joined), dtype=np.int64)
    np.cumsum(counts[:-1], out=out_at[1:])
    starts = np.empty(int(counts.sum()), dtype=np.int64)
    ends = np.empty_like(starts)
    # A document of at least n words: its windows of n words.
    where = pack.ranges(out_at[long], counts[long])
    window = pack.ranges(first_word[long], counts[long])
    starts[where] = word_start[window]
    ends[where] = word_end[window + n - 1]
    # A shorter one: the whole string.
    starts[out_at[~long]] = doc_at[~long]
    ends[out_at[~long]] = doc_at[~long] + lengths[~long]
    return _xxh32_ranges(buf, starts, ends - starts), counts


def _xxh32_ranges(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """xxh32 (seed 0) of each range ``buf[starts[k] : starts[k] + lengths[k]]``."""
    out = np.empty(len(starts), dtype=np.uint32)
    lib = _hash_kernel()
    if lib is None:
        data = buf.tobytes()
        h32 = xxhash.xxh32_intdigest
        out[:] = [
            h32(data[s : s + n]) for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
        ]
        return out
    if len(starts):
        buf = np.ascontiguousarray(buf)
        starts = np.ascontiguousarray(starts, dtype=np.int64)
        lengths = np.ascontiguousarray(lengths, dtype=np.int64)
        lib.sy_xxh32_ranges(
            buf.ctypes.data, starts.ctypes.data, lengths.ctypes.data, len(starts), out.ctypes.data
        )
    return out


# XXH32 (seed 0) of byte ranges of one buffer, after the algorithm's published
# specification (checked against the xxhash package by the tests), and the affine32
# MinHash of documents' shingle hashes.
_HASH_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#define P1 0x9E3779B1U
#define P2 0x85EBCA77U
#define P3 0xC2B2AE3DU
#define P4 0x27D4EB2FU
#define P5 0x165667B1U
static inline uint32_t rotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint32_t step(uint32_t acc, uint32_t in) { return rotl(acc + in * P2, 13) * P1; }
static uint32_t xxh32(const uint8_t *p, int64_t len) {
    const uint8_t *end = p + len;
    uint32_t h;
    if (len >= 16) {
        uint32_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = 0U - P1;
        const uint8_t *limit = end - 16;
        do {
            v1 = step(v1, le32(p)); v2 = step(v2, le32(p + 4));
            v3 = step(v3, le32(p + 8)); v4 = step(v4, le32(p + 12));
            p += 16;
        } while (p <= limit);
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    } else {
        h = P5;
    }
    h += (uint32_t)len;
    while (p + 4 <= end) { h = rotl(h + le32(p) * P3, 17) * P4; p += 4; }
    while (p < end) { h = rotl(h + (*p) * P5, 11) * P1; p++; }
    h ^= h >> 15; h *= P2; h ^= h >> 13; h *= P3; h ^= h >> 16;
    return h;
}
void sy_minhash(const uint32_t *h, const int64_t *counts, int64_t docs, const uint32_t *a,
                const uint32_t *b, int64_t perms, uint32_t *out) {
    for (int64_t d = 0; d < docs; ++d) {
        uint32_t *o = out + d * perms;
        for (int64_t k = 0; k < perms; ++k) o[k] = 0xFFFFFFFFU;
        for (int64_t i = 0; i < counts[d]; ++i) {
            uint32_t x = h[i];
            x ^= x >> 16; x *= 0x85EBCA6BU; x ^= x >> 13; x *= 0xC2B2AE35U; x ^= x >> 16;
            for (int64_t k = 0; k < perms; ++k) {
                uint32_t v = a[k] * x + b[k];
                o[k] = v < o[k] ? v : o[k];
            }
        }
        h += counts[d];
    }
}
void sy_xxh32_ranges(const uint8_t *buf, const int64_t *starts, const int64_t *lengths,
                     int64_t n, uint32_t *out) {
    for (int64_t k = 0; k < n; ++k) out[k] = xxh32(buf + starts[k], lengths[k]);
}
"""


def _hash_kernel() -> ctypes.CDLL | None:
    lib = compile_kernel("minhash", _HASH_SOURCE, ["-O3", "-fPIC", "-shared"])
    if lib is not None and not getattr(lib, "_sy_typed", False):
        p = ctypes.c_void_p
        lib.sy_xxh32_ranges.argtypes = [p, p, p, ctypes.c_int64, p]
        lib.sy_xxh32_ranges.restype = None
        lib.sy_minhash.argtypes = [p, p, ctypes.c_int64, p, p, ctypes.c_int64, p]
        lib.sy_minhash.restype = None
        lib._sy_typed = True  # type: ignore[attr-defined]  # a mark on the loaded library
    return lib


# MurmurHash3's 32-bit finalizer, with which the affine32 scheme mixes each shingle's hash
# before its permutations.
_FMIX32 = (np.uint32(16), np.uint32(0x85EBCA6B), np.uint32(13), np.uint32(0xC2B2AE35))
# Shingle hashes permuted at once: [rows, num_perm] uint32 (8 MiB at 128 permutations).
_SIGN_ROWS = 1 << 14


def minhash_signatures(
    hashes: np.ndarray, counts: np.ndarray, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """MinHash signatures (uint32 [documents, len(a)]) of documents whose shingle hashes
    (uint32) are ``hashes``, ``counts[d]`` of them for document d (at least one each), in
    order: per permutation k, the minimum over the document's shingles of
    ``a[k] * fmix32(h) + b[k]`` modulo 2^32 (datasketch's ``affine32`` scheme: the same
    values as its ``MinHash.update_batch``). Permuted a block of documents at a time."""
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    out = np.empty((len(counts), len(a)), dtype=np.uint32)
    lib = _hash_kernel()
    if lib is not None:
        h = np.ascontiguousarray(hashes, dtype=np.uint32)
        a, b = (np.ascontiguousarray(x, dtype=np.uint32) for x in (a, b))
        if int(counts.sum()) != len(h):
            raise ValueError(f"{len(h)} shingle hashes for {int(counts.sum())} counted")
        lib.sy_minhash(
            h.ctypes.data,
            counts.ctypes.data,
            len(counts),
            a.ctypes.data,
            b.ctypes.data,
            len(a),
            out.ctypes.data,
        )
        return out
    s1, m1, s2, m2 = _FMIX32
    h = hashes.astype(np.uint32)
    with np.errstate(over="ignore"):
        h = h ^ (h >> s1)
        h *= m1
        h ^= h >> s2
        h *= m2
        h ^= h >> s1
    ends = np.cumsum(counts)
    d = 0
    while d < len(counts):
        # Documents [d, e): as many as fit _SIGN_ROWS shingles, and at least one.
        lo = int(ends[d - 1]) if d else 0
        e = max(d + 1, int(np.searchsorted(ends, lo + _SIGN_ROWS, side="right")))
        hi = int(ends[e - 1])
        block = h[lo:hi, None] * a[None, :]
        block += b[None, :]
        starts = np.r_[0, ends[d : e - 1] - lo]
        out[d:e] = np.minimum.reduceat(block, starts, axis=0)
        d = e
    return out


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def band_keys(sig: np.ndarray, band: int, rows: int) -> np.ndarray:
    """One uint64 per document from its ``rows`` values of band ``band`` (FNV-style fold:
    a collision only adds a candidate that the signature check refuses)."""
    key = np.full(len(sig), np.uint64(0xCBF29CE484222325), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(band * rows, (band + 1) * rows):  # one column at a time: 8 B/doc
            key ^= sig[:, j]
            key *= _FOLD
    return key


def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each of n nodes, the smallest node of its connected component."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if not len(a):
        return np.arange(n, dtype=np.int64)
    g = coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n)).tocsr()
    _, labels = connected_components(g, directed=False)
    first = np.full(labels.max() + 1, n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n, dtype=np.int64))
    return first[labels]


class NearDuplicates(Annotator):
    name: ClassVar[str] = "minhash"
    version: ClassVar[str] = "1"
    defaults: ClassVar[dict[str, Any]] = {
        "num_perm": 128,
        "bands": 16,
        "shingle": 5,
        "threshold": 0.75,
        "seed": 1,
        "memory_mb": 1024,
    }
    corpus_level: ClassVar[bool] = True
    work_files: ClassVar[tuple[str, ...]] = ("sig.npy", "exact.npy")
    _perms: tuple[np.ndarray, np.ndarray] | None = None  # (a, b), made on first use

    def check_params(self) -> None:
        p = self.params
        if p["num_perm"] < 2 or p["bands"] < 1 or p["num_perm"] % p["bands"]:
            raise InputError(
                f"annotator 'minhash': num_perm ({p['num_perm']}) must be a multiple of "
                f"bands ({p['bands']}), both positive"
            )
        if p["shingle"] < 1:
            raise InputError("annotator 'minhash': shingle must be at least 1")
        if not 0.0 < p["threshold"] <= 1.0:
            raise InputError("annotator 'minhash': threshold must be in (0, 1]")
        if p["memory_mb"] < 1:
            raise InputError("annotator 'minhash': memory_mb must be at least 1")

    def fields(self) -> list[pa.Field]:
        return [
            pa.field("dup_cluster", pa.int64()),
            pa.field("dup_size", pa.int32()),
            pa.field("dup_rank", pa.int32()),
            pa.field("exact_hash", pa.uint64()),
        ]

    # ------------------------------------------------------------- units: signatures
    def signatures(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(uint32 [n, num_perm] MinHash signatures, uint64 [n] exact hashes): datasketch's
        ``MinHash`` (scheme ``affine32``) of every document's ``shingles``, each hashed
        with ``xxh32``, computed for the whole batch at once: the shingles' hashes by
        ``shingle_hashes``, their permutations by ``minhash_signatures``."""
        joined, words = [], np.empty(len(texts), dtype=np.int64)
        exact = np.empty(len(texts), dtype=np.uint64)
        find, h64 = _WORD.findall, xxhash.xxh3_64_intdigest
        for i, t in enumerate(texts):
            norm = normalize(t)
            w = find(norm)
            words[i] = len(w)
            joined.append(" ".join(w).encode("utf-8"))
            exact[i] = h64(norm.encode("utf-8"))
        hashes, counts = shingle_hashes(joined, words, self.params["shingle"])
        a, b = self._permutations()
        return minhash_signatures(hashes, counts, a, b), exact

    def _permutations(self) -> tuple[np.ndarray, np.ndarray]:
        """datasketch's affine32 permutations (a, b) for this num_perm and seed."""
        if self._perms is None:
            from datasketch import MinHash

            p = self.params
            m = MinHash(p["num_perm"], seed=p["seed"], hashfunc=xxhash.xxh32_intdigest)
            a, b = m.permutations
            self._perms = (np.asarray(a, dtype=np.uint32), np.asarray(b, dtype=np.uint32))
        return self._perms

    def prepare(self, batches: Iterable[list[str]], final: Path, *, first_doc_id: int) -> None:
        """One unit: the shard's signatures and exact hashes into the scratch directory
        ``final`` (renamed into place complete), a batch of texts at a time."""
        with atomic.atomic_path(final) as tmp:
            tmp.mkdir()
            with (
                RowsFile(tmp / "sig.npy", np.uint32, (self.params["num_perm"],)) as sig,
                RowsFile(tmp / "exact.npy", np.uint64) as exact,
            ):
                for texts in batches:
                    s, e = self.signatures(texts)
                    sig.append(s)
                    exact.append(e)

    # ---------------------------------------------------------- finish: the clusters
    def finish(self, work: list[Path]) -> list[dict[str, Any]]:
        sigs = [np.load(w / "sig.npy", mmap_mode="r") for w in work]
        exact = (
            np.concatenate([np.load(w / "exact.npy") for w in work])
            if work
            else np.array([], np.uint64)
        )
        counts = [len(s) for s in sigs]
        roots = self.cluster(sigs, exact)
        n = len(roots)
        size = np.bincount(roots, minlength=n)[roots].astype(np.int32)
        order = np.lexsort((np.arange(n), roots))
        sorted_roots = roots[order]
        starts = np.r_[0, np.flatnonzero(sorted_roots[1:] != sorted_roots[:-1]) + 1]
        group_start = np.repeat(starts, np.diff(np.r_[starts, n]))
        rank = np.empty(n, dtype=np.int32)
        rank[order] = np.arange(n) - group_start
        out, lo = [], 0
        for c in counts:
            out.append(
                {
                    "dup_cluster": roots[lo : lo + c],  # row index == doc_id offset, see below
                    "dup_size": size[lo : lo + c],
                    "dup_rank": rank[lo : lo + c],
                    "exact_hash": exact[lo : lo + c],
                }
            )
            lo += c
        return out

    def cluster(
        self, sigs: list[np.ndarray], exact: np.ndarray, *, budget_bytes: int | None = None
    ) -> np.ndarray:
        """For every document (shards concatenated, so index = doc_id), the smallest index
        of its duplicate cluster. ``budget_bytes`` overrides ``memory_mb``; what the run
        needed is left in ``self.stats`` (passes per band, compactions, edges)."""
        p = self.params
        n = sum(len(s) for s in sigs)
        rows = p["num_perm"] // p["bands"]
        need = math.ceil(p["num_perm"] * p["threshold"] - 1e-9)
        budget = max(budget_bytes if budget_bytes is not None else p["memory_mb"] << 20, 16)
        passes = max(1, -(-16 * n // budget))
        edge_cap = max(budget // 16, n)
        starts = np.cumsum([0, *[len(s) for s in sigs]])
        ea: list[np.ndarray] = []
        eb: list[np.ndarray] = []
        stored = compactions = 0
        # exact duplicates: always one cluster
        if n:
            o = np.argsort(exact, kind="stable")
            same = exact[o][1:] == exact[o][:-1]
            ea.append(o[1:][same])
            eb.append(o[:-1][same])
            stored += int(same.sum())
        for band in range(p["bands"]):
            keys = (
                np.concatenate([band_keys(np.asarray(s), band, rows) for s in sigs])
                if n
                else np.array([], np.uint64)
            )
            for part in range(passes):
                idx = (
                    np.flatnonzero(keys % np.uint64(passes) == np.uint64(part))
                    if passes > 1
                    else np.arange(n)
                )
                k = keys[idx]
                o = np.argsort(k, kind="stable")
                ks, members = k[o], idx[o]
                if len(ks) < 2:
                    continue
                new_run = np.r_[True, ks[1:] != ks[:-1]]
                run_first = members[np.maximum.accumulate(np.where(new_run, np.arange(len(ks)), 0))]
                cand = ~new_run
                a, b = members[cand], run_first[cand]
                if not len(a):
                    continue
                agree = self._agreement(sigs, starts, a, b)
                ok = agree >= need
                ea.append(a[ok])
                eb.append(b[ok])
                stored += int(ok.sum())
                if stored > edge_cap:  # compact: one edge per clustered document
                    roots = _components(n, np.concatenate(ea), np.concatenate(eb))
                    moved = np.flatnonzero(roots != np.arange(n))
                    ea, eb, stored = [moved], [roots[moved]], len(moved)
                    compactions += 1
        self.stats = {"documents": n, "passes": passes, "compactions": compactions, "edges": stored}
        if not ea:
            return np.arange(n, dtype=np.int64)
        return _components(n, np.concatenate(ea), np.concatenate(eb))

    @staticmethod
    def _agreement(
        sigs: Sequence[np.ndarray], starts: np.ndarray, a: np.ndarray, b: np.ndarray
    ) -> np.ndarray:
        """How many permutations the signatures of documents a[i] and b[i] agree on."""

        def rows(ix: np.ndarray) -> np.ndarray:
            shard = np.searchsorted(starts, ix, side="right") - 1
            out = np.empty((len(ix), sigs[0].shape[1]), dtype=np.uint32)
            for s in np.unique(shard):
                sel = shard == s
                out[sel] = _take_rows(sigs[s], ix[sel] - starts[s])
            return out

        agree = np.empty(len(a), dtype=np.int32)
        step = 1 << 16
        for lo in range(0, len(a), step):
            agree[lo : lo + step] = (rows(a[lo : lo + step]) == rows(b[lo : lo + step])).sum(axis=1)
        return agree

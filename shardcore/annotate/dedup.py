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

from shardcore import atomic
from shardcore.annotate import Annotator
from shardcore.errors import InputError
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
    words = _WORD.findall(normalize(text))
    if len(words) < n:
        return {" ".join(words).encode("utf-8")}
    return {" ".join(words[i : i + n]).encode("utf-8") for i in range(len(words) - n + 1)}


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
        """(uint32 [n, num_perm] MinHash signatures, uint64 [n] exact hashes)."""
        from datasketch import MinHash

        p = self.params
        template = MinHash(p["num_perm"], seed=p["seed"], hashfunc=xxhash.xxh32_intdigest)
        sig = np.empty((len(texts), p["num_perm"]), dtype=np.uint32)
        exact = np.empty(len(texts), dtype=np.uint64)
        for i, t in enumerate(texts):
            m = MinHash(
                p["num_perm"],
                seed=p["seed"],
                hashfunc=xxhash.xxh32_intdigest,
                permutations=template.permutations,
                scheme="affine32",
            )
            m.update_batch(list(shingles(t, p["shingle"])))
            sig[i] = m.hashvalues
            exact[i] = exact_hash(t)
        return sig, exact

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

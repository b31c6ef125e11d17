"""The bucket rows of MinHash near-duplicates: per document and band its key (and the
exact hash's as one band more), filed by partition (``key mod parts``) as signature units
write them; a bucket unit orders a partition's rows by band, key and document, takes each
run of equal keys as candidate pairs, and keeps the pairs whose signatures agree (the
edges). Shared by the ``minhash`` annotation's units (``shardcore.annotate.dedup_units``)
and the cross-source stage (``shardcore.annotate.neardup``)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from shardcore import atomic, storage, units
from shardcore.annotate.dedup import NearDuplicates, band_keys
from shardcore.npy_rows import RemoteRows, RowsFile

ROW = np.dtype([("key", "<u8"), ("band", "<u8"), ("doc", "<u8")])  # 24 bytes
# Children per copy in the tree that joins a run of exact copies (its depth: log_64 of the
# copies, 5 for 10^8: within the clusters' rounds).
EXACT_FAN_IN = 64
_C1, _C2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
_BAND = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finalizer: keys spread evenly over the partitions."""
    x = x.copy()
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(33)
        x *= _C1
        x ^= x >> np.uint64(33)
        x *= _C2
        x ^= x >> np.uint64(33)
    return x


class PartitionKeys:
    """The bucket rows (band key, band, global document) of documents ``first``,
    ``first + 1``, ... into the directory ``final``, one file per partition (``p<q>.npy``,
    ``q = key mod parts``), appended a batch at a time and renamed into place complete."""

    def __init__(self, final: Path, params: dict[str, Any], parts: int, first: int) -> None:
        self.final, self.params, self.parts, self.next = final, params, parts, first

    def __enter__(self) -> PartitionKeys:
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self._commit = atomic.atomic_path(self.final)
        tmp = self._commit.__enter__()
        tmp.mkdir()
        self.files = [RowsFile(tmp / f"p{q}.npy", ROW) for q in range(self.parts)]
        return self

    def add(self, sig: np.ndarray, exact: np.ndarray) -> None:
        table = key_rows(self.params, sig, exact, self.next)
        self.next += len(sig)
        which = table["key"] % np.uint64(self.parts)
        for q, f in enumerate(self.files):
            f.append(table[which == q])

    def __exit__(self, kind: type[BaseException] | None, value: Any, tb: Any) -> None:
        for f in self.files:
            f.__exit__(kind, value, tb)
        if kind is None:
            shutil.rmtree(
                self.final, ignore_errors=True
            )  # a killed run's, renamed before its marker
        self._commit.__exit__(kind, value, tb)


def key_rows(params: dict[str, Any], sig: np.ndarray, exact: np.ndarray, first: int) -> np.ndarray:
    """The bucket rows of documents ``first``, ``first + 1``, ...: per band its key, and
    the exact hash's key as band ``bands``."""
    docs = np.arange(first, first + len(sig), dtype=np.uint64)
    bands, rows = params["bands"], params["num_perm"] // params["bands"]
    with np.errstate(over="ignore"):
        salt = [_BAND * np.uint64(b + 1) for b in range(bands)]
    keys = [_mix(band_keys(sig, b, rows) ^ salt[b]) for b in range(bands)]
    keys.append(_mix(exact))
    table = np.empty(len(docs) * (bands + 1), ROW)
    table["key"] = np.concatenate(keys) if len(docs) else []
    table["band"] = np.repeat(np.arange(bands + 1, dtype=np.uint64), len(docs))
    table["doc"] = np.tile(docs, bands + 1)
    return table


def verified_edges(
    rows: np.ndarray,
    sigs: list[np.ndarray],
    starts: np.ndarray,
    params: dict[str, Any],
    exacts: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The edges of one partition's bucket rows: documents sharing a (band, key), each
    joined to the first of its run when their signatures (``sigs``, the signature units'
    in global order, unit k's first document ``starts[k]``) agree on at least
    ``threshold`` of the permutations; exact-hash rows joined without the check. With
    ``exacts`` (the units' exact hashes), a band's pair of exact copies is left out: the
    exact-hash band joins them already (an exact copy would otherwise bring an edge per
    band, 17 where one does), and the exact-hash band joins a run as a tree of
    ``EXACT_FAN_IN`` children a copy."""
    rows = rows[bucket_order(rows)]
    if len(rows) < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    same = (rows["key"][1:] == rows["key"][:-1]) & (rows["band"][1:] == rows["band"][:-1])
    new_run = np.r_[True, ~same]
    first = np.maximum.accumulate(np.where(new_run, np.arange(len(rows)), 0))
    cand = ~new_run
    a = rows["doc"][cand].astype(np.int64)
    b = rows["doc"][first[cand]].astype(np.int64)
    exact = rows["band"][cand] == np.uint64(params["bands"])
    if exacts is not None:  # keep the exact band's rows and the pairs that are not copies
        keep = exact | (_gather(exacts, starts, a) != _gather(exacts, starts, b))
        # Exact copies join a tree of their run, each the ``EXACT_FAN_IN``-th child of an
        # earlier copy, not the run's first: the same clusters, and no copy has more than
        # EXACT_FAN_IN + 1 edges (the first of 10^8 copies would hold 10^8 in its range).
        index = np.flatnonzero(cand)
        parent = first[index] + (index - first[index] - 1) // EXACT_FAN_IN
        b = np.where(exact, rows["doc"][parent].astype(np.int64), b)
        a, b, exact = a[keep], b[keep], exact[keep]
    need = math.ceil(params["num_perm"] * params["threshold"] - 1e-9)
    check = ~exact
    ok = exact.copy()
    if check.any():
        ok[check] = NearDuplicates._agreement(sigs, starts, a[check], b[check]) >= need
    return a[ok], b[ok]


def bucket_order(rows: np.ndarray) -> np.ndarray:
    """The order of bucket ``rows`` by (band, key, doc), ``np.lexsort``'s, in about a
    quarter of its time: a stable sort by band (few values, a counting sort), then each
    band's keys sorted, and last the documents of each run of equal keys (the copies and
    the candidates: few) put in order."""
    band = rows["band"]
    if not band.size:
        return np.zeros(0, dtype=np.int64)
    small = np.uint8 if int(band.max()) < 256 else np.uint16
    order = np.argsort(band.astype(small), kind="stable")
    key, doc = rows["key"], rows["doc"]
    at = 0
    for count in np.bincount(band.astype(np.int64)).tolist():
        seg = order[at : at + count]
        k = key[seg]
        o = np.argsort(k)
        ks = k[o]
        tie = np.flatnonzero(ks[1:] == ks[:-1])
        if tie.size:
            members = np.unique(np.r_[tie, tie + 1])
            sub = o[members]
            o[members] = sub[np.lexsort((doc[seg[sub]], k[sub]))]
        order[at : at + count] = seg[o]
        at += count
    return order


def _gather(arrays: list[np.ndarray], starts: np.ndarray, ix: np.ndarray) -> np.ndarray:
    """The values of global documents ``ix`` from per-unit arrays (unit k from
    ``starts[k]``)."""
    unit = np.searchsorted(starts, ix, side="right") - 1
    out = np.empty(len(ix), dtype=arrays[0].dtype if arrays else np.uint64)
    for k in np.unique(unit).tolist():
        sel = unit == k
        out[sel] = arrays[k][ix[sel] - starts[k]]
    return out


def row_files(out: Path, rels: list[str], *, ranged: bool) -> list[Any]:
    """The signature units' ``.npy`` files ``rels`` (signatures, exact hashes) as a bucket
    unit reads them: memory-mapped in the output (or the unit's work directory), or, for a
    plan whose bucket units read them by ranges (``ranged``) running on object storage,
    the rows of its candidates fetched by ranges (``npy_rows.RemoteRows``): the unit does
    not download the whole corpus's signatures."""
    remote = units.remote_output() if ranged else None
    if remote is None:
        return [np.load(out / rel, mmap_mode="r") for rel in rels]
    store = storage.open_store(remote)
    return [RemoteRows(store, rel) for rel in rels]

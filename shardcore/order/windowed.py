"""The characteristic vectors a ``greedy_block`` ordering reads of a window of a schedule,
read by range: the same vectors as ``recipe.pool_characteristics(pools).take(rows)``, in
memory that grows with the window, not with the pools.

``pool_families`` makes, once per unit, what every window shares: each family's values over
all the pools' documents (the pool family, each property's values as text, the
document-length bins from the lengths' counts, whose quantiles are numpy's to the bit:
``shardcore.order.quantiles``) and the widest record's number of characteristics (the
vectors' slots: the greedy sums over them, so a window's vectors keep the pools' width).
Both are streamed passes over the documents tables and segments, a batch at a time.
``sample_characteristics`` then reads, for a window's samples, only their records'
segments (the shards holding them) and their documents' columns between the first of
them and the last, keeping the values of those documents alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcore.errors import InputError
from shardcore.order.quantiles import quantiles_of_counts
from shardcore.order.recipe import PAD, Characteristics, Labels, from_segments
from shardcore.pool import PoolReader

N_TOKENS = "_doc.n_tokens"
BATCH = 1 << 18


@dataclass
class PoolFamilies:
    """What every window of a schedule over ``readers`` shares (see the module)."""

    readers: list[PoolReader]
    by: list[str]
    values: dict[str, np.ndarray]  # per family, its values over every document, sorted
    edges: np.ndarray | None  # the length bins' edges (None: no length family)
    width: int
    first: np.ndarray  # each pool's first row among all the pools' records

    def labels(self, pool: int, columns: Mapping[str, np.ndarray], n: int) -> dict[str, Labels]:
        """The families of ``n`` documents of pool ``pool`` (their ``columns``)."""
        out: dict[str, Labels] = {}
        if "pool" in self.values:
            code = np.searchsorted(self.values["pool"], pool)
            out["pool"] = Labels(np.full(n, code, dtype=np.int64), self.values["pool"])
        for name in self.by:
            text = np.asarray(columns[name]).astype(str)
            out[name] = Labels(np.searchsorted(self.values[name], text), self.values[name])
        if self.edges is not None:
            lengths = np.asarray(columns[N_TOKENS], dtype=np.int64).astype(np.float64)
            held = np.searchsorted(self.edges, lengths, side="right")
            out["length"] = Labels(
                np.searchsorted(self.values["length"], held), self.values["length"]
            )
        return out


def pool_families(
    pools: Sequence[str | os.PathLike], options: Mapping[str, Any] | None = None
) -> PoolFamilies:
    """The families' values, the length bins and the width over ``pools`` (see the module),
    from ``options`` as ``greedy_block`` takes them (``by``, ``length_bins``: a number,
    default 100; false: none)."""
    opts = dict(options or {})
    bins = opts.get("length_bins", True)
    bins = 100 if bins is True else (int(bins) if bins else None)
    readers = [PoolReader(p) for p in pools]
    by = list(opts.get("by") or [])
    if not readers:
        raise InputError("pools: need at least one pool")
    values: dict[str, np.ndarray] = {}
    if len(readers) > 1:
        values["pool"] = np.array([i for i, r in enumerate(readers) if r.num_documents > 0])
    for name in by:
        values[name] = np.zeros(0, dtype=str)
    counts = np.zeros(0, dtype=np.int64)
    need = [*by, N_TOKENS] if bins else by
    for r in readers:
        for _, batch in r.iter_document_columns(need, BATCH) if need else []:
            for name in by:
                here = np.unique(np.asarray(batch[name]).astype(str))
                values[name] = np.union1d(values[name], here)
            if bins:
                more = np.bincount(np.asarray(batch[N_TOKENS], dtype=np.int64))
                counts = np.pad(counts, (0, max(0, more.size - counts.size)))
                counts[: more.size] += more
    edges = None
    if bins:
        q = np.arange(1, bins) / bins
        edges = quantiles_of_counts(counts, q) if counts.sum() else np.zeros(q.size)
        present = np.flatnonzero(counts).astype(np.float64)
        values["length"] = np.unique(np.searchsorted(edges, present, side="right")).astype(np.int64)
    if not values:
        raise InputError("families: nothing to balance (one pool, no --by, no length bins)")
    first = np.r_[0, np.cumsum([r.num_records for r in readers])[:-1]].astype(np.int64)
    fam = PoolFamilies(readers, by, values, edges, 1, first)
    fam.width = _width(fam, need)
    return fam


def _width(fam: PoolFamilies, need: list[str]) -> int:
    """The most characteristics any record of the pools has (a pass over every shard)."""
    width = 1
    for i, r in enumerate(fam.readers):
        for shard, info in enumerate(r.manifest["shards"]):
            seg = r.read_segments(shard)
            if not seg.seg_doc.size:
                continue
            lo = int(info["first_document"])
            docs = seg.seg_doc.astype(np.int64)
            real = docs >= 0
            if not real.any():
                continue
            span = (lo + int(docs[real].min()), lo + int(docs[real].max()) + 1)
            cols = _columns(r, need, span)
            labels = fam.labels(i, cols, span[1] - span[0])
            per = np.diff(seg.seg_record_offsets)
            rec = np.repeat(np.arange(seg.num_records, dtype=np.int64), per)
            local = np.where(real, docs + lo - span[0], -1)
            ch = from_segments(rec, local, seg.seg_length, seg.num_records, labels)
            width = max(width, int(ch.idx.shape[1]))
    return width


def _columns(r: PoolReader, need: list[str], span: tuple[int, int]) -> dict[str, np.ndarray]:
    if not need:
        return {}
    _, cols = r.document_columns(need, rows=slice(*span))
    return cols


def sample_characteristics(
    fam: PoolFamilies, pool_of: np.ndarray, records: np.ndarray
) -> Characteristics:
    """Per sample (``pool_of``: its pool, ``records``: its record there), its
    characteristic vector, as ``pool_characteristics(pools).take(rows)`` gives it."""
    rows = fam.first[np.asarray(pool_of, dtype=np.int64)] + np.asarray(records, dtype=np.int64)
    urows, inv = np.unique(rows, return_inverse=True)
    seg_rec, seg_doc, seg_len = [], [], []
    labels: dict[str, list[np.ndarray]] = {}
    values: dict[str, np.ndarray] = {}
    base = 0
    for i, r in enumerate(fam.readers):
        lo, hi = np.searchsorted(urows, [fam.first[i], fam.first[i] + r.num_records])
        if lo == hi:
            continue
        got = _record_segments(r, urows[lo:hi] - fam.first[i])
        rec, docs, ln = got
        real = docs >= 0
        wanted, local = np.unique(docs[real], return_inverse=True)
        cols = _document_values(r, _need(fam), wanted)
        for name, lab in fam.labels(i, cols, wanted.size).items():
            labels.setdefault(name, []).append(lab.codes)
            values[name] = lab.values
        doc = np.full(docs.size, -1, dtype=np.int64)
        doc[real] = local + base
        base += wanted.size
        seg_rec.append(rec + lo)
        seg_doc.append(doc)
        seg_len.append(ln)
    empty = np.zeros(0, dtype=np.int64)
    joined = {
        name: Labels(np.concatenate(codes) if codes else empty, values[name])
        for name, codes in labels.items()
    }
    ch = from_segments(
        np.concatenate(seg_rec) if seg_rec else empty,
        np.concatenate(seg_doc) if seg_doc else empty,
        np.concatenate(seg_len) if seg_len else empty,
        urows.size,
        {name: joined[name] for name in fam.values if name in joined},
    )
    return _widen(ch, fam.width).take(inv)


def _need(fam: PoolFamilies) -> list[str]:
    return [*fam.by, N_TOKENS] if fam.edges is not None else list(fam.by)


def _widen(ch: Characteristics, width: int) -> Characteristics:
    """``ch`` with its slots padded to ``width`` (as the pools' vectors have them)."""
    extra = width - ch.idx.shape[1]
    if extra <= 0:
        return ch
    idx = np.pad(ch.idx, ((0, 0), (0, extra)), constant_values=PAD)
    val = np.pad(ch.val, ((0, 0), (0, extra)))
    return Characteristics(idx, val, ch.family_of, ch.families, ch.names)


def _record_segments(
    r: PoolReader, records: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The segments of ``records`` (sorted, unique) of pool ``r``: each one's position in
    ``records``, its pool document (-1: padding) and its tokens; only the shards holding
    them are read."""
    shards = np.searchsorted(np.asarray(r.cumulative), records, side="right") - 1
    out_rec, out_doc, out_len = [], [], []
    for k in np.unique(shards).tolist():
        pos = np.flatnonzero(shards == k)
        seg = r.read_segments(k)
        local = records[pos] - int(r.cumulative[k])
        a = seg.seg_record_offsets[local].astype(np.int64)
        n = seg.seg_record_offsets[local + 1].astype(np.int64) - a
        idx = np.repeat(a - np.r_[0, np.cumsum(n)[:-1]], n) + np.arange(int(n.sum()))
        d = seg.seg_doc[idx].astype(np.int64)
        first = int(r.manifest["shards"][k]["first_document"])
        out_rec.append(np.repeat(pos, n))
        out_doc.append(np.where(d >= 0, d + first, -1))
        out_len.append(seg.seg_length[idx].astype(np.int64))
    return tuple(np.concatenate(x) for x in (out_rec, out_doc, out_len))  # type: ignore[return-value]


def _document_values(r: PoolReader, need: list[str], docs: np.ndarray) -> dict[str, np.ndarray]:
    """``need``'s values of the pool documents ``docs`` (sorted, unique), read a batch at a
    time from the first of them to the last, keeping theirs alone."""
    out: dict[str, np.ndarray] = {}
    if not need or not docs.size:
        return {name: np.zeros(0) for name in need}
    for first, batch in _batches(r, need, (int(docs[0]), int(docs[-1]) + 1)):
        lo, hi = np.searchsorted(docs, [first, first + len(batch[need[0]])])
        for name in need:
            col = np.asarray(batch[name])
            if name not in out:
                out[name] = np.empty(docs.size, dtype=col.dtype)
            out[name][lo:hi] = col[docs[lo:hi] - first]
    return out


def _batches(
    r: PoolReader, need: list[str], span: tuple[int, int]
) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    yield from r.iter_document_columns(need, BATCH, rows=span)

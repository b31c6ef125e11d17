"""The diversity recipe on token counts ("Don't Shuffle, Optimize", third approach).

A record (a packed sequence) holds tokens of one or more documents. Its *characteristic
vector* counts, per characteristic j, the tokens of the record whose document has j: the
pool it came from, a value of a categorical document property (a cluster, a language), or
the quantile bin of the document's length. Characteristics come in *families*; inside a
family every token counts once, so a family's counts sum to the record's tokens (padding
belongs to no family).

With T_j the tokens of j placed so far, S_f the tokens placed (in family f), tau_j the
global token share of j in its family and c_{s,j}, L_{s,f} the candidate's counts, the
next record minimizes::

    f(s) = sum_f lambda_f * sum_{j in f} [(T_j + c_{s,j}) - tau_j (S_f + L_{s,f})]^2

(the recipe's f_3 with one lambda per family). With e_j = T_j - tau_j S_f (the current
error) and E_f = sum_{j in f} tau_j e_j, everything that is the same for every candidate
drops out and::

    f(s) = const + 2 sum_j lambda c_{s,j} e_j - 2 sum_f lambda_f L_{s,f} E_f + q(s)

where q(s) depends on the record only. Scoring a record is a gather over its few non-zero
counts (records are stored padded to the most characteristics any record has).

The greedy that minimizes it (exact, and the windowed one that scales) is in
``shardcore.order.greedy``; this module builds the vectors and measures orders.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcore import pack
from shardcore.errors import InputError
from shardcore.order.quantiles import quantiles_of_counts
from shardcore.pool import PoolReader

# A pool given as its reader or as its directory (local or on object storage).
PoolLike = PoolReader | str | os.PathLike

PAD = -1  # characteristic index of an unused slot


@dataclass(frozen=True)
class Labels:
    """A family's labels of some documents as ``codes`` into ``values``: every value the
    family takes over the pool, sorted (as ``np.unique`` sorts them), though the documents
    labelled hold only some of them."""

    codes: np.ndarray
    values: np.ndarray

    @property
    def plain(self) -> np.ndarray:
        return self.values[self.codes]


@dataclass(frozen=True)
class Characteristics:
    """Per record, its non-zero characteristic token counts, padded to ``width`` slots.

    ``idx`` (M, width) int32: characteristic index in 0..V-1 or -1 for an unused slot;
    ``val`` (M, width) float32: tokens; ``family_of`` (V,): family index of each
    characteristic; ``families``: family names; ``names``: per family, the value of each
    of its characteristics (as text)."""

    idx: np.ndarray
    val: np.ndarray
    family_of: np.ndarray
    families: list[str]
    names: list[list[str]]

    @property
    def num_records(self) -> int:
        return int(self.idx.shape[0])

    @property
    def num_characteristics(self) -> int:
        return int(self.family_of.size)

    def family_tokens(self) -> np.ndarray:
        """(M, F): each record's tokens counted in each family."""
        fam = np.where(self.idx >= 0, self.family_of[np.maximum(self.idx, 0)], len(self.families))
        nf1 = len(self.families) + 1
        key = (np.arange(self.num_records, dtype=np.int64)[:, None] * nf1 + fam).ravel()
        out = np.bincount(key, weights=self.val.ravel(), minlength=self.num_records * nf1)
        return out.reshape(self.num_records, nf1)[:, :-1]

    def totals(self) -> np.ndarray:
        """(V,): tokens of each characteristic over all records."""
        ok = self.idx >= 0
        return np.bincount(
            self.idx[ok], weights=self.val[ok].astype(np.float64), minlength=self.family_of.size
        )

    def tau(self) -> np.ndarray:
        """(V,): each characteristic's global token share inside its family."""
        tot = self.totals()
        fam_tot = np.bincount(self.family_of, weights=tot, minlength=len(self.families))
        return tot / np.maximum(fam_tot[self.family_of], 1e-300)

    def take(self, rows: np.ndarray) -> Characteristics:
        return Characteristics(
            self.idx[rows], self.val[rows], self.family_of, self.families, self.names
        )


def length_bins(doc_lengths: np.ndarray, bins: int = 100) -> np.ndarray:
    """Per document, its quantile bin (0..bins-1) of document length: edges at the
    1/bins, 2/bins, ... quantiles of the lengths (equal lengths share a bin, so fewer
    bins may be used)."""
    if bins < 1:
        raise InputError(f"length_bins: need at least 1 bin, got {bins}")
    lengths = np.asarray(doc_lengths, dtype=np.float64)
    if lengths.size == 0:
        return np.zeros(0, dtype=np.int64)
    edges = np.quantile(lengths, np.arange(1, bins) / bins)
    return np.searchsorted(edges, lengths, side="right").astype(np.int64)


def from_segments(
    seg_record: np.ndarray,
    seg_doc: np.ndarray,
    seg_length: np.ndarray,
    num_records: int,
    doc_families: Mapping[str, np.ndarray | Labels],
) -> Characteristics:
    """Characteristic vectors from segments: segment i holds ``seg_length[i]`` tokens of
    document ``seg_doc[i]`` (-1: padding) in record ``seg_record[i]``; ``doc_families``:
    name -> one label per document (any dtype; a record's tokens of a document count for
    that document's label), or ``Labels`` (the family's characteristics are then all of
    its ``values``, also those no document here has)."""
    seg_record = np.asarray(seg_record, dtype=np.int64)
    seg_doc = np.asarray(seg_doc, dtype=np.int64)
    seg_length = np.asarray(seg_length, dtype=np.float64)
    if not (seg_record.size == seg_doc.size == seg_length.size):
        raise InputError("segments: record, doc and length arrays differ in length")
    if not doc_families:
        raise InputError("families: need at least one characteristic family")
    real = seg_doc >= 0
    rec, doc, ln = seg_record[real], seg_doc[real], seg_length[real]
    keys, names, family_of, base = [], [], [], 0
    for f, (name, given) in enumerate(doc_families.items()):
        labels = given.codes if isinstance(given, Labels) else np.asarray(given)
        if labels.ndim != 1:
            raise InputError(f"families: {name!r} needs one label per document")
        if doc.size and doc.max() >= labels.size:
            raise InputError(
                f"families: {name!r} has {labels.size} labels but segments name document "
                f"{int(doc.max())}"
            )
        if isinstance(given, Labels):  # the values over the pool, not only these documents'
            values, code = given.values, labels
        else:
            values, code = np.unique(labels, return_inverse=True)
        names.append([str(v) for v in values.tolist()])
        family_of.append(np.full(values.size, f, dtype=np.int64))
        keys.append(rec * 0 + (code.ravel()[doc] + base))
        base += values.size
    v = base
    ch = np.concatenate(keys)
    rr = np.tile(rec, len(doc_families))
    ww = np.tile(ln, len(doc_families))
    # Sum tokens per (record, characteristic), then lay each record's out in slots.
    key = rr * v + ch
    uk, inv = np.unique(key, return_inverse=True)
    tok = np.bincount(inv.ravel(), weights=ww)
    urec, uch = uk // v, uk % v
    counts = np.bincount(urec, minlength=num_records)
    width = max(1, int(counts.max()) if counts.size else 1)
    first = np.r_[0, np.cumsum(counts)[:-1]]
    slot = np.arange(uk.size) - first[urec]
    idx = np.full((num_records, width), PAD, dtype=np.int32)
    val = np.zeros((num_records, width), dtype=np.float32)
    idx[urec, slot] = uch
    val[urec, slot] = tok
    return Characteristics(idx, val, np.concatenate(family_of), list(doc_families), names)


def from_labels(families: Mapping[str, np.ndarray], tokens: float = 1.0) -> Characteristics:
    """One label per record and family (each record all of one value): the record-level
    case, every record counting ``tokens`` tokens."""
    sizes = {len(v) for v in families.values()}
    if len(sizes) != 1:
        raise InputError(f"families: label arrays differ in length: {sorted(sizes)}")
    m = sizes.pop()
    r = np.arange(m)
    return from_segments(r, r, np.full(m, tokens), m, families)


def document_columns(pool: PoolLike, names: Sequence[str]) -> tuple[int, dict[str, np.ndarray]]:
    """The number of documents of a pool and, per name, one value per document, reading
    only the columns of the documents table those names need
    (``PoolReader.document_columns``)."""
    # A pool on object storage is read from its checked local copy, as PoolReader reads it.
    reader = pool if isinstance(pool, PoolReader) else PoolReader(pool)
    return reader.document_columns(list(names))


def pool_characteristics(
    pools: Sequence[PoolLike],
    *,
    by: Sequence[str] = (),
    length_bins_count: int | None = 100,
    pool_family: bool = True,
    limit: int | None = None,
    documents: bool = False,
) -> Any:
    """Characteristic vectors of the records of one or more pools (``PoolReader`` objects
    or paths), in pool order, pool after pool, from their segments: the pool family
    (with several pools), each document property in ``by``, and document-length quantile
    bins over all the pools' documents (``length_bins_count`` bins; None: none). Of each
    pool's documents table only the columns those need are read (``document_columns``).
    ``limit``: only the first that many records (only the shards holding them are read;
    of one pool, its documents' columns by row range, the length bins and each property's
    values from streamed passes: ``_first_records``). ``documents``: also
    return the documents the records hold, to shuffle them (``document_shuffles``):
    ``(characteristics, {"families", "lengths", "seq_len"})``, one pool only."""

    readers = [p if isinstance(p, PoolReader) else PoolReader(p) for p in pools]
    if not readers:
        raise InputError("pools: need at least one pool")
    if limit is not None and len(readers) == 1:
        return _first_records(readers[0], by, length_bins_count, limit, documents)
    recs: list[Any] = []
    docs: list[Any] = []
    lens: list[Any] = []
    doc_pool: list[Any] = []
    doc_len: list[Any] = []
    props: dict[str, list[Any]] = {n: [] for n in by}
    rec_base = doc_base = 0
    if documents and len(readers) != 1:
        raise InputError("documents: one pool only")
    for i, pr in enumerate(readers):
        need = list(by) + (["_doc.n_tokens"] if length_bins_count or documents else [])
        ndocs, cols = document_columns(pr, need)
        for shard, info in enumerate(pr.manifest["shards"]):
            if limit is not None and rec_base + int(pr.cumulative[shard]) >= limit:
                break
            seg = pr.segments(shard)
            per = np.diff(seg.seg_record_offsets)
            r = np.repeat(np.arange(seg.num_records, dtype=np.int64), per)
            recs.append(r + rec_base + int(pr.cumulative[shard]))
            d = seg.seg_doc.astype(np.int64)
            docs.append(np.where(d >= 0, d + int(info["first_document"]) + doc_base, -1))
            lens.append(seg.seg_length.astype(np.int64))
        doc_pool.append(np.full(ndocs, i, dtype=np.int64))
        if length_bins_count or documents:
            doc_len.append(np.asarray(cols["_doc.n_tokens"], dtype=np.int64))
        for n in by:
            props[n].append(np.asarray(cols[n]).astype(str))
        rec_base += pr.num_records
        doc_base += ndocs
    fams: dict[str, np.ndarray] = {}
    if pool_family and len(readers) > 1:
        fams["pool"] = np.concatenate(doc_pool)
    for n in by:
        fams[n] = np.concatenate(props[n])
    if length_bins_count:
        fams["length"] = length_bins(np.concatenate(doc_len), length_bins_count)
    if not fams:
        raise InputError("families: nothing to balance (one pool, no --by, no length bins)")
    rec, doc, ln = np.concatenate(recs), np.concatenate(docs), np.concatenate(lens)
    if limit is not None and limit < rec_base:
        keep = rec < limit
        rec, doc, ln, rec_base = rec[keep], doc[keep], ln[keep], max(0, int(limit))
    ch = from_segments(rec, doc, ln, rec_base, fams)
    if not documents:
        return ch
    # Pool documents are numbered in record order: the records hold the first ``held``,
    # each packed with the pool's BOS token, if any, before it.
    held = int(doc.max()) + 1 if doc.size else 0
    bos = int(bool(readers[0].manifest.get("params", {}).get("bos")))
    return ch, {
        "families": {k: v[:held] for k, v in fams.items()},
        "lengths": np.concatenate(doc_len)[:held] + bos,
        "seq_len": int(readers[0].manifest["seq_len"]),
    }


def _first_records(
    pr: PoolReader, by: Sequence[str], length_bins_count: int | None, limit: int, documents: bool
) -> Any:
    """``pool_characteristics`` of one pool's first ``limit`` records, in memory that does
    not grow with the pool: the segments of the shards holding them, the columns of the
    documents they hold by row range, and what the families need of every document (each
    property's values, the length counts for the quantile bins) in streamed passes."""
    recs, docs, lens = [], [], []
    for shard, info in enumerate(pr.manifest["shards"]):
        if int(pr.cumulative[shard]) >= limit:
            break
        seg = pr.segments(shard)
        per = np.diff(seg.seg_record_offsets)
        recs.append(
            np.repeat(np.arange(seg.num_records, dtype=np.int64), per) + pr.cumulative[shard]
        )
        d = seg.seg_doc.astype(np.int64)
        docs.append(np.where(d >= 0, d + int(info["first_document"]), -1))
        lens.append(seg.seg_length.astype(np.int64))
    empty = np.zeros(0, dtype=np.int64)
    rec, doc, ln = (np.concatenate(x) if x else empty for x in (recs, docs, lens))
    fams, lengths = _first_families(
        pr, by, length_bins_count, int(doc.max()) + 1 if doc.size else 0
    )
    if not fams:
        raise InputError("families: nothing to balance (one pool, no --by, no length bins)")
    num_records = pr.num_records
    if limit < num_records:
        keep = rec < limit
        rec, doc, ln, num_records = rec[keep], doc[keep], ln[keep], max(0, int(limit))
    ch = from_segments(rec, doc, ln, num_records, fams)
    if not documents:
        return ch
    held = int(doc.max()) + 1 if doc.size else 0
    bos = int(bool(pr.manifest.get("params", {}).get("bos")))
    return ch, {
        "families": {k: v.plain[:held] for k, v in fams.items()},
        "lengths": lengths[:held] + bos,
        "seq_len": int(pr.manifest["seq_len"]),
    }


def _first_families(
    pr: PoolReader, by: Sequence[str], length_bins_count: int | None, read: int
) -> tuple[dict[str, Labels], np.ndarray]:
    """The families of the pool's first ``read`` documents, each with every value it takes
    over the pool (``Labels``), and those documents' lengths."""
    _, cols = pr.document_columns([*by, "_doc.n_tokens"], rows=slice(0, read))
    values: dict[str, np.ndarray] = {n: np.zeros(0, dtype=str) for n in by}
    counts = np.zeros(0, dtype=np.int64)
    streamed = [*by, "_doc.n_tokens"] if length_bins_count else list(by)
    for _, batch in pr.iter_document_columns(streamed, 1 << 18) if streamed else []:
        for n in by:
            values[n] = np.union1d(values[n], np.unique(np.asarray(batch[n]).astype(str)))
        if length_bins_count:
            more = np.bincount(np.asarray(batch["_doc.n_tokens"], dtype=np.int64))
            counts = np.pad(counts, (0, max(0, more.size - counts.size)))
            counts[: more.size] += more
    fams = {
        n: Labels(np.searchsorted(values[n], np.asarray(cols[n]).astype(str)), values[n])
        for n in by
    }
    lengths = np.asarray(cols["_doc.n_tokens"], dtype=np.int64)
    if length_bins_count:
        if length_bins_count < 1:
            raise InputError(f"length_bins: need at least 1 bin, got {length_bins_count}")
        q = np.arange(1, length_bins_count) / length_bins_count
        edges = quantiles_of_counts(counts, q) if counts.sum() else np.zeros(q.size)
        present = np.flatnonzero(counts).astype(np.float64)
        taken = np.unique(np.searchsorted(edges, present, side="right")).astype(np.int64)
        held = np.searchsorted(edges, lengths.astype(np.float64), side="right")
        fams["length"] = Labels(np.searchsorted(taken, held), taken)
    return fams, lengths


def document_shuffles(docs: Mapping[str, Any]) -> Callable[[np.random.Generator], Characteristics]:
    """Random orders of a pool's documents (``pool_characteristics(..., documents=True)``),
    each packed into records of ``seq_len + 1`` tokens as a pool packs them: what a
    perfect document shuffle gives, the like of a pool's own order (a long document fills
    consecutive records in both; random orders of the records would split it)."""
    fams, lengths, seq_len = docs["families"], docs["lengths"], docs["seq_len"]

    def shuffle(rng: np.random.Generator) -> Characteristics:
        perm = rng.permutation(lengths.size)
        seg = pack.plan_packing(lengths[perm], seq_len).segments
        per = np.diff(seg.seg_record_offsets)
        record = np.repeat(np.arange(per.size, dtype=np.int64), per)
        d = seg.seg_doc.astype(np.int64)
        # Segment documents index the permuted order: label them by the original document.
        return from_segments(
            record, np.where(d >= 0, perm[np.maximum(d, 0)], -1), seg.seg_length, per.size, fams
        )

    return shuffle


# ---------------------------------------------------------------- measurements


def cumulative_error(
    ch: Characteristics, order: np.ndarray, *, checkpoints: int = 100
) -> dict[str, list[float]]:
    """The recipe's curve: at ``checkpoints`` evenly spaced points of training, per family,
    the Euclidean distance ||T - tau S|| between the tokens of each characteristic placed
    so far and their share of the tokens placed (in tokens). Returns ``{"position":
    [...], <family>: [...]}``."""
    m = ch.num_records
    order = np.asarray(order, dtype=np.int64)
    if order.size != m:
        raise InputError(f"order: {order.size} positions for {m} records")
    c = max(1, min(checkpoints, m))
    ends = np.array([int((i + 1) * m // c) for i in range(c)])
    pos_bin = np.searchsorted(ends, np.arange(m), side="right")  # checkpoint of each position
    v = ch.num_characteristics
    idx, val = ch.idx[order], ch.val[order].astype(np.float64)
    ok = idx >= 0
    b = np.broadcast_to(pos_bin[:, None], idx.shape)[ok]
    grid = np.bincount(b * v + idx[ok], weights=val[ok], minlength=c * v).reshape(c, v)
    T = np.cumsum(grid, axis=0)
    tau = ch.tau()
    out: dict[str, list[float]] = {"position": ends.tolist()}
    for f, name in enumerate(ch.families):
        cols = ch.family_of == f
        S = T[:, cols].sum(1, keepdims=True)
        out[name] = np.sqrt(((T[:, cols] - tau[cols][None, :] * S) ** 2).sum(1)).tolist()
    return out


def batch_errors(ch: Characteristics, order: np.ndarray, batch_size: int) -> dict[str, np.ndarray]:
    """Per family, per consecutive batch of ``batch_size`` records (a last partial batch
    is ignored): the Euclidean distance between the batch's token shares of the family's
    characteristics and their global shares. Lower is more diverse (0: the batch has the
    global composition)."""
    m = ch.num_records
    nb = m // batch_size
    if batch_size < 1 or nb == 0:
        raise InputError(f"batch_size: {batch_size} is not in [1, {m}]")
    order = np.asarray(order, dtype=np.int64)[: nb * batch_size]
    v = ch.num_characteristics
    idx, val = ch.idx[order], ch.val[order].astype(np.float64)
    ok = idx >= 0
    b = np.broadcast_to((np.arange(order.size) // batch_size)[:, None], idx.shape)[ok]
    grid = np.bincount(b * v + idx[ok], weights=val[ok], minlength=nb * v).reshape(nb, v)
    tau = ch.tau()
    out = {}
    for f, name in enumerate(ch.families):
        cols = ch.family_of == f
        g = grid[:, cols]
        share = g / np.maximum(g.sum(1, keepdims=True), 1e-300)
        out[name] = np.sqrt(((share - tau[cols][None, :]) ** 2).sum(1))
    return out


# A distribution of per-batch errors needs this many batches; fewer are not judged.
MIN_BATCHES = 8
# An order is "less even than random orders" only past this many times the largest random
# order's error: a random order's own error spreads widely (one random walk per family:
# its mean cumulative error reached 1.7x the largest of 8 others' in 600 trials; its mean
# batch error 1.2x with 8 batches), while an order that is not shuffled sits 15-80x off.
CUMULATIVE_TOLERANCE = 2.0
BATCH_TOLERANCE = 1.25
# Below this many times the random orders' mean error an order is more even than one (as
# ``shardcore.quality.verdict`` says of window deviation).
EVENER = 0.8


def recipe_report(
    ch: Characteristics,
    order: np.ndarray,
    *,
    batch_size: int = 256,
    trials: int = 8,
    checkpoints: int = 20,
    seed: int = 0,
    shuffle: Callable[[np.random.Generator], Characteristics] | None = None,
) -> dict[str, Any]:
    """The recipe's two measurements of ``order`` against ``trials`` random permutations
    of the same records (or ``trials`` orders ``shuffle(rng)`` gives, as characteristic
    vectors in their order: ``document_shuffles`` for a pool; ``baseline`` says which),
    per family, each with a verdict (``cumulative_verdict``,
    ``batch_verdict``: ``{"kind": better|random|worse|unjudged, "ok", "text"}``):

    - ``cumulative``: the cumulative error at each checkpoint for the order, and the
      lowest / mean over the random permutations; ``below_all``: whether the order's error
      is below every random permutation's at every checkpoint; ``mean_ratio``: the order's
      mean error over the checkpoints against the random orders' mean, ``max_ratio``
      against their lowest at any checkpoint;
    - ``batches``: per-batch error (``batch_errors``) over ``num_batches`` whole batches of
      ``batch_size`` records: the order's worst (largest) batch, the random permutations'
      best (smallest) batch and mean batch; ``worst_beats_best``: whether the order's
      worst batch is more diverse than the best random batch; ``histogram``: the
      distribution of both on shared bins. With fewer than ``MIN_BATCHES`` batches there is
      no distribution to compare: only ``num_batches`` and the verdict saying so.

    Records of different stages are not comparable (each stage has its own shares): a
    staged order is measured stage by stage (``shardcore.quality.recipe_quality``)."""
    rng = np.random.default_rng(seed)
    m = ch.num_records
    if batch_size < 1:
        raise InputError(f"batch_size: {batch_size} is not >= 1")
    nb = m // batch_size
    judged = nb >= MIN_BATCHES
    mine_c = cumulative_error(ch, order, checkpoints=checkpoints)
    mine_b = batch_errors(ch, order, batch_size) if judged else {}
    rand_c, rand_b = [], []
    for _ in range(max(1, trials)):
        if shuffle is None:
            other, p = ch, rng.permutation(m)
        else:
            other = shuffle(rng)
            p = np.arange(other.num_records)
        rand_c.append(cumulative_error(other, p, checkpoints=checkpoints))
        if judged:
            # A repacked order may hold a record more or less: its own whole batches.
            rand_b.append(batch_errors(other, p, batch_size))
    out: dict[str, Any] = {
        "num_records": m,
        "batch_size": batch_size,
        "num_batches": nb,
        "trials": len(rand_c),
        "position": mine_c["position"],
        "baseline": "records" if shuffle is None else "documents",
        "min_batches": MIN_BATCHES,
        "families": {},
    }
    for name in ch.families:
        mc = np.asarray(mine_c[name])
        rc = np.asarray([r[name] for r in rand_c])
        # The last checkpoint is the whole set: every order ends at error 0 there.
        inner = slice(0, max(1, mc.size - 1))
        cum = {
            "order": mc.tolist(),
            "random_min": rc.min(0).tolist(),
            "random_mean": rc.mean(0).tolist(),
            # Each random order's mean error over the checkpoints: their spread.
            "random_means": rc[:, inner].mean(1).tolist(),
            "below_all": bool((mc[inner] < rc.min(0)[inner]).all()),
            "max_ratio": float(np.max(mc[inner] / np.maximum(rc.min(0)[inner], 1e-300))),
            "mean_ratio": float(mc[inner].mean() / max(float(rc[:, inner].mean()), 1e-300)),
        }
        cum["verdict"] = cumulative_verdict(cum)
        batches: dict[str, Any] = {"num_batches": nb, "batch_size": batch_size}
        if judged:
            each = [r[name] for r in rand_b]
            rb = np.concatenate(each)
            batches.update(
                {
                    "histogram": _histogram(mine_b[name], rb, len(rand_b)),
                    "order_worst": float(mine_b[name].max()),
                    "order_mean": float(mine_b[name].mean()),
                    "random_best": float(rb.min()),
                    "random_mean": float(rb.mean()),
                    "random_means": [float(e.mean()) for e in each],
                    "worst_beats_best": bool(mine_b[name].max() < rb.min()),
                }
            )
        batches["verdict"] = batch_verdict(batches)
        out["families"][name] = {"cumulative": cum, "batches": batches}
    return out


def cumulative_verdict(cum: Mapping[str, Any]) -> dict[str, Any]:
    """What the cumulative error says, in a sentence: below every random order at every
    checkpoint (the recipe's claim: "better"; so is a mean error below ``EVENER`` times
    the random orders'), within the random orders' own spread
    ("random": a shuffled order's), or beyond ``CUMULATIVE_TOLERANCE`` times the largest
    random order's mean error ("worse")."""
    ratio = float(cum.get("mean_ratio", 0.0))
    if cum.get("below_all"):
        return {
            "kind": "better",
            "ok": True,
            "text": "cumulative error below every random order's at every checkpoint "
            f"(on average {ratio:.2f}x theirs)",
        }
    if ratio < EVENER:
        return {
            "kind": "better",
            "ok": True,
            "text": f"cumulative error on average {ratio:.2f}x the random orders': more "
            "even than a random order, though not below every one at every "
            "checkpoint",
        }
    order = np.asarray(cum["order"][: max(1, len(cum["order"]) - 1)], dtype=np.float64)
    spread = cum.get("random_means") or [float(np.mean(cum["random_mean"][:-1] or [0.0]))]
    if float(order.mean()) <= CUMULATIVE_TOLERANCE * max(spread):
        return {
            "kind": "random",
            "ok": True,
            "text": "cumulative error like a random order's (on average "
            f"{ratio:.2f}x the random orders')",
        }
    return {
        "kind": "worse",
        "ok": False,
        "text": f"cumulative error above every random order's: on average {ratio:.1f}x "
        "the random orders'",
    }


def batch_verdict(batches: Mapping[str, Any]) -> dict[str, Any]:
    """What the per-batch errors say: nothing with fewer than ``MIN_BATCHES`` whole
    batches ("unjudged"); the order's worst batch more diverse than the best random one, or
    its mean batch error below ``EVENER`` times the random orders' ("better"); its mean
    batch error within ``BATCH_TOLERANCE`` times the largest random
    order's ("random"); else "worse"."""
    nb, bs = int(batches.get("num_batches", 0)), int(batches.get("batch_size", 0))
    if "order_mean" not in batches:
        return {
            "kind": "unjudged",
            "ok": True,
            "text": f"too few batches to judge the per-batch error: {nb} whole batch"
            f"{'' if nb == 1 else 'es'} of {bs:,}, and a distribution needs at "
            f"least {MIN_BATCHES}",
        }
    ratio = batches["order_mean"] / max(batches["random_mean"], 1e-300)
    if batches["worst_beats_best"]:
        return {
            "kind": "better",
            "ok": True,
            "text": "its worst batch is more diverse than the best random batch",
        }
    if ratio < EVENER:
        return {
            "kind": "better",
            "ok": True,
            "text": f"batches more diverse than a random order's (mean batch error "
            f"{ratio:.2f}x the random orders')",
        }
    spread = batches.get("random_means") or [batches["random_mean"]]
    if batches["order_mean"] <= BATCH_TOLERANCE * max(spread):
        return {
            "kind": "random",
            "ok": True,
            "text": f"batches as diverse as a random order's (mean batch error {ratio:.2f}x"
            " the random orders')",
        }
    return {
        "kind": "worse",
        "ok": False,
        "text": f"batches less diverse than a random order's: mean batch error {ratio:.1f}x "
        "the random orders'",
    }


def _histogram(mine: np.ndarray, rand: np.ndarray, trials: int, bins: int = 30) -> dict:
    """Per-batch errors of the order and of the random orders on shared bins (``edges``):
    ``order``, the order's batches per bin; ``random``, the random orders' per bin divided
    by ``trials`` (one random order's batches on average)."""
    hi = float(max(mine.max(), rand.max()))
    edges = np.linspace(0.0, hi if hi > 0 else 1.0, bins + 1)
    return {
        "edges": edges.tolist(),
        "order": np.histogram(mine, edges)[0].tolist(),
        "random": (np.histogram(rand, edges)[0] / max(1, trials)).tolist(),
    }


def min_copy_distance(groups: np.ndarray, order: np.ndarray) -> int:
    """The smallest number of positions between two copies of one group in ``order``
    (records with a group of their own do not count); -1 when no group has two copies."""
    g = np.asarray(groups)[np.asarray(order)]
    _, code = np.unique(g, return_inverse=True)
    code = code.ravel()
    pos = np.argsort(code, kind="stable")
    c = code[pos]
    same = c[1:] == c[:-1]
    if not same.any():
        return -1
    return int(np.diff(pos)[same].min())


def window_deviation(
    ch: Characteristics, order: np.ndarray, window_sizes: Sequence[int], *, quantile: float = 1.0
) -> dict[str, list[float]]:
    """Per family and window size n: over every window of n consecutive records of
    ``order``, the ``quantile`` (1.0: the largest) of the window's deviation, the largest
    over the family's characteristics j of |share of j among the window's tokens of the
    family - tau_j| (token shares, as the objective counts).
    Dense in characteristics: O(M * V) work, for measuring, not for 10^7 records."""
    m = ch.num_records
    order = np.asarray(order, dtype=np.int64)
    if order.size != m:
        raise InputError(f"order: {order.size} positions for {m} records")
    for n in window_sizes:
        if not 1 <= int(n) <= m:
            raise InputError(f"window_sizes: {n} is not in [1, {m}] (number of records)")
    tau = ch.tau()
    idx, val = ch.idx[order], ch.val[order].astype(np.float64)
    out: dict[str, list[float]] = {"window_sizes": [int(n) for n in window_sizes]}
    for f, name in enumerate(ch.families):
        cols = np.flatnonzero(ch.family_of == f)
        local = np.full(ch.num_characteristics + 1, -1, dtype=np.int64)
        local[cols] = np.arange(cols.size)
        li = local[np.where(idx >= 0, idx, -1)]
        dense = np.zeros((m, cols.size))
        ok = li >= 0
        np.add.at(dense, (np.broadcast_to(np.arange(m)[:, None], li.shape)[ok], li[ok]), val[ok])
        cum = np.vstack([np.zeros((1, cols.size)), np.cumsum(dense, axis=0)])
        tot = cum.sum(1)
        worst = []
        for n in window_sizes:
            w = cum[n:] - cum[:-n]
            wt = np.maximum(tot[n:] - tot[:-n], 1e-300)[:, None]
            dev = np.abs(w / wt - tau[cols][None, :]).max(1)
            worst.append(float(np.quantile(dev, quantile)))
        out[name] = worst
    return out

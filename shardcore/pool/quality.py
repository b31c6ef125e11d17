"""A pool's shuffle-quality report measured on the first records of its order, in memory
that does not grow with the pool (``pool_quality``; the pool recorder's measurement and
``shardyard quality`` on a pool).

What it reads: the segments of the shards holding the first ``records`` records (their
main documents, numbered in record order: the first ``n_docs`` documents), those
documents' columns by row range (``PoolReader.document_columns(rows=...)``: only the files
and row groups holding them), and, for the comparison with every shuffle on the same
documents, the documents' (source, input shard) groups in one streamed pass over two
columns (``input_groups``: per group its count, in memory one batch plus the groups).

The comparison (``by_shuffle``): the measured documents in input order (source, input
shard, row), each shuffle's order of them and its first ``n_docs`` positions
(``module.head``, not the whole permutation), labelled by position: a document's source
from the group counts alone; its length or a property from the documents at those input
positions, found in streamed passes that keep only them (``input_values``: a group whose
rows are not consecutive also keeps a bit per row of its span while the ranks are found).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcore import quality
from shardcore.pool.reader import PoolReader
from shardcore.shuffle import SHUFFLES

SEED = 1234
_SOURCE, _SHARD, _ROW, _TOKENS = (
    "_doc.source",
    "_doc.source_shard",
    "_doc.source_row",
    ("_doc.n_tokens"),
)
BATCH_ROWS = 1 << 18  # documents a streamed pass holds at a time


@dataclass
class InputGroups:
    """The pool's documents per (source, input shard), in (source, shard) order: the
    input order's runs. ``lo``, ``hi``: the smallest and largest row (when read)."""

    source: np.ndarray
    shard: np.ndarray
    count: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    rows_read: bool = True

    @property
    def keys(self) -> np.ndarray:
        return _key(self.source, self.shard)

    @property
    def starts(self) -> np.ndarray:
        """Each group's first input position, and the total last."""
        return np.concatenate([[0], np.cumsum(self.count)])

    def where(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per input position, its group and its rank in the group (by row)."""
        starts = self.starts
        group = np.searchsorted(starts, positions, side="right") - 1
        return group, positions - starts[group]


def _key(source: np.ndarray, shard: np.ndarray) -> np.ndarray:
    return (np.asarray(source, dtype=np.int64) << 32) | np.asarray(shard, dtype=np.int64)


def _reduce(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """(key, count, lo, hi) summaries merged into one, by key."""
    key, count, lo, hi = (np.concatenate(c) for c in zip(*parts, strict=True))
    uniq, inv = np.unique(key, return_inverse=True)
    out_lo = np.full(uniq.size, np.iinfo(np.int64).max)
    out_hi = np.full(uniq.size, np.iinfo(np.int64).min)
    np.minimum.at(out_lo, inv, lo)
    np.maximum.at(out_hi, inv, hi)
    return (
        uniq,
        np.bincount(inv, weights=count, minlength=uniq.size).astype(np.int64),
        (out_lo),
        out_hi,
    )


def input_groups(reader: PoolReader, *, rows: bool = False) -> InputGroups:
    """Per (source, input shard) of the pool's documents, its count (and with ``rows`` its
    smallest and largest row), streamed: memory one batch and the groups."""
    names = [_SOURCE, _SHARD] + ([_ROW] if rows else [])
    acc: tuple[np.ndarray, ...] | None = None
    for _, cols in reader.iter_document_columns(names, BATCH_ROWS):
        key = _key(cols[_SOURCE], cols[_SHARD])
        row = np.asarray(cols[_ROW], dtype=np.int64) if rows else np.zeros(key.size, np.int64)
        part = (key, np.ones(key.size, dtype=np.int64), row, row)
        acc = _reduce([part] if acc is None else [acc, part])
    if acc is None:
        empty = np.zeros(0, dtype=np.int64)
        return InputGroups(empty, empty, empty, empty, empty)
    key, count, lo, hi = acc
    return InputGroups(key >> 32, key & 0xFFFFFFFF, count, lo, hi, rows_read=rows)


def _group_rows(
    reader: PoolReader, groups: InputGroups, wanted: np.ndarray, ranks: np.ndarray
) -> np.ndarray:
    """The row of rank ``ranks[i]`` in group ``wanted[i]``: ``lo + rank`` where the group's
    rows are consecutive; else read from a bit per row of the group's span (set in one
    streamed pass, for those groups only)."""
    rows = groups.lo[wanted] + ranks
    gaps = np.unique(wanted[(groups.hi - groups.lo + 1)[wanted] != groups.count[wanted]])
    if gaps.size == 0:
        return rows
    span = groups.hi[gaps] - groups.lo[gaps] + 1
    offset = np.concatenate([[0], np.cumsum((span + 7) // 8)])
    bits = np.zeros(int(offset[-1]), dtype=np.uint8)
    keys = groups.keys[gaps]
    for _, cols in reader.iter_document_columns([_SOURCE, _SHARD, _ROW], BATCH_ROWS):
        key = _key(cols[_SOURCE], cols[_SHARD])
        at = np.minimum(np.searchsorted(keys, key), keys.size - 1)
        hit = keys[at] == key
        g = at[hit]
        i = np.asarray(cols[_ROW], dtype=np.int64)[hit] - groups.lo[gaps][g]
        np.bitwise_or.at(bits, offset[g] + (i >> 3), (1 << (i & 7)).astype(np.uint8))
    for k, group in enumerate(gaps.tolist()):
        present = np.unpackbits(bits[offset[k] : offset[k + 1]], bitorder="little")
        sel = wanted == group
        rows[sel] = np.flatnonzero(present)[ranks[sel]] + groups.lo[group]
    return rows


def input_values(
    reader: PoolReader, groups: InputGroups, positions: np.ndarray, name: str
) -> np.ndarray:
    """``name``'s value of the documents at ``positions`` of the input order (sorted by
    source, input shard and row), in streamed passes keeping only those documents."""
    positions = np.asarray(positions, dtype=np.int64)
    if not groups.rows_read:
        groups = input_groups(reader, rows=True)
    group, rank = groups.where(positions)
    rows = _group_rows(reader, groups, group, rank)
    wanted, back = np.unique((group << 32) | rows, return_inverse=True)
    keys = groups.keys
    values: np.ndarray | None = None
    for _, cols in reader.iter_document_columns([_SOURCE, _SHARD, _ROW, name], BATCH_ROWS):
        g = np.searchsorted(keys, _key(cols[_SOURCE], cols[_SHARD]))
        doc = (g << 32) | np.asarray(cols[_ROW], dtype=np.int64)
        at = np.minimum(np.searchsorted(wanted, doc), max(wanted.size - 1, 0))
        hit = np.flatnonzero(wanted[at] == doc) if wanted.size else at[:0]
        col = cols[name]
        if values is None:
            values = np.empty(wanted.size, dtype=col.dtype)
        values[at[hit]] = col[hit]
    if values is None:
        return np.zeros(0)
    return values[back]


def _text(values: np.ndarray) -> np.ndarray:
    """A property's values as labels (``(absent)`` for none)."""
    return np.array(["(absent)" if v is None else str(v) for v in values.tolist()])


def _coded(codes: np.ndarray, names: list[str]) -> quality.Coded:
    """Per document ``names[codes]`` as ``quality.Coded`` (codes in the names' sort order,
    equal names one label), without a string per document."""
    unique = sorted(set(names))
    rank = np.array([unique.index(n) for n in names], dtype=np.int32)
    return quality.Coded(rank[np.asarray(codes, dtype=np.int64)], unique)


def _length_labels(n_tokens: np.ndarray) -> quality.Coded:
    """A document's length bin (powers of two) as its label."""
    bins, inverse = np.unique(
        np.floor(np.log2(np.maximum(np.asarray(n_tokens), 1))).astype(int), return_inverse=True
    )
    return _coded(inverse, [f"{2**b:,}-{2 ** (b + 1) - 1:,} tokens" for b in bins.tolist()])


def _plain(labels: np.ndarray | quality.Coded) -> np.ndarray:
    if isinstance(labels, quality.Coded):
        return np.array(labels.names)[labels.codes]
    return labels


@dataclass
class _Labelling:
    """How documents are labelled: ``kind`` "source", "length" or "property"; ``name`` the
    property's; ``names`` the sources' names by index; ``label`` the report's."""

    kind: str
    name: str
    names: list[str]
    label: str

    def of(self, cols: dict[str, np.ndarray]) -> np.ndarray | quality.Coded:
        if self.kind == "source":
            return _coded(cols[_SOURCE], self.names)
        if self.kind == "length":
            return _length_labels(cols[_TOKENS])
        return _text(cols[self.name])


def _labelling(
    reader: PoolReader, groups: InputGroups, by: str, names: dict[str, str]
) -> _Labelling:
    paths = [s["path"] for s in reader.manifest.get("sources", [])]
    if by and by != "length":
        return _Labelling("property", by, [], by)
    if len(np.unique(groups.source)) > 1 and by != "length":
        top = int(groups.source.max())
        known = len(paths) > top
        labels = [names.get(p, str(k)) for k, p in enumerate(paths)] if known else []
        labels = labels or [str(k) for k in range(top + 1)]
        return _Labelling("source", _SOURCE, labels, "tokenized source")
    return _Labelling("length", _TOKENS, [], "document length (tokens)")


def _input_labels(
    reader: PoolReader, groups: InputGroups, how: _Labelling, positions: np.ndarray
) -> np.ndarray | quality.Coded:
    """The labels of the documents at ``positions`` of the input order."""
    if how.kind == "source":
        group, _ = groups.where(positions)
        return _coded(groups.source[group], how.names)
    values = input_values(reader, groups, positions, how.name)
    return _length_labels(values) if how.kind == "length" else _text(values)


def by_shuffle(
    reader: PoolReader, groups: InputGroups, how: _Labelling, n_docs: int
) -> dict[str, Any]:
    """Each shuffle's window deviation on the first ``n_docs`` positions of its order of
    the pool's documents in input order (the shuffles planned with the group counts)."""
    heads = {}
    for name, module in SHUFFLES.items():
        counts = groups.count
        buckets = module.num_buckets(counts, max(2, len(counts)))
        heads[name] = module.head(counts, SEED, buckets, n_docs)
    everything = np.unique(np.concatenate(list(heads.values())))
    labels = _input_labels(reader, groups, how, everything)
    return {
        name: {"windows": quality.window_deviation(labels[np.searchsorted(everything, h)])}
        for name, h in heads.items()
    }


# A quality report reads at most the records holding this many documents.
QUALITY_DOCUMENTS = 1 << 19


def pool_quality(
    reader: PoolReader,
    *,
    records: int,
    by: str = "",
    source_names: dict[str, str] | None = None,
    max_documents: int = QUALITY_DOCUMENTS,
) -> dict[str, Any]:
    """The quality report of the pool's first ``records`` records (every record of a
    smaller pool; no more than hold ``max_documents`` documents: the reference shuffles
    them, a pool of small documents packs dozens into a record): label by a property (``by``), by document length (``by="length"``, or
    a pool of one source) or by tokenized source (named by ``source_names``, path ->
    name); against a perfect document shuffle of the same documents (``reference``) and
    every shuffle's order of them (``by_shuffle``). Empty for fewer than 8 documents."""
    num_docs = reader.num_documents
    if num_docs < 8:
        return {}
    records = min(records, reader.records_holding(max_documents))
    record_docs = reader.main_documents(limit=records)
    n_docs = int(record_docs.max()) + 1 if len(record_docs) < reader.num_records else num_docs
    need = [_SOURCE, _TOKENS] + ([by] if by and by != "length" else [])
    _, cols = reader.document_columns(need, rows=slice(0, n_docs))  # InputError: unknown by
    # The rows of the groups are read with their counts where the labels will need them:
    # a property, or the length of a pool of one source.
    one_source = len(reader.manifest.get("sources") or []) <= 1
    groups = input_groups(reader, rows=bool(by) or one_source)
    how = _labelling(reader, groups, by, source_names or {})
    doc_labels = how.of(cols)
    report = quality.report(doc_labels[record_docs[record_docs >= 0]], batch_size=256)
    report["label"] = how.label
    report["records"], report["measured"] = reader.num_records, len(record_docs)
    windows = report["windows"]
    bos = int(bool(reader.manifest.get("params", {}).get("bos")))
    ref = quality.document_shuffle_reference(
        _plain(doc_labels),
        np.asarray(cols[_TOKENS], dtype=np.int64) + bos,
        int(reader.manifest["seq_len"]),
        windows["window_sizes"],
        trials=8,
        seed=SEED,
    )
    report["reference"] = ref
    report["verdict"] = quality.verdict(windows["window_sizes"], windows["max_all"], ref["mean"])
    report["label_verdicts"] = quality.label_verdicts(windows, ref)
    report["by_shuffle"] = by_shuffle(reader, groups, how, n_docs)
    return report

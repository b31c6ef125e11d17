"""The measurements of a pool taken from its files: its properties (what the quality charts
can label documents by) and its shuffle-quality report. Run by a fact's task or by the
pool's recorder, never by a page: a page reads what they stored."""

from __future__ import annotations

import logging

import numpy as np

from shardcore import props, quality, storage
from shardcore.errors import ShardcoreError
from shardcore.pool import PoolReader
from shardcore.shuffle import SHUFFLES
from webapp.catalog.models import Pool, TokenizedSource

log = logging.getLogger(__name__)

# A pool's quality is measured on the first this many records of its order (every record
# of a smaller pool): the same cost for every pool size, like a version's per stage.
QUALITY_RECORDS = 1 << 16
SHUFFLES_COMPARED = tuple(SHUFFLES)


def pool_properties_measure(*, pool: Pool) -> list[str]:
    """The pool's properties read from its documents table's schema (``documents.parquet``
    or, for a pool of many buckets, its first shard's sidecar; on object storage the
    footer by checked byte ranges); empty when it cannot be read."""
    try:
        schema = PoolReader(pool.path, ranged=True).document_schema
    except (OSError, ShardcoreError, ValueError):
        return []
    return props.names(props.props_type(schema))[:50]


def pool_quality_measure(*, pool, by: str = "") -> dict:
    """``pool_quality`` measured from the pool's files now (no cache); empty when the files
    cannot be read."""
    # Label documents by their source's name, in the pool manifest's source order.
    names = dict(TokenizedSource.objects.filter(pools=pool).values_list("path", "source__name"))
    try:
        report = _measure(pool.path, source_names=names, by=by)
    except Exception as e:  # noqa: BLE001 - a pool without readable files has no report
        if storage.is_store_error(e):
            raise  # the object store did not answer: say so (a 503), not "no report"
        log.info("no quality for pool %s: %s", pool.pk, e)
        return {}
    (report.get("batches") or {}).pop("per_batch", None)  # one number per batch: not kept
    return report


_QUALITY_COLUMNS = ("source", "n_tokens", "source_shard", "source_row")


def _document_columns(reader: PoolReader) -> dict[str, np.ndarray]:
    """The columns of the pool's documents table the quality report reads, as arrays (no
    Arrow table is kept beside them; on object storage read by checked ranges)."""
    return reader.document_columns(list(_QUALITY_COLUMNS))[1]


def _coded(codes: np.ndarray, names: list[str]) -> quality.Coded:
    """Per document ``names[codes]`` as ``quality.Coded`` (codes in the names' sort order,
    equal names one label), without a string per document."""
    unique = sorted(set(names))
    rank = np.array([unique.index(n) for n in names], dtype=np.int32)
    return quality.Coded(rank[np.asarray(codes)], unique)


def _plain(labels: np.ndarray | quality.Coded) -> np.ndarray:
    if isinstance(labels, quality.Coded):
        return np.array(labels.names)[labels.codes]
    return labels


def _measure(path: str, *, source_names: dict[str, str] | None = None, by: str = "") -> dict:

    reader = PoolReader(path, ranged=True)  # on object storage: the columns, not a copy
    docs = _document_columns(reader)
    num_docs = len(docs["source"])
    if num_docs < 8:
        return {}
    # The first QUALITY_RECORDS records, and the documents packed into them: pool documents
    # are numbered in record order, so they are the first ``n_docs``.
    record_docs = reader.main_documents(limit=QUALITY_RECORDS)
    n_docs = int(record_docs.max()) + 1 if len(record_docs) < reader.num_records else num_docs
    source, n_tokens = docs["source"], docs["n_tokens"]
    by_source = len(np.unique(source)) > 1
    paths = [s["path"] for s in reader.manifest.get("sources", [])]
    names = np.array([(source_names or {}).get(p, str(k)) for k, p in enumerate(paths)])
    # Labels as integer codes (quality.Coded): 4 bytes a document, not a string each.
    doc_labels: np.ndarray | quality.Coded
    if by and by != "length":
        values = reader.document_values(by)  # InputError names an unknown property
        doc_labels = np.array(["(absent)" if v is None else str(v) for v in values.tolist()])
        label = by
    elif by_source and by != "length":
        known = len(names) > int(source.max())
        doc_labels = _coded(
            source, names.tolist() if known else [str(k) for k in range(int(source.max()) + 1)]
        )
        label = "tokenized source"
    else:
        bins, inverse = np.unique(
            np.floor(np.log2(np.maximum(n_tokens, 1))).astype(int), return_inverse=True
        )
        doc_labels = _coded(
            inverse, [f"{2**b:,}-{2 ** (b + 1) - 1:,} tokens" for b in bins.tolist()]
        )
        label = "document length (tokens)"
    report = quality.report(doc_labels[record_docs[record_docs >= 0]], batch_size=256)
    report["label"] = label
    report["records"], report["measured"] = reader.num_records, len(record_docs)
    # The reference: uniform random permutations of the same documents, packed alike.
    windows = report["windows"]
    bos = int(bool(reader.manifest.get("params", {}).get("bos")))
    ref = quality.document_shuffle_reference(
        _plain(doc_labels[:n_docs]),
        n_tokens[:n_docs].astype(np.int64) + bos,
        int(reader.manifest["seq_len"]),
        windows["window_sizes"],
        trials=8,
        seed=1234,
    )
    report["reference"] = ref
    report["verdict"] = quality.verdict(windows["window_sizes"], windows["max_all"], ref["mean"])
    # Each label's own verdict too: the worst label's alone hides a label that mixes well.
    report["label_verdicts"] = quality.label_verdicts(windows, ref)
    # The same documents in input order (source, input shard, row): what every shuffle
    # reads; input shards give the per-shard counts the shuffles plan with. Each is
    # measured on as many documents as the pool's measured records hold: its first.
    shard, row = docs.pop("source_shard"), docs.pop("source_row")
    order = np.lexsort((row, shard, source))
    del row
    labels_in = doc_labels[order]
    change = np.ones(len(order), dtype=bool)  # where a (source, input shard) starts
    in_order = source[order]
    change[1:] = in_order[1:] != in_order[:-1]
    in_order = shard[order]
    change[1:] |= in_order[1:] != in_order[:-1]
    del in_order, shard
    counts = np.diff(np.concatenate([np.flatnonzero(change), [len(order)]]))
    del order, change
    by_shuffle = {}
    for name in SHUFFLES_COMPARED:
        module = SHUFFLES[name]
        buckets = module.num_buckets(counts, max(2, len(counts)))
        perm = module.permutation(counts, 1234, buckets)
        by_shuffle[name] = {"windows": quality.window_deviation(labels_in[perm[:n_docs]])}
    report["by_shuffle"] = by_shuffle
    return report

"""Which documents of a tokenized source a pool holds, read from the Parquet files beside
the artifacts. Used by taint propagation and the audit selectors; rows never store
per-document data."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from shardcore.errors import InputError
from shardcore.mixture.reader import IndexSet
from shardcore.pool import SOURCE_FP_COL, PoolReader
from webapp.catalog import flag_documents
from webapp.catalog.models import Flag, Pool, TokenizedSource


def _held(pool: Pool, tokenized: TokenizedSource) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Batch by batch of the pool's documents (in pool order): the first row, whether each
    is one of ``tokenized``'s, and its document id there. Reads the two columns it needs
    (the source's index among the manifest's sources, or its fingerprint in a table
    without it, and the document id) a batch at a time, never the whole documents table
    (on object storage by checked ranges, never a copy of the pool). Nothing for a table
    without them."""
    reader = PoolReader(pool.path, ranged=True)  # on object storage: those columns, not a copy
    fps = [s.get("fingerprint") for s in reader.manifest.get("sources") or []]
    ours = [i for i, fp in enumerate(fps) if fp == tokenized.fingerprint]
    # The source's index where the manifest lists its sources, else its fingerprint.
    tried = [["_doc.source", "_doc.doc_id"]] if fps else []
    for names in [*tried, [f"_doc.{SOURCE_FP_COL}", "_doc.doc_id"]]:
        try:
            batches = reader.iter_document_columns(names)
            for first, cols in batches:
                if names[0] == "_doc.source":
                    mine = np.isin(cols[names[0]], ours)
                else:
                    mine = cols[names[0]] == tokenized.fingerprint
                yield first, np.asarray(mine, dtype=bool), cols["_doc.doc_id"].astype(np.int64)
            return
        except InputError:
            continue  # (raised before the first batch: the names are checked first)


def pool_documents_hit(
    *, pool: Pool, tokenized: TokenizedSource, doc_ids: np.ndarray | None
) -> int:
    """How many of ``doc_ids`` (sorted; None: every document of ``tokenized``) the pool holds."""
    if doc_ids is not None and not doc_ids.size:
        return 0
    return int(pool_document_rows(pool=pool, tokenized=tokenized, doc_ids=doc_ids).size)


def pool_documents_held(
    *, pool: Pool, tokenized: TokenizedSource, doc_ids: np.ndarray
) -> np.ndarray:
    """Which of ``doc_ids`` (sorted) of ``tokenized`` the pool holds, sorted: the pool's
    documents table read a batch at a time, as ``pool_document_rows`` reads it."""
    if not doc_ids.size:
        return np.zeros(0, dtype=np.int64)
    members = IndexSet(doc_ids)
    parts = [held[mine & members(held)] for _, mine, held in _held(pool, tokenized)]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def flag_document_ids(*, flag, tokenized: TokenizedSource) -> np.ndarray | None:
    """The flagged document indices within ``tokenized``, sorted (8 bytes a document);
    None means all of them (a flag on the whole source). A file's documents are the id
    range the tokenize stage recorded in ``params["file_ranges"]``."""
    if flag.target == Flag.Target.SOURCE:
        return None
    if flag.target == Flag.Target.FILE:
        ranges = (tokenized.params or {}).get("file_ranges") or {}
        start, stop = ranges.get(flag.source_file.path, (0, 0))
        return np.arange(int(start), int(stop), dtype=np.int64)
    # The same for every tokenized source: read once per flag object (a taint asks per pool).
    if getattr(flag, "_document_ids", None) is None:
        flag._document_ids = flag_documents.all_ids(flag)
    return flag._document_ids


def pool_document_rows(
    *, pool: Pool, tokenized: TokenizedSource, doc_ids: np.ndarray | None
) -> np.ndarray:
    """Rows of the pool's documents table (pool document indices) that are ``doc_ids``
    (sorted) of ``tokenized`` (None: every document of it). Memory: the ids, a batch of
    the table and the rows found."""
    parts = []
    members = None if doc_ids is None else IndexSet(doc_ids)
    for first, mine, held in _held(pool, tokenized):
        if members is not None:
            mine &= members(held)
        parts.append(first + np.flatnonzero(mine))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

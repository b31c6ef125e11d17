"""Which documents of a tokenized source a pool holds, read from the Parquet files beside
the artifacts. Used by taint propagation and the audit selectors; rows never store
per-document data."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc

from shardcore.pool import SOURCE_FP_COL, PoolReader
from webapp.catalog.models import Flag, Pool, TokenizedSource


def pool_document_ids(*, pool: Pool, tokenized: TokenizedSource) -> np.ndarray:
    """The document ids (indices within the tokenized source) that ``pool`` holds, read
    from its ``documents.parquet`` (the pool's own split: train or val)."""
    table = PoolReader(pool.path).documents
    if SOURCE_FP_COL not in table.column_names or "doc_id" not in table.column_names:
        return np.zeros(0, dtype=np.int64)
    mine = table.filter(pc.equal(table[SOURCE_FP_COL], tokenized.fingerprint))
    return mine["doc_id"].to_numpy().astype(np.int64)


def pool_documents_hit(*, pool: Pool, tokenized: TokenizedSource, doc_ids: set[int] | None) -> int:
    """How many of ``doc_ids`` (None: every document of ``tokenized``) the pool holds."""
    held = pool_document_ids(pool=pool, tokenized=tokenized)
    if doc_ids is None:
        return int(held.size)
    if not doc_ids:
        return 0
    return int(np.isin(held, np.fromiter(doc_ids, dtype=np.int64)).sum())


def flag_document_ids(*, flag, tokenized: TokenizedSource) -> set[int] | None:
    """The flagged document indices within ``tokenized``; None means all of them (a flag
    on the whole source). A file's documents are the id range the tokenize stage recorded
    in ``params["file_ranges"]``."""
    if flag.target == Flag.Target.SOURCE:
        return None
    if flag.target == Flag.Target.FILE:
        ranges = (tokenized.params or {}).get("file_ranges") or {}
        start, stop = ranges.get(flag.source_file.path, (0, 0))
        return set(range(int(start), int(stop)))
    return {int(i) for i in flag.document_ids}


def pool_document_rows(
    *, pool: Pool, tokenized: TokenizedSource, doc_ids: set[int] | None
) -> np.ndarray:
    """Rows of the pool's ``documents.parquet`` (pool document indices) that are
    ``doc_ids`` of ``tokenized`` (None: every document of it)."""
    table = PoolReader(pool.path).documents
    if SOURCE_FP_COL not in table.column_names or "doc_id" not in table.column_names:
        return np.zeros(0, dtype=np.int64)
    mine = table.column(SOURCE_FP_COL).to_numpy(zero_copy_only=False) == tokenized.fingerprint
    if doc_ids is not None:
        ids = np.fromiter(doc_ids, dtype=np.int64, count=len(doc_ids))
        mine &= np.isin(table.column("doc_id").to_numpy().astype(np.int64), ids)
    return np.flatnonzero(mine)

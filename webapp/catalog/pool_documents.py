"""Which documents of a tokenized source a pool holds, read from the Parquet files beside
the artifacts. Used by taint propagation and the audit selectors; rows never store
per-document data."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from shardcore.errors import InputError
from shardcore.pool import SOURCE_FP_COL, PoolReader
from webapp.catalog.models import Flag, Pool, TokenizedSource


def _held(pool: Pool, tokenized: TokenizedSource) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Batch by batch of the pool's documents (in pool order): the first row, whether each
    is one of ``tokenized``'s, and its document id there. Reads the two columns it needs
    (the source's index among the manifest's sources, or its fingerprint in a table
    without it, and the document id) a batch at a time, never the whole documents table.
    Nothing for a table without them."""
    reader = PoolReader(pool.path)
    fps = [s.get("fingerprint") for s in reader.manifest.get("sources") or []]
    ours = [i for i, fp in enumerate(fps) if fp == tokenized.fingerprint]
    for names in (["_doc.source", "_doc.doc_id"], [f"_doc.{SOURCE_FP_COL}", "_doc.doc_id"]):
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


def pool_document_ids(*, pool: Pool, tokenized: TokenizedSource) -> np.ndarray:
    """The document ids (indices within the tokenized source) that ``pool`` holds, read
    from its documents table (the pool's own split: train or val)."""
    parts = [ids[mine] for _, mine, ids in _held(pool, tokenized)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def pool_documents_hit(*, pool: Pool, tokenized: TokenizedSource, doc_ids: set[int] | None) -> int:
    """How many of ``doc_ids`` (None: every document of ``tokenized``) the pool holds."""
    if doc_ids is not None and not doc_ids:
        return 0
    return int(pool_document_rows(pool=pool, tokenized=tokenized, doc_ids=doc_ids).size)


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
    """Rows of the pool's documents table (pool document indices) that are ``doc_ids`` of
    ``tokenized`` (None: every document of it). Memory: a batch of the table and the
    rows found."""
    ids = None if doc_ids is None else np.fromiter(doc_ids, dtype=np.int64, count=len(doc_ids))
    parts = []
    for first, mine, held in _held(pool, tokenized):
        if ids is not None:
            mine &= np.isin(held, ids)
        parts.append(first + np.flatnonzero(mine))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

"""Which documents of a tokenized source a pool holds, read from the Parquet files beside
the artifacts. Used by taint propagation and the audit selectors; rows never store
per-document data."""

from __future__ import annotations

import numpy as np

from shardcore.errors import InputError
from shardcore.pool import SOURCE_FP_COL, PoolReader
from webapp.catalog.models import Flag, Pool, TokenizedSource


def _held(pool: Pool, tokenized: TokenizedSource) -> tuple[np.ndarray, np.ndarray] | None:
    """Per pool document (in pool order): is it one of ``tokenized``'s, and its document
    id there. Reads the two columns it needs (the source's index among the manifest's
    sources, or its fingerprint in a table without it, and the document id), never the
    whole documents table. None for a table without them."""
    reader = PoolReader(pool.path)
    fps = [s.get("fingerprint") for s in reader.manifest.get("sources") or []]
    try:
        _, cols = reader.document_columns(["_doc.source", "_doc.doc_id"])
        ours = [i for i, fp in enumerate(fps) if fp == tokenized.fingerprint]
        mine = np.isin(cols["_doc.source"], ours)
    except InputError:
        try:
            _, cols = reader.document_columns([f"_doc.{SOURCE_FP_COL}", "_doc.doc_id"])
        except InputError:
            return None
        mine = cols[f"_doc.{SOURCE_FP_COL}"] == tokenized.fingerprint
    return np.asarray(mine, dtype=bool), np.asarray(cols["_doc.doc_id"], dtype=np.int64)


def pool_document_ids(*, pool: Pool, tokenized: TokenizedSource) -> np.ndarray:
    """The document ids (indices within the tokenized source) that ``pool`` holds, read
    from its documents table (the pool's own split: train or val)."""
    held = _held(pool, tokenized)
    if held is None:
        return np.zeros(0, dtype=np.int64)
    mine, ids = held
    return ids[mine]


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
    """Rows of the pool's documents table (pool document indices) that are ``doc_ids`` of
    ``tokenized`` (None: every document of it)."""
    held = _held(pool, tokenized)
    if held is None:
        return np.zeros(0, dtype=np.int64)
    mine, ids = held
    if doc_ids is not None:
        mine &= np.isin(ids, np.fromiter(doc_ids, dtype=np.int64, count=len(doc_ids)))
    return np.flatnonzero(mine)

"""Document-level lineage read from the Parquet files beside artifacts (DESIGN §5): which
documents of a tokenized source a pool holds. Used by taint propagation and audit
selectors; rows never store per-document data."""

from __future__ import annotations

from webapp.catalog.models import Pool, TokenizedSource


def pool_documents_hit(*, pool: Pool, tokenized: TokenizedSource, doc_ids: set[int] | None) -> int:
    """How many of ``doc_ids`` (None: every document of ``tokenized``) the pool holds."""
    from shardcore.pool import Pool as PoolReader

    reader = PoolReader(pool.path)
    held = reader.document_ids(tokenized.path)
    if doc_ids is None:
        return len(held)
    return len(held & doc_ids)

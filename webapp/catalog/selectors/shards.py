"""The shards of a tokenized source or a pool: a page in index order, and their sums."""

from __future__ import annotations

from django.db.models import Count, QuerySet, Sum

from webapp.catalog.models import Shard


def _shards(tokenized_id: int | None, pool_id: int | None) -> QuerySet[Shard]:
    qs = Shard.objects.all()
    if tokenized_id:
        return qs.filter(tokenized_source_id=tokenized_id)
    return qs.filter(pool_id=pool_id) if pool_id is not None else qs.none()


def artifact_shards(
    *,
    tokenized_id: int | None = None,
    pool_id: int | None = None,
    offset: int = 0,
    limit: int = 100,
) -> QuerySet[Shard]:
    """One page of an artifact's shards, in index order (uses the (parent, index) index)."""
    return _shards(tokenized_id, pool_id).order_by("index")[offset : offset + limit]


def shard_totals(*, tokenized_id: int | None = None, pool_id: int | None = None) -> dict:
    """Shards, records, tokens and bytes of an artifact, summed in one query."""
    out = _shards(tokenized_id, pool_id).aggregate(
        shards=Count("id"),
        records=Sum("num_records"),
        tokens=Sum("num_tokens"),
        bytes=Sum("num_bytes"),
    )
    return {k: v or 0 for k, v in out.items()}

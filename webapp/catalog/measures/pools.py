"""The measurements of a pool taken from its files: its properties (what the quality charts
can label documents by) and its shuffle-quality report. Run by a fact's task or by the
pool's recorder, never by a page: a page reads what they stored."""

from __future__ import annotations

import logging

from shardcore import props, storage
from shardcore.errors import ShardcoreError
from shardcore.pool import PoolReader
from shardcore.pool.quality import pool_quality
from webapp.catalog.models import Pool, TokenizedSource

log = logging.getLogger(__name__)

# A pool's quality is measured on the first this many records of its order (every record
# of a smaller pool): the same cost for every pool size, like a version's per stage.
QUALITY_RECORDS = 1 << 16


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


def _measure(path: str, *, source_names: dict[str, str] | None = None, by: str = "") -> dict:
    """The quality report of the pool's first QUALITY_RECORDS records
    (``shardcore.pool.quality.pool_quality``: memory that does not grow with the pool; on
    object storage the columns by checked ranges, not a copy)."""
    reader = PoolReader(path, ranged=True)
    return pool_quality(reader, records=QUALITY_RECORDS, by=by, source_names=source_names)

"""Sources: a page of sources; a source with its files, bad files, tokenized versions,
flags and the composition of its newest tokenized version (the runs that used it:
``audit.audit_search``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db.models import QuerySet

from webapp.catalog.models import ArtifactStatus, Source, TokenizedSource
from webapp.catalog.selectors import facts
from webapp.catalog.selectors.common import get_or_not_found
from webapp.paging import page_of

log = logging.getLogger(__name__)

FILES_SHOWN = 200


def source_list(*, page=1) -> dict:
    """A page of sources by name (``common.paged``)."""
    return page_of(Source.objects.order_by("name"), page)


def source_rows() -> QuerySet[Source]:
    """Sources by name: the API pages this query."""
    return Source.objects.order_by("name")


def source_row(*, source_id: int, only: Sequence[str] = ()) -> Source:
    """The source (only its ``only`` fields when given), or NotFound."""
    rows = Source.objects.only(*only) if only else Source.objects.all()
    return get_or_not_found(rows, "source", pk=source_id)


def source_detail(*, source_id: int, files_limit: int = FILES_SHOWN) -> dict:
    """A source: its first files by path (``files_truncated`` when there are more), the
    files with bad lines, its newest tokenized versions (with ``num_shards``), its flags,
    and ``stats`` (``source_stats`` of its newest ready tokenized version)."""
    source = get_or_not_found(Source.objects.all(), "source", pk=source_id)
    files = list(source.files.order_by("path")[:files_limit])
    tokenized = list(
        source.tokenized.select_related("tokenizer").defer("params").order_by("-created_at")[:20]
    )
    latest = next((t for t in tokenized if t.status == ArtifactStatus.READY), None)
    if latest is None and len(tokenized) == 20:  # older than the ones listed
        latest = (
            TokenizedSource.objects.filter(source=source, status=ArtifactStatus.READY)
            .order_by("-created_at")
            .first()
        )
    return {
        "source": source,
        "files": files,
        "files_truncated": source.num_files > len(files),
        "bad_files": list(source.files.filter(bad_lines__gt=0).order_by("-bad_lines")[:50]),
        "tokenized": tokenized,
        "flags": list(source.flags.select_related("source_file").order_by("-created_at")[:20]),
        "stats": source_stats(tokenized=latest, metadata_fields=source.metadata_fields),
    }


def source_stats(*, tokenized: TokenizedSource | None, metadata_fields=None) -> dict:
    """Composition by property and the length histogram of a tokenized source
    (``by_property``, ``edges``, ``counts``), measured with DuckDB from its Parquet
    sidecars by a task when it is recorded (``webapp.catalog.services.facts``) and stored; with
    ``computing`` ({state, progress, since}) until then. Empty for none or an unreadable
    sidecar (``error``)."""
    empty: dict[str, Any] = {"by_property": {}, "edges": [], "counts": []}
    if tokenized is None:
        return empty
    stored = facts.fact_read("source_stats", tokenized.pk)
    if "value" in stored:
        return stored["value"] or empty
    if "computing" in stored:
        return {**empty, "computing": stored["computing"]}
    return {**empty, "error": stored.get("error", "")}

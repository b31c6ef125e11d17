"""Training runs as rows: the query the API pages and a run looked up by id before a read
or a write on it (a missing one is NotFound). The reads built on a run: ``runs``."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import QuerySet

from webapp.catalog.models import TrainingRun
from webapp.catalog.selectors.common import get_or_not_found


def run_rows() -> QuerySet[TrainingRun]:
    """Runs newest first: the API pages this query."""
    return TrainingRun.objects.order_by("-created_at")


def run_row(*, run_id: int, only: Sequence[str] = (), with_version: bool = False) -> TrainingRun:
    """The run (only its ``only`` fields when given; with its mixture version in the same
    query when ``with_version``), or NotFound."""
    rows = TrainingRun.objects.all()
    if only:
        rows = rows.only(*only)
    if with_version:
        rows = rows.select_related("mixture_version")
    return get_or_not_found(rows, "run", pk=run_id)

"""What every read of the catalog shares: the NotFound a read raises for a missing row,
pages without a COUNT(*), and the tainted mark on a list of runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Model, QuerySet

from webapp.catalog.models import Taint

PAGE_SIZE = 50
MAX_PAGE = 1_000_000


class NotFound(LookupError):
    """A read asked for a row that does not exist (pages and the API answer 404)."""


def get_or_not_found(qs: QuerySet, what: str, **lookup) -> Model:
    """The one row of ``qs`` matching ``lookup``, or NotFound naming ``what``."""
    try:
        return qs.get(**lookup)
    except qs.model.DoesNotExist:
        shown = ", ".join(f"{v}" for v in lookup.values())
        raise NotFound(f"no {what} {shown}") from None


def paged(fetch: Callable[[int, int], list], page: Any, size: int = PAGE_SIZE) -> dict:
    """One page from ``fetch(offset, limit) -> list``, asking for one row more than shown
    (no COUNT(*) over the whole table). ``page`` comes from a query string: anything but a
    sane integer is page 1 (never a ValueError or an offset past bigint)."""
    try:
        page = min(max(1, int(str(page or 1))), MAX_PAGE)
    except ValueError:
        page = 1
    rows = fetch((page - 1) * size, size + 1)
    return {"rows": rows[:size], "page": page, "has_next": len(rows) > size, "has_prev": page > 1}


def page_of(qs: QuerySet, page: Any, size: int = PAGE_SIZE) -> dict:
    """One page of an ordered queryset (see ``paged``)."""
    return paged(lambda offset, limit: list(qs[offset : offset + limit]), page, size)


def runs_with_taint(runs: list) -> list:
    """Mark each run ``tainted`` with one query for the whole list."""
    ids = set(
        Taint.objects.filter(run_id__in=[r.pk for r in runs]).values_list("run_id", flat=True)
    )
    for r in runs:
        r.tainted = r.pk in ids
    return runs

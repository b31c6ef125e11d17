"""Pages of a list without a COUNT(*) over the whole table: fetch one row more than shown.
Every list query is ordered by an indexed column; pages hold at most PAGE_SIZE rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet

PAGE_SIZE = 50
MAX_PAGE = 1_000_000


def paged(fetch: Callable[[int, int], list], page: Any, size: int = PAGE_SIZE) -> dict:
    """One page from ``fetch(offset, limit) -> list``: ``{rows, page, has_next,
    has_prev}``. ``page`` comes from a query string: anything but a sane integer is page 1
    (never a ValueError or an offset past bigint, i.e. never a 500)."""
    try:
        page = min(max(1, int(str(page or 1))), MAX_PAGE)
    except ValueError:
        page = 1
    rows = fetch((page - 1) * size, size + 1)
    return {"rows": rows[:size], "page": page, "has_next": len(rows) > size, "has_prev": page > 1}


def page_of(qs: QuerySet, page: Any, size: int = PAGE_SIZE) -> dict:
    """One page of an ordered queryset (see ``paged``)."""
    return paged(lambda offset, limit: list(qs[offset : offset + limit]), page, size)

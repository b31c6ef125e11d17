"""What every read of the catalog shares: the NotFound a read raises for a missing row,
and the tainted mark on a list of runs. Pages of lists: ``webapp.paging``."""

from __future__ import annotations

from typing import TypeVar

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Model, QuerySet

from webapp.catalog.models import Taint


class NotFound(LookupError):
    """A read asked for a row that does not exist (pages and the API answer 404)."""


_M = TypeVar("_M", bound=Model)


def get_or_not_found(qs: QuerySet[_M], what: str, **lookup: object) -> _M:
    """The one row of ``qs`` matching ``lookup``, or NotFound naming ``what``."""
    try:
        return qs.get(**lookup)
    except ObjectDoesNotExist:  # qs.get raises qs.model.DoesNotExist, a subclass
        shown = ", ".join(f"{v}" for v in lookup.values())
        raise NotFound(f"no {what} {shown}") from None


def runs_with_taint(runs: list) -> list:
    """Mark each run ``tainted`` with one query for the whole list."""
    ids = set(
        Taint.objects.filter(run_id__in=[r.pk for r in runs]).values_list("run_id", flat=True)
    )
    for r in runs:
        r.tainted = r.pk in ids
    return runs

"""Where a catalog entity is shown: the page URL of a read-model row's ``(kind, id)``
(``webapp.catalog.selectors`` names targets that way, without HTTP). Pages link to it and
the API returns it beside the ids."""

from __future__ import annotations

from django.urls import reverse

PAGES = {
    "source": "dashboard:source",
    "pool": "dashboard:pool",
    "mixture": "dashboard:mixture",
    "mixture_version": "dashboard:mixture_version",
    "run": "dashboard:run",
    "flag": "dashboard:flag",
    "job": "dashboard:job",
    "annotation": "dashboard:annotation",
}


def page_url(kind: str, pk: int | None) -> str | None:
    """The page of entity ``kind`` number ``pk``; None for a kind without a page."""
    if pk is None or kind not in PAGES:
        return None
    return reverse(PAGES[kind], args=[pk])

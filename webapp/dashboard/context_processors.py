"""Context for every page: the corrupt artifacts (``Corruption`` rows found by the scrub,
and what was built from them), shown as a banner on every page while any exist."""

from __future__ import annotations

from django.urls import reverse

from webapp.catalog.models import Corruption

SHOWN = 20


def corruption(request) -> dict:
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}

    rows = list(
        Corruption.objects.select_related(
            "tokenized_source__source", "pool", "mixture_version__mixture", "export__version", "run"
        ).order_by("cause_id", "-found_at", "id")[:SHOWN]  # the corrupt ones first
    )
    if not rows:
        return {}
    total = Corruption.objects.count() if len(rows) == SHOWN else len(rows)
    return {
        "corrupt_items": [
            {
                "label": _label(c),
                "url": _url(c),
                "problem": c.problem,
                "direct": c.cause_id is None,
            }
            for c in rows
        ],
        "corrupt_total": total,
    }


def _label(c) -> str:
    if c.tokenized_source_id:
        return f"tokenized source #{c.tokenized_source_id} of {c.tokenized_source.source.name}"
    if c.pool_id:
        return f"pool {c.pool.name} ({c.pool.split})"
    if c.mixture_version_id:
        return f"mixture version {c.mixture_version}"
    if c.export_id:
        return f"materialized copy #{c.export_id} of {c.export.version}"
    return f"run {c.run.name}"


def _url(c) -> str:
    if c.tokenized_source_id:
        return reverse("dashboard:source", args=[c.tokenized_source.source_id])
    if c.pool_id:
        return reverse("dashboard:pool", args=[c.pool_id])
    if c.mixture_version_id:
        return reverse("dashboard:mixture_version", args=[c.mixture_version_id])
    if c.export_id:
        return reverse("dashboard:mixture_version", args=[c.export.version_id])
    return reverse("dashboard:run", args=[c.run_id])

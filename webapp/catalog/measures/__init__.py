"""What is measured from an artifact's files, by name: the registry the facts' task runs
(``webapp.catalog.services.facts.fact_compute``) and the measurements recorders take when a build
ends. A measure reads files and rows and writes nothing; it imports neither the facts nor
the selectors, so pages, facts and recorders all depend on it and it on none of them.

``MEASURES[kind](object_id, key)`` returns a JSON-able value; ``key`` is the variant asked
for (a pool's quality by a property, a decon annotation's id)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardcore import quality
from shardcore.errors import ShardcoreError
from shardcore.mixture import Mixture
from shardcore.tokenized import property_stats
from webapp.catalog.measures.decon import decon_pool_items_measure
from webapp.catalog.measures.pools import pool_properties_measure, pool_quality_measure
from webapp.catalog.models import Annotation, MixtureVersion, Pool, TokenizedSource

# Epoch starts kept per version (the run page marks at most a few dozen).
EPOCH_STARTS_KEPT = 2000


def _pool_quality(pool_id: int, key: str) -> Any:
    return pool_quality_measure(pool=Pool.objects.get(pk=pool_id), by=key)


def _pool_properties(pool_id: int, key: str) -> Any:
    return pool_properties_measure(pool=Pool.objects.get(pk=pool_id))


def _version_quality(version_id: int, key: str) -> Any:
    version = MixtureVersion.objects.get(pk=version_id)
    try:
        return quality.mixture_quality(version.path, by=key or "pool")
    except (ShardcoreError, OSError, ValueError) as exc:
        return {"error": f"no quality measured: {exc}"}


def _source_stats(tokenized_id: int, key: str) -> Any:
    ts = TokenizedSource.objects.select_related("source").get(pk=tokenized_id)
    return property_stats(ts.path, list(ts.source.metadata_fields or []))


def _version_epochs(version_id: int, key: str) -> Any:
    """Where each pool's next pass starts in the version's schedule (its first
    EPOCH_STARTS_KEPT), with the pool's path: one pass over the pool column, here."""
    mix = Mixture(MixtureVersion.objects.get(pk=version_id).path, ranged=True)
    starts = mix.epoch_starts()
    return {
        "starts": starts[:EPOCH_STARTS_KEPT],
        "total": len(starts),
        "paths": [p["path"] for p in mix.pools],
    }


def _decon_pool_items(pool_id: int, key: str) -> Any:
    """Per benchmark of decon annotation ``key``: the overlapping documents and items the
    pool holds."""
    return decon_pool_items_measure(
        pool=Pool.objects.get(pk=pool_id),
        annotation=Annotation.objects.select_related("tokenized_source").get(pk=int(key)),
    )


MEASURES: dict[str, Callable[[int, str], Any]] = {
    "pool_quality": _pool_quality,
    "pool_properties": _pool_properties,
    "version_quality": _version_quality,
    "source_stats": _source_stats,
    "version_epochs": _version_epochs,
    "decon_pool_items": _decon_pool_items,
}

__all__ = [
    "MEASURES",
    "decon_pool_items_measure",
    "pool_properties_measure",
    "pool_quality_measure",
]

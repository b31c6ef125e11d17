"""Training runs: a page of runs, and a run's lineage down to its sources."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count

from webapp.catalog.models import (
    MixtureComponent,
    Pool,
    RunProgress,
    Source,
    Taint,
    TokenizedSource,
    TrainingRun,
)


def run_list(*, offset: int = 0, limit: int = 50) -> list[TrainingRun]:
    """A page of runs with their mixture version and whether they are tainted: two
    queries (the runs with a tainted flag annotated, and nothing else)."""
    return list(
        TrainingRun.objects.select_related("mixture_version__mixture")
        .annotate(num_taints=Count("taints"))
        .order_by("-created_at")[offset : offset + limit]
    )


@dataclass
class RunLineage:
    run: TrainingRun
    components: list[MixtureComponent]
    pools: list[Pool]  # the components' pools
    tokenized: list[TokenizedSource]
    sources: list[Source]
    taints: list[Taint]
    extra: dict[str, Any] = field(default_factory=dict)


def run_lineage(*, run_id: int) -> RunLineage:
    """Which sources fed this run: run -> version -> components -> pools -> tokenized
    sources -> sources. Four queries whatever the size of the tree."""
    run = TrainingRun.objects.select_related("mixture_version__mixture").get(pk=run_id)
    components = list(
        MixtureComponent.objects.filter(version_id=run.mixture_version_id)
        .select_related("pool")
        .order_by("id")
    )
    pool_ids = [c.pool_id for c in components]
    tokenized = list(
        TokenizedSource.objects.filter(pools__in=pool_ids)
        .select_related("source", "tokenizer")
        .distinct()
        .order_by("pk")
    )
    taints = list(Taint.objects.filter(run=run).select_related("flag", "flag__source"))
    return RunLineage(
        run=run,
        components=components,
        pools=[c.pool for c in components],
        tokenized=tokenized,
        sources=sorted({t.source for t in tokenized}, key=lambda s: s.name),
        taints=taints,
    )


def run_progress_reports(*, run: TrainingRun) -> list[tuple[int, int]]:
    """Every progress report of ``run`` as (step, consumed samples)."""
    return progress_reports([run]).get(run.pk, [])


def progress_reports(runs: list[TrainingRun]) -> dict[int, list[tuple[int, int]]]:
    """Per run, its progress reports as (step, consumed samples): one query for all."""
    out: dict[int, list[tuple[int, int]]] = {}
    if not runs:
        return out
    rows = RunProgress.objects.filter(run_id__in=[r.pk for r in runs]).values_list(
        "run_id", "step", "consumed_samples"
    )
    for run_id, step, consumed in rows:
        out.setdefault(run_id, []).append((step, consumed))
    for r in runs:  # a run whose reports were pruned still has its latest position
        if r.consumed_samples and r.pk not in out:
            out[r.pk] = [(r.last_step, r.consumed_samples)]
    return out

"""The overview: how many of each thing exist, the newest runs and the newest taints."""

from __future__ import annotations

from webapp.catalog.models import (
    ArtifactStatus,
    Flag,
    Mixture,
    MixtureVersion,
    Pool,
    Source,
    Taint,
    TokenizedSource,
    TrainingRun,
)
from webapp.catalog.selectors.common import runs_with_taint
from webapp.catalog.selectors.flags import taint_describe, tainted_runs, taints_with_targets
from webapp.jobs.models import ACTIVE_JOB_STATES, Job


def overview_counts() -> dict[str, int]:
    """Counts for the overview page in one query per count (nine queries)."""
    return {
        "sources": Source.objects.count(),
        "tokenized": TokenizedSource.objects.filter(status=ArtifactStatus.READY).count(),
        "pools": Pool.objects.filter(status=ArtifactStatus.READY).count(),
        "mixtures": Mixture.objects.count(),
        "mixture_versions": MixtureVersion.objects.count(),
        "runs": TrainingRun.objects.count(),
        "tainted_runs": tainted_runs().count(),
        "active_jobs": Job.objects.filter(state__in=ACTIVE_JOB_STATES).count(),
        "flags": Flag.objects.count(),
    }


def overview(*, runs: int = 10, taints: int = 20) -> dict:
    """``counts`` (``overview_counts``), the newest ``runs`` (marked ``tainted``) and the
    newest ``taints`` (``flags.taint_describe``)."""
    recent = TrainingRun.objects.select_related("mixture_version__mixture").order_by("-created_at")[
        :runs
    ]
    newest = taints_with_targets(
        list(Taint.objects.select_related("run", "flag").order_by("-created_at")[:taints])
    )
    return {
        "counts": overview_counts(),
        "recent_runs": runs_with_taint(list(recent)),
        "taints": [taint_describe(t) for t in newest],
    }

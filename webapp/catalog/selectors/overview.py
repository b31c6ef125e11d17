"""The overview: how many of each thing exist, what runs, what is tainted."""

from __future__ import annotations

from webapp.catalog.models import (
    ArtifactStatus,
    Flag,
    MixtureVersion,
    Pool,
    Source,
    TokenizedSource,
    TrainingRun,
)
from webapp.jobs.models import ACTIVE_JOB_STATES, Job


def overview_counts() -> dict[str, int]:
    """Counts for the overview page in one query per table (seven queries)."""
    return {
        "sources": Source.objects.count(),
        "tokenized": TokenizedSource.objects.filter(status=ArtifactStatus.READY).count(),
        "pools": Pool.objects.filter(status=ArtifactStatus.READY).count(),
        "mixture_versions": MixtureVersion.objects.count(),
        "runs": TrainingRun.objects.count(),
        "active_jobs": Job.objects.filter(state__in=ACTIVE_JOB_STATES).count(),
        "flags": Flag.objects.count(),
    }

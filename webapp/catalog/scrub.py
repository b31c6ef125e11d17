"""Writes for the scrub: re-verify every built artifact against its checksums (a job of the
shardcore "scrub" stage), record the corrupt ones as ``Corruption`` rows and mark what was
built from them, as a flag taints through lineage.

Scheduling: every worker's sweeper (``workers.sweeper``, every SHARDYARD_SWEEP_INTERVAL
seconds) calls ``scrub_due_start``, which starts a scrub when the newest scrub job is older
than SHARDYARD_SCRUB_INTERVAL (a week by default; 0 turns it off) and some artifact was
built before that. ``manage.py catalog scrub`` starts one at once.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from shardcore.scrub import plan_scrub
from webapp.catalog.models import (
    ArtifactStatus,
    Corruption,
    Export,
    MixtureVersion,
    Pool,
    TokenizedSource,
    TrainingRun,
)
from webapp.catalog.services.common import artifact_dir
from webapp.jobs import recorders
from webapp.jobs.models import Job
from webapp.jobs.services import job_create

RECORDER = "scrub"
_KINDS: dict[str, tuple[str, type[TokenizedSource | Pool | MixtureVersion | Export]]] = {
    "tokenized": ("tokenized_source", TokenizedSource),
    "pool": ("pool", Pool),
    "version": ("mixture_version", MixtureVersion),
    "export": ("export", Export),
}


def _artifacts() -> list[dict[str, str]]:
    """Every built artifact with files: tokenized sources, pools (train and validation),
    mixture versions and materialized copies."""
    out = []
    for kind, (_field, model) in _KINDS.items():
        qs: QuerySet[Any] = model.objects.filter(status=ArtifactStatus.READY)
        if model is Export:
            qs = qs.filter(format=Export.Format.MATERIALIZED)
        for pk, path in qs.order_by("pk").values_list("pk", "path"):
            out.append({"key": f"{kind}:{pk}", "path": path})
    return out


def scrub_start(*, created_by=None):
    """Start a scrub job over every built artifact; returns the job."""

    artifacts = _artifacts()
    plan = plan_scrub(artifacts, artifact_dir("scrub", "scrub"))
    return job_create(
        plan=plan,
        title=f"scrub: verify {len(artifacts)} artifact(s) against their checksums",
        recorder=RECORDER,
        created_by=created_by,
    )


def scrub_due_start():
    """Start a scrub when one is due (see the module docstring); returns the job or None.
    Two sweepers at once may both start one: harmless, the second finds what the first did."""

    interval = settings.SHARDYARD_SCRUB_INTERVAL
    if not interval:
        return None
    cutoff = timezone.now() - timedelta(seconds=interval)
    if Job.objects.filter(kind="scrub", created_at__gte=cutoff).exists():
        return None
    old_enough = any(
        model.objects.filter(status=ArtifactStatus.READY, finished_at__lt=cutoff).exists()
        for _field, model in _KINDS.values()
    )
    return scrub_start() if old_enough else None


@recorders.register(RECORDER)
def scrub_record(*, job, manifest: dict | None) -> None:
    """Recorder of scrub jobs (inside the job's final transaction): corrupt artifacts get a
    Corruption row and mark everything built from them; intact ones lose theirs."""
    if manifest is None:
        return
    for result in manifest.get("results", []):
        kind, _, pk = str(result.get("key", "")).partition(":")
        if kind not in _KINDS or not pk.isdigit():
            continue
        field, model = _KINDS[kind]
        target = model.objects.filter(pk=int(pk)).first()
        if target is None:
            continue  # deleted since the scrub was planned
        direct = Corruption.objects.filter(cause=None, **{field: target})
        if result.get("ok"):
            direct.delete()  # restored: its effects go with it (cascade)
            continue
        first = (result.get("problems") or [{}])[0]
        where = first.get("path", "?")
        if first.get("offset") is not None:
            where += f" at byte {first['offset']}"
        problem = f"{where}: {first.get('message', 'does not match its manifest')}"
        corruption = direct.first()
        if corruption is None:
            corruption = Corruption.objects.create(problem=problem, job=job, **{field: target})
        else:
            Corruption.objects.filter(pk=corruption.pk).update(problem=problem, job=job)
        corruption_propagate(corruption=corruption)


def corruption_propagate(*, corruption: Corruption) -> int:
    """(Re)mark everything built from the corrupt artifact: pools from a tokenized source,
    mixture versions from a pool, runs and materialized copies from a version. Idempotent."""
    target = corruption.target
    pools, versions = [], []
    if isinstance(target, TokenizedSource):
        pools = list(Pool.objects.filter(parents=target).distinct())
    elif isinstance(target, Pool):
        pools = [target]
    if pools:
        versions = list(MixtureVersion.objects.filter(components__pool__in=pools).distinct())
    elif isinstance(target, MixtureVersion):
        versions = [target]
    label = _label(target)
    problem = f"built from {label}, which is corrupt: {corruption.problem}"
    effects = [Corruption(cause=corruption, pool=p, problem=problem) for p in pools if p != target]
    effects += [
        Corruption(cause=corruption, mixture_version=v, problem=problem)
        for v in versions
        if v != target
    ]
    if versions:
        effects += [
            Corruption(cause=corruption, run=r, problem=problem)
            for r in TrainingRun.objects.filter(mixture_version__in=versions)
        ]
        effects += [
            Corruption(cause=corruption, export=e, problem=problem)
            for e in Export.objects.filter(
                version__in=versions,
                format=Export.Format.MATERIALIZED,
                status=ArtifactStatus.READY,
            )
        ]
    with transaction.atomic():
        Corruption.objects.filter(cause=corruption).delete()
        Corruption.objects.bulk_create(effects)
    return len(effects)


def corruption_refresh() -> int:
    """Re-mark the effects of every known corruption: a run registered or a version built on
    corrupt data since the scrub is marked too (called as they are recorded)."""
    return sum(
        corruption_propagate(corruption=c)
        for c in Corruption.objects.filter(cause=None).select_related(
            "tokenized_source", "pool", "mixture_version", "export", "run"
        )
    )


def _label(target) -> str:
    if isinstance(target, TokenizedSource):
        return f"tokenized source #{target.pk} ({target.source.name})"
    if isinstance(target, Pool):
        return f"pool {target.name} ({target.split})"
    if isinstance(target, MixtureVersion):
        return f"mixture version {target}"
    if isinstance(target, Export):
        return f"materialized copy #{target.pk} of {target.version}"
    return f"run {target.name}"

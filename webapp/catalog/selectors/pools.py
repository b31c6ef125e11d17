"""Pools: a page of pools, a pool with its shards, parents, versions and taints, and its
shuffle quality measured from its files."""

from __future__ import annotations

import logging

from django.db.models import Count, Prefetch, QuerySet

from shardcore import manifest as mf
from shardcore.errors import ShardcoreError
from webapp.catalog.models import (
    ArtifactStatus,
    MixtureComponent,
    MixtureVersion,
    Pool,
    RunLoss,
    TokenizedSource,
    TrainingRun,
)
from webapp.catalog.selectors import facts
from webapp.catalog.selectors.common import get_or_not_found
from webapp.catalog.selectors.shards import artifact_shards
from webapp.jobs.models import Job
from webapp.paging import page_of

log = logging.getLogger(__name__)

SHARDS_SHOWN = 50


def pool_list(*, page=1) -> dict:
    """A page of pools, newest first (``common.paged``)."""
    return page_of(Pool.objects.order_by("-created_at").defer("params"), page)


def pool_rows() -> QuerySet[Pool]:
    """Pools newest first with their parents and annotations: the API pages this query."""
    return Pool.objects.prefetch_related("parents", "annotations").order_by("-created_at")


def pool_detail(*, pool_id: int, by: str = "") -> dict:
    """A pool: its first shards and its totals (kept on its row), its parents, the
    versions using it, its taints, the properties its documents can be labelled by, and
    its shuffle quality (``pool_quality``) labelled by ``by`` (kept only when it is one of
    them, ``length`` or ``_doc.source``). Reads rows only: what is measured from the
    pool's files is stored by a task (``webapp.catalog.services.facts``)."""
    pool = get_or_not_found(Pool.objects.all(), "pool", pk=pool_id)
    parents = list(pool.parents.select_related("source", "tokenizer").defer("params"))
    versions = list(
        MixtureVersion.objects.filter(components__pool=pool)
        .select_related("mixture")
        .distinct()
        .order_by("-created_at")[:20]
    )
    properties = pool_properties(pool=pool)
    by = by if by in properties or by in ("length", "_doc.source") else ""
    return {
        "pool": pool,
        "by": by,
        "properties": properties,
        # The (pool, index) index serves the first page of shards.
        "shards": list(artifact_shards(pool_id=pool.pk, limit=SHARDS_SHOWN)),
        "totals": {
            "shards": pool.num_shards,
            "records": pool.num_records,
            "tokens": pool.num_tokens,
            "bytes": pool.num_bytes,
        },
        "parents": parents,
        "versions": versions,
        "taints": list(pool.taints.select_related("flag")[:20]),
        "quality": pool_quality(pool=pool, by=by),
        "training": pool_training(pool=pool),
    }


TRAINING_RUNS = 6
TRAINING_POINTS = 5000


def pool_planned_by(*, job_id: int) -> Pool | None:
    """The train pool a planning job (``shardcore.planning``) planned: the one at the
    output its plan names (its own job is the pool's job once planned)."""
    target = (
        Job.objects.filter(pk=job_id, kind="planning")
        .values_list("plan__params__target", flat=True)
        .first()
    )
    if not target:
        return None
    return Pool.objects.filter(path=target, split=Pool.Split.TRAIN).first()


def pool_training(*, pool: Pool) -> list[dict]:
    """Training loss of the runs that read this pool, or another pool of the same
    documents (the same tokenized sources, filter and seq_len: another shuffle), alone and in
    pool order (their version's only component; the newest TRAINING_RUNS): per run its
    pool, its training loss per step and where each shard of its pool starts, in steps
    (records / samples per step, from the run's latest progress report). The loss bumps
    of a shard-local shuffle show against the exact shuffle. A bounded number of queries."""
    parents = sorted(pool.parents.values_list("pk", flat=True))
    # The candidates' parents in one query (not one per candidate pool).
    siblings = [
        p
        for p in Pool.objects.filter(
            parents__in=parents, seq_len=pool.seq_len, filter=pool.filter, split=Pool.Split.TRAIN
        )
        .distinct()
        .defer("params")
        .prefetch_related(Prefetch("parents", queryset=TokenizedSource.objects.only("id")))
        if sorted(t.pk for t in p.parents.all()) == parents
    ]
    alone = (
        MixtureComponent.objects.filter(pool__in=siblings)
        .values("version_id")
        .annotate(n=Count("id"))
    )
    single = {
        c.version_id: c.pool
        for c in MixtureComponent.objects.filter(
            version_id__in=[v["version_id"] for v in alone if v["n"] == 1]
        ).select_related("pool")
    }
    runs = list(
        TrainingRun.objects.filter(mixture_version_id__in=list(single), losses__split="train")
        .distinct()
        .order_by("-created_at")[:TRAINING_RUNS]
    )
    losses: dict[int, list[tuple[int, float]]] = {}
    for run_id, step, loss in (
        RunLoss.objects.filter(run__in=runs, split="train")
        .order_by("run_id", "step")
        .values_list("run_id", "step", "loss")[: TRAINING_POINTS * max(len(runs), 1)]
    ):
        losses.setdefault(run_id, []).append((step, loss))
    out = []
    for run in runs:
        p = single[run.mixture_version_id]
        per_step = run.consumed_samples / run.last_step if run.last_step else 0
        try:
            cumulative = mf.read_manifest(p.path)["cumulative_records"]
        except (ShardcoreError, OSError, KeyError):
            cumulative = []
        out.append(
            {
                "run": run,
                "pool": p,
                "steps": [s for s, _ in losses.get(run.pk, [])],
                "loss": [x for _, x in losses.get(run.pk, [])],
                "shard_steps": [c / per_step for c in cumulative[1:-1]] if per_step else [],
            }
        )
    return out


def pool_properties(*, pool: Pool) -> list[str]:
    """What the quality charts can label documents by: the pool's properties (nested ones
    as dotted paths), measured from its documents table's schema by a task
    (``pool_properties_measure``) and stored; none while being measured."""
    return (facts.fact_read("pool_properties", pool.pk).get("value")) or []


def pools_properties(pools: list[Pool]) -> dict[int, list[str]]:
    """``pool_properties`` of many pools in one query."""
    stored = facts.facts_read("pool_properties", [p.pk for p in pools])
    return {p.pk: stored.get(p.pk) or [] for p in pools}


# --- shuffle quality --------------------------------------------------------------------


def pool_quality(*, pool, by: str = "") -> dict:
    """The shuffle-quality report of a built pool (``pool_quality_measure``): the pool's
    own order (per record, ``shardcore.quality.report``), and every registered shuffle run
    on the same documents in the same input order, measured per document. Labels: the
    property ``by`` (or ``length``), else the tokenized source when the pool has several,
    else the document-length bin (log2 tokens). The default labels' report is the one
    its build recorded (``params["quality"]``); any other is measured by a task the first
    time it is asked for and stored (``webapp.catalog.services.facts``): until then
    ``{"computing": {state, progress, since}}``. Empty when the files are absent."""
    recorded = None if by else (pool.params or {}).get("quality")
    if recorded and "label_verdicts" in recorded:
        return recorded
    if pool.status != ArtifactStatus.READY:
        return recorded or {}
    stored = facts.fact_read("pool_quality", pool.pk, by)
    if "value" in stored:
        return stored["value"] or recorded or {}
    if "computing" in stored:
        return {"computing": stored["computing"]}
    return recorded or {"error": stored.get("error", "")}

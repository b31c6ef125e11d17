"""Reads for the catalog: overview counts, detail pages, lineage both ways and audit.

Each selector runs a fixed number of queries whatever the number of shards, runs or
files (tests assert the counts): lists are paginated by the caller or bounded here, and
relations are fetched with select_related / prefetch_related / aggregates, never per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Prefetch, Q, QuerySet, Sum

from webapp.catalog.models import (
    ArtifactStatus,
    Flag,
    MixtureComponent,
    MixtureVersion,
    Pool,
    Shard,
    Source,
    SourceFile,
    Taint,
    TokenizedSource,
    TrainingRun,
)


def overview_counts() -> dict[str, int]:
    """Counts for the overview page in one query per table (six queries)."""
    from webapp.jobs.models import ACTIVE_JOB_STATES, Job

    return {
        "sources": Source.objects.count(),
        "tokenized": TokenizedSource.objects.filter(status=ArtifactStatus.READY).count(),
        "pools": Pool.objects.filter(status=ArtifactStatus.READY).count(),
        "mixture_versions": MixtureVersion.objects.count(),
        "runs": TrainingRun.objects.count(),
        "active_jobs": Job.objects.filter(state__in=ACTIVE_JOB_STATES).count(),
        "flags": Flag.objects.count(),
    }


@dataclass
class SourceDetail:
    source: Source
    files: list[SourceFile]
    file_totals: dict[str, int]
    tokenized: list[TokenizedSource]
    flags: list[Flag]


def source_detail(*, source_id: int, files_limit: int = 200) -> SourceDetail:
    """Five queries: the source, its first files, file totals, tokenized versions, flags."""
    source = Source.objects.get(pk=source_id)
    files = list(SourceFile.objects.filter(source=source).order_by("path")[:files_limit])
    totals = SourceFile.objects.filter(source=source).aggregate(
        files=Count("id"), documents=Sum("num_documents"), bad_lines=Sum("bad_lines")
    )
    tokenized = list(
        TokenizedSource.objects.filter(source=source)
        .select_related("tokenizer")
        .annotate(num_shards=Count("shards"))
        .order_by("-created_at")
    )
    flags = list(Flag.objects.filter(source=source).order_by("-created_at"))
    return SourceDetail(
        source=source,
        files=files,
        file_totals={k: v or 0 for k, v in totals.items()},
        tokenized=tokenized,
        flags=flags,
    )


def artifact_shards(*, tokenized_id: int | None = None, pool_id: int | None = None,
                    offset: int = 0, limit: int = 100) -> QuerySet[Shard]:  # fmt: skip
    """One page of an artifact's shards, in index order (uses the (parent, index) index)."""
    qs = Shard.objects.all()
    qs = qs.filter(tokenized_source_id=tokenized_id) if tokenized_id else qs.filter(pool_id=pool_id)
    return qs.order_by("index")[offset : offset + limit]


def shard_totals(*, tokenized_id: int | None = None, pool_id: int | None = None) -> dict:
    qs = Shard.objects.all()
    qs = qs.filter(tokenized_source_id=tokenized_id) if tokenized_id else qs.filter(pool_id=pool_id)
    out = qs.aggregate(
        shards=Count("id"), records=Sum("num_records"), tokens=Sum("num_tokens"),
        bytes=Sum("num_bytes"),
    )  # fmt: skip
    return {k: v or 0 for k, v in out.items()}


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


def source_runs(*, source_id: int) -> QuerySet[TrainingRun]:
    """Which runs used this source (through any tokenized source, pool and version)."""
    return (
        TrainingRun.objects.filter(mixture_version__components__pool__parents__source_id=source_id)
        .select_related("mixture_version__mixture")
        .distinct()
        .order_by("-created_at")
    )


def file_runs(*, source_id: int, path: str) -> list[TrainingRun]:
    """Which runs read documents of this file: the runs whose pools hold any of them."""
    sf = SourceFile.objects.get(source_id=source_id, path=path)
    return _runs_holding(source_id=source_id, target=("file", sf.path))


def document_runs(*, source_id: int, document_ids: list[int]) -> list[TrainingRun]:
    """Which runs read any of these documents (pool documents.parquet decides)."""
    return _runs_holding(source_id=source_id, target=("documents", set(document_ids)))


def _runs_holding(*, source_id: int, target: tuple[str, Any]) -> list[TrainingRun]:
    from webapp.catalog import lineage

    kind, value = target
    pools: set[int] = set()
    tokenized = TokenizedSource.objects.filter(source_id=source_id, status=ArtifactStatus.READY)
    for ts in tokenized.prefetch_related(
        Prefetch("pools", queryset=Pool.objects.filter(status=ArtifactStatus.READY))
    ):
        ids = audit_document_ids(tokenized=ts, file_path=value) if kind == "file" else value
        for pool in ts.pools.all():
            if ids and lineage.pool_documents_hit(pool=pool, tokenized=ts, doc_ids=ids):
                pools.add(pool.pk)
    return list(
        TrainingRun.objects.filter(mixture_version__components__pool__in=pools)
        .select_related("mixture_version__mixture")
        .distinct()
        .order_by("-created_at")
    )


def audit_document_ids(
    *, tokenized: TokenizedSource, file_path: str | None = None, document_ids=None
) -> set[int]:
    """The documents of ``tokenized`` an audit asks about: ``document_ids``, or the
    documents of the file ``file_path`` (the id range the tokenize stage recorded in
    ``params["file_ranges"]``; empty for a file it did not read)."""
    if file_path is not None:
        start, stop = (tokenized.params.get("file_ranges") or {}).get(file_path, (0, 0))
        return set(range(start, stop))
    return set(document_ids or ())


@dataclass
class FlagImpact:
    flag: Flag
    tokenized: list[TokenizedSource]
    pools: list[Pool]
    versions: list[MixtureVersion]
    runs: list[TrainingRun]


def flag_impact(*, flag_id: int) -> FlagImpact:
    """What a flag taints, grouped by kind: two queries."""
    flag = Flag.objects.select_related("source", "source_file").get(pk=flag_id)
    taints = list(
        Taint.objects.filter(flag=flag).select_related(
            "tokenized_source__source", "pool", "mixture_version__mixture", "run"
        )
    )
    return FlagImpact(
        flag=flag,
        tokenized=[t.tokenized_source for t in taints if t.tokenized_source_id],
        pools=[t.pool for t in taints if t.pool_id],
        versions=[t.mixture_version for t in taints if t.mixture_version_id],
        runs=[t.run for t in taints if t.run_id],
    )


def tainted_runs() -> QuerySet[TrainingRun]:
    """Runs that read flagged data (the audit page's headline list)."""
    return (
        TrainingRun.objects.filter(taints__isnull=False)
        .select_related("mixture_version__mixture")
        .annotate(num_flags=Count("taints__flag", distinct=True))
        .order_by("-created_at")
    )


def is_tainted_q(prefix: str = "") -> Q:
    """A filter for rows with at least one taint (``taints`` relation)."""
    return Q(**{f"{prefix}taints__isnull": False})

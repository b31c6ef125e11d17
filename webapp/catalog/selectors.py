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


def run_segments(*, run: TrainingRun) -> list:
    """The mixture versions the run read, in order (``RunSegment`` rows, the version
    loaded): the recorded segments, or for a run that never switched one unsaved segment,
    its version from sample 0 on. One query."""
    from webapp.catalog.models import RunSegment

    rows = list(
        RunSegment.objects.filter(run_id=run.pk)
        .select_related("mixture_version__mixture")
        .order_by("index")
    )
    if rows:
        return rows
    return [
        RunSegment(
            run=run, index=0, mixture_version=run.mixture_version, first_sample=0, first_step=1
        )
    ]


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


# --- per-step lineage -------------------------------------------------------------------

# (flag, mixture version) -> per pool index of the version's manifest, which records hold
# a flagged document. Both rows are immutable once written, so the answer never changes.
_FLAGGED_RECORDS: dict[tuple[int, int], dict] = {}
_FIRST_FLAGGED: dict[tuple[int, int], int | None] = {}
_FLAGGED_COUNTS: dict[tuple[int, int, int | None], int] = {}


def _flagged_masks(*, flag: Flag, version: MixtureVersion) -> dict:
    """The flag's documents -> their rows in each pool of the version
    (``documents.parquet``) -> per pool, the records holding them (segment arrays)."""
    key = (flag.pk, version.pk)
    if key in _FLAGGED_RECORDS:
        return _FLAGGED_RECORDS[key]
    from shardcore import lineage as core
    from shardcore.manifest import read_manifest
    from webapp.catalog import lineage

    manifest = read_manifest(version.path)
    index = {p.get("fingerprint"): i for i, p in enumerate(manifest["pools"])}
    pools = Pool.objects.filter(components__version=version).distinct()
    masks = {}
    for pool in pools.prefetch_related(
        Prefetch("parents", queryset=TokenizedSource.objects.filter(source_id=flag.source_id))
    ):
        if pool.fingerprint not in index:
            continue
        rows = [
            lineage.pool_document_rows(
                pool=pool,
                tokenized=ts,
                doc_ids=lineage.flag_document_ids(flag=flag, tokenized=ts),
            )
            for ts in pool.parents.all()
        ]
        if rows:
            masks[index[pool.fingerprint]] = core.flagged_records(
                manifest["pools"][index[pool.fingerprint]]["path"], _concat(rows)
            )
    _FLAGGED_RECORDS[key] = masks
    return masks


def flag_first_sample(*, flag: Flag, version: MixtureVersion) -> int | None:
    """The first training sample of ``version`` whose record holds a document ``flag``
    names (``shardcore.lineage.first_sample`` over ``_flagged_masks``)."""
    key = (flag.pk, version.pk)
    if key in _FIRST_FLAGGED:
        return _FIRST_FLAGGED[key]
    from shardcore import lineage as core

    first = core.first_sample(version.path, _flagged_masks(flag=flag, version=version))
    _FIRST_FLAGGED[key] = first
    return first


def segment_flagged(*, flag: Flag, segment) -> dict:
    """What one segment of a run holds of ``flag``'s documents: the version's samples the
    run reads there ([0, its length); an open segment reads to the version's end), how
    many of them read a flagged record, and the first, in the run's sample numbering
    (None: none)."""
    from shardcore import lineage as core

    version = segment.mixture_version
    stop = None if segment.end_sample is None else segment.end_sample - segment.first_sample
    first = flag_first_sample(flag=flag, version=version)
    if first is None or (stop is not None and first >= stop):
        return {"version": version.pk, "flagged_samples": 0, "first_sample": None}
    key = (flag.pk, version.pk, stop)
    if key not in _FLAGGED_COUNTS:
        _FLAGGED_COUNTS[key] = core.flagged_samples(
            version.path, _flagged_masks(flag=flag, version=version), stop=stop
        )[0]
    return {
        "version": version.pk,
        "flagged_samples": _FLAGGED_COUNTS[key],
        "first_sample": segment.first_sample + first,
    }


def _concat(parts):
    import numpy as np

    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def flag_read(
    *,
    flag: Flag,
    version: MixtureVersion | None = None,
    reports: list[tuple[int, int]],
    segments: list | None = None,
) -> dict:
    """When a run of ``version`` (or of ``segments``, the versions a run switched between)
    with progress ``reports`` ((step, consumed samples)) first read a document ``flag``
    names: ``{flag, first_sample, read, step, exact, after_step, by_step, segments}``;
    ``read: False`` with the run's current ``consumed_samples`` and ``step``; ``never:
    True`` when no sample the run reads holds one; ``error`` when a version has no
    readable schedule. ``segments`` says per segment how many of the samples it reads are
    flagged and the first (run numbering). Assumes the trainer reads in Shardyard's order."""
    from shardcore import lineage as core
    from shardcore.errors import ShardcoreError
    from webapp.catalog.models import RunSegment

    if segments is None:
        segments = [RunSegment(mixture_version=version, first_sample=0, first_step=1)]
    row: dict[str, Any] = {"flag": flag, "first_sample": None, "read": False, "never": False}
    try:
        parts = [segment_flagged(flag=flag, segment=g) for g in segments]
    except (ShardcoreError, OSError, KeyError, ValueError) as e:
        return {**row, "error": f"no schedule to read: {e}"}
    for g, part in zip(segments, parts, strict=True):
        part.update(segment=g.index, from_sample=g.first_sample, to_sample=g.end_sample)
    row["segments"] = parts
    firsts = [p["first_sample"] for p in parts if p["first_sample"] is not None]
    if not firsts:
        return {**row, "never": True}
    first = min(firsts)
    return {**row, "first_sample": first, **core.step_of_sample(first, reports)}


def run_flag_reads(*, run: TrainingRun, flag_ids: list[int] | None = None) -> list[dict]:
    """``flag_read`` for each flag tainting ``run`` (or those of ``flag_ids``), over the
    versions the run read (its segments)."""
    taints = Taint.objects.filter(run=run).select_related("flag", "flag__source_file")
    if flag_ids is not None:
        taints = taints.filter(flag_id__in=flag_ids)
    reports = _reports([run]).get(run.pk, [])
    segments = run_segments(run=run)
    return [
        flag_read(flag=t.flag, reports=reports, segments=segments)
        for t in taints.order_by("flag_id")
    ]


def flag_run_reads(*, flag: Flag, runs: list[TrainingRun]) -> dict[int, dict]:
    """``flag_read`` for each of ``runs`` (with ``mixture_version`` loaded): one query
    for all their reports, one for their segments, one schedule scan per version."""
    from webapp.catalog.models import RunSegment

    reports = _reports(runs)
    recorded: dict[int, list] = {}
    for g in RunSegment.objects.filter(run__in=runs).select_related("mixture_version"):
        recorded.setdefault(g.run_id, []).append(g)
    out = {}
    for r in runs:
        segments = sorted(recorded.get(r.pk, []), key=lambda g: g.index) or [
            RunSegment(run=r, index=0, mixture_version=r.mixture_version, first_sample=0)
        ]
        out[r.pk] = flag_read(flag=flag, reports=reports.get(r.pk, []), segments=segments)
    return out


def _reports(runs: list[TrainingRun]) -> dict[int, list[tuple[int, int]]]:
    from webapp.catalog.models import RunProgress

    out: dict[int, list[tuple[int, int]]] = {}
    rows = RunProgress.objects.filter(run_id__in=[r.pk for r in runs]).values_list(
        "run_id", "step", "consumed_samples"
    )
    for run_id, step, consumed in rows:
        out.setdefault(run_id, []).append((step, consumed))
    for r in runs:  # a run whose reports were pruned still has its latest position
        if r.consumed_samples and r.pk not in out:
            out[r.pk] = [(r.last_step, r.consumed_samples)]
    return out

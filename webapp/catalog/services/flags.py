"""Writes for flags and taint: a flag on a source, file or documents marks everything
built from them, through lineage, with the number of flagged documents each holds.

Recording a flag writes its row only; its taint (which reads each tainted pool's documents
table) is computed by a task (``workers.flag_taint`` -> ``flag_taint_compute``), then the
first reads of its runs by another (``flag_reads_compute``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from shardcore import storage
from webapp.catalog import flag_documents, pool_documents
from webapp.catalog.errors import CatalogError
from webapp.catalog.models import (
    ArtifactStatus,
    Export,
    Flag,
    MixtureVersion,
    Pool,
    RunSegment,
    Source,
    SourceFile,
    Taint,
    TokenizedSource,
    TrainingRun,
)
from webapp.catalog.scrub import corruption_refresh
from webapp.catalog.selectors import segment_flagged
from webapp.catalog.selectors.flags import flag_read
from webapp.catalog.selectors.runs import runs_segments
from webapp.catalog.services.facts import flag_reads_request, flag_taint_request

log = logging.getLogger(__name__)


def flag_create(
    *,
    reason: str,
    source_id: int,
    file_path: str | None = None,
    document_ids: Iterable[int] | None = None,
    where: str = "",
    annotation_id: int | None = None,
    created_by=None,
) -> Flag:
    """Flag a whole source, one of its files, or a set of its document indices; what it
    taints downstream is computed by a task, asked for when the transaction commits (the
    flag's ``taint_state`` says queued until it is stored). ``where`` and ``annotation_id``:
    the documents are those where the filter holds over the annotation's columns (recorded
    with the flag); without ``document_ids`` the task evaluates it first."""
    if not reason.strip():
        raise CatalogError("a flag needs a reason")
    source = Source.objects.get(pk=source_id)
    source_file = None
    ids: np.ndarray | None = None
    if file_path is not None and document_ids is not None:
        raise CatalogError("flag a file or a set of documents, not both")
    if file_path is not None:
        source_file = SourceFile.objects.filter(source=source, path=file_path).first()
        if source_file is None:
            raise CatalogError(f"source {source.name} has no file {file_path!r}")
        target = Flag.Target.FILE
    elif document_ids is None and where:
        if annotation_id is None:
            raise CatalogError("a filter is evaluated over an annotation: name one")
        target = Flag.Target.DOCUMENTS  # its documents are found by its taint task
    elif document_ids is not None:
        ids = flag_documents.normalized(document_ids)
        if not ids.size:
            raise CatalogError("no document ids given")
        if ids[0] < 0:
            raise CatalogError(f"document ids are indices from 0, got {ids[0]}")
        _documents_exist(source, ids)
        target = Flag.Target.DOCUMENTS
    else:
        target = Flag.Target.SOURCE
    with transaction.atomic():
        flag = Flag.objects.create(
            target=target,
            source=source,
            source_file=source_file,
            reason=reason,
            where=where,
            annotation_id=annotation_id,
            created_by=created_by,
            taint_state=Flag.TaintState.QUEUED,
            taint_requested_at=timezone.now(),
        )
        if ids is not None:
            flag_documents.store(flag, ids)
        flag_taint_request(flag_id=flag.pk)
    return flag


def _documents_exist(source: Source, ids: np.ndarray) -> None:
    """Refuse ids past the source's last document (its scan counted them), naming them and
    the valid range: a flag on a document that does not exist taints nothing and says so
    nowhere. A source not scanned yet has no count to check against."""
    if source.status != Source.Status.SCANNED:
        return
    n = int(source.num_documents)
    beyond = ids[ids >= n]  # ids are sorted
    if beyond.size:
        shown = ", ".join(str(int(i)) for i in beyond[:5])
        more = f" and {beyond.size - 5:,} more" if beyond.size > 5 else ""
        valid = f"its {n:,} documents are numbered 0 to {n - 1:,}" if n else "it has none"
        raise CatalogError(
            f"document ids: source {source.name} has no document {shown}{more}; {valid}"
        )


def flag_awaiting_documents(flag: Flag) -> bool:
    """A flag over "the documents where ..." whose filter its taint task has not evaluated
    yet (recorded over an annotation of more than ``settings.PLAN_INLINE_DOCUMENTS``)."""
    return bool(flag.where) and flag.num_documents is None


def flag_taint_compute(*, flag_id: int) -> str:
    """What the task runs: the flag's taint computed and stored (``flag_propagate``: READY),
    or FAILED with the error. A flag over "the documents where ..." recorded without them
    (a large annotation) first has its filter evaluated and the documents stored
    (``annotations.flag_where_evaluate``; none matching: FAILED with the reason a request
    gives). Idempotent: a redelivered or repeated task computes the same ids and rows
    again (they replace the flag's taint in one transaction). Returns the state."""
    flag = Flag.objects.select_related("annotation").filter(pk=flag_id).first()
    if flag is None:
        return "gone"  # deleted (with its source) before its task ran
    Flag.objects.filter(pk=flag_id).exclude(taint_state=Flag.TaintState.READY).update(
        taint_state=Flag.TaintState.RUNNING
    )
    try:
        if flag_awaiting_documents(flag):
            from webapp.catalog.services.annotations import flag_where_evaluate

            flag_where_evaluate(flag)
        flag_propagate(flag_id=flag_id)
    except Exception as exc:  # noqa: BLE001 - any failure is the flag's, said on its page
        if storage.is_store_error(exc):
            raise  # the object store did not answer: the task retries
        log.info("flag %s taint failed: %s", flag_id, exc)
        Flag.objects.filter(pk=flag_id).update(
            taint_state=Flag.TaintState.FAILED, taint_error=str(exc)[:2000]
        )
        return Flag.TaintState.FAILED
    return Flag.TaintState.READY


def flag_propagate(*, flag_id: int) -> int:
    """(Re)compute the taint of one flag through lineage; returns the number of taints.
    Idempotent: called on flag creation and whenever a new artifact or run is recorded."""
    flag = Flag.objects.select_related("source", "source_file").get(pk=flag_id)
    if flag_awaiting_documents(flag):
        return 0  # its taint task evaluates its filter, then computes its taint
    taints: list[Taint] = []
    hit_tokenized = _taint_hits(
        flag,
        TokenizedSource.objects.filter(source=flag.source),
        "tokenized_source",
        lambda ts: _flagged_docs_in_tokenized(flag, ts),
        taints,
    )
    hit_pools: dict[int, int] = {}
    if hit_tokenized:
        hit_pools = _taint_hits(
            flag,
            Pool.objects.filter(parents__in=list(hit_tokenized)).distinct(),
            "pool",
            lambda pool: _flagged_docs_in_pool(flag, pool, hit_tokenized),
            taints,
        )
    hit_versions: dict[int, int] = {}
    if hit_pools:
        hit_versions = _taint_hits(
            flag,
            MixtureVersion.objects.filter(components__pool__in=list(hit_pools)).distinct(),
            "mixture_version",
            lambda version: _flagged_docs_in_version(flag, version, hit_pools),
            taints,
        )
    if hit_versions:
        taints += _run_taints(flag, hit_versions)
        # A materialized copy holds the tokens itself (configs only name the pools' files).
        for export in Export.objects.filter(
            version__in=list(hit_versions),
            format=Export.Format.MATERIALIZED,
            status=ArtifactStatus.READY,
        ):
            taints.append(
                Taint(flag=flag, export=export, documents=hit_versions[export.version_id])
            )
    # A run's first flagged sample, once computed, stays while its segments do (a switch
    # adds one); the rest is computed again by a task (flag_reads_compute).
    kept = {
        run_id: read
        for run_id, read in Taint.objects.filter(flag=flag, run__isnull=False)
        .exclude(read__isnull=True)
        .values_list("run_id", "read")
    }
    num_segments = _runs_num_segments([t.run_id for t in taints if t.run_id])
    for t in taints:
        read = kept.get(t.run_id) if t.run_id else None
        if read is not None and len(read.get("segments") or [None]) == num_segments[t.run_id]:
            t.read = read
    counts = {
        "tokenized": sum(1 for t in taints if t.tokenized_source_id),
        "pools": sum(1 for t in taints if t.pool_id),
        "versions": sum(1 for t in taints if t.mixture_version_id),
        "runs": sum(1 for t in taints if t.run_id),
        "copies": sum(1 for t in taints if t.export_id),
        "documents": max((t.documents for t in taints if t.tokenized_source_id), default=0),
    }
    with transaction.atomic():
        Taint.objects.filter(flag=flag).delete()
        Taint.objects.bulk_create(taints)
        Flag.objects.filter(pk=flag.pk).update(
            counts=counts, taint_state=Flag.TaintState.READY, taint_error=""
        )
        if any(t.run_id and t.read is None for t in taints):
            flag_reads_request(flag_id=flag.pk)
        else:
            n = counts["runs"]
            Flag.objects.filter(pk=flag.pk).update(reads_total=n, reads_done=n)
    return len(taints)


def _runs_num_segments(run_ids: list[int]) -> dict[int, int]:
    """Per run, how many versions it read (1 for a run that never switched)."""
    out = dict.fromkeys(run_ids, 1)
    for run_id, n in (
        RunSegment.objects.filter(run_id__in=run_ids)
        .values("run_id")
        .annotate(n=Count("id"))
        .values_list("run_id", "n")
    ):
        out[run_id] = max(1, n)
    return out


def _taint_hits(flag: Flag, rows, field: str, count, taints: list[Taint]) -> dict[int, int]:
    """Appends to ``taints`` one taint of ``flag`` (on ``field``) per row of ``rows`` that
    holds ``count(row)`` > 0 flagged documents; returns {row id: flagged documents} of those."""
    hit: dict[int, int] = {}
    for row in rows:
        n = count(row)
        if n:
            hit[row.pk] = n
            taints.append(Taint(flag=flag, documents=n, **{field: row}))
    return hit


def _run_taints(flag: Flag, hit_versions: dict[int, int]) -> list[Taint]:
    """The runs that read a flagged document of a tainted version. A run that never
    switched reads its whole version (tainted as its version is); a run that switched
    read only a stretch of each earlier version, tainted when a flagged sample lies in
    it (``shardcore.flagged_reads`` over the schedule), and its current version from the switch
    to the end. ``documents``: the most a tainted version of the run holds."""

    hit = list(hit_versions)
    out: dict[int, Taint] = {}
    switched = set(
        RunSegment.objects.filter(mixture_version__in=hit).values_list("run_id", flat=True)
    ) | set(
        RunSegment.objects.filter(run__mixture_version__in=hit).values_list("run_id", flat=True)
    )
    for run in TrainingRun.objects.filter(mixture_version__in=hit).exclude(pk__in=switched):
        out[run.pk] = Taint(flag=flag, run=run, documents=hit_versions[run.mixture_version_id])
    segments = RunSegment.objects.filter(run_id__in=switched, mixture_version__in=hit)
    for g in segments.select_related("mixture_version", "run"):
        if (
            g.end_sample is not None
            and segment_flagged(flag=flag, segment=g)["first_sample"] is None
        ):
            continue  # the run stopped reading this version before its first flagged sample
        n = hit_versions[g.mixture_version_id]
        if g.run_id in out:
            out[g.run_id].documents = max(out[g.run_id].documents, n)
        else:
            out[g.run_id] = Taint(flag=flag, run=g.run, documents=n)
    return list(out.values())


def taint_refresh(*, source_ids: Iterable[int] | None = None) -> int:
    """Recompute the taint of every flag (of the given sources): new artifacts and runs
    built from flagged data are tainted as soon as they are recorded."""

    flags = Flag.objects.all()
    if source_ids is not None:
        flags = flags.filter(source_id__in=list(source_ids))
    corruption_refresh()  # corrupt inputs mark what is built from them the same way
    return sum(flag_propagate(flag_id=pk) for pk in flags.values_list("pk", flat=True))


def taint_refresh_request(*, source_ids: Iterable[int]) -> int:
    """Ask for the taint of every flag of the given sources again (one ``workers.flag_taint``
    message each), for a request that changed what they taint (a run's switch): the request
    reads no pool's documents table. Corruption marks are rows only and are refreshed here.
    Returns the number of flags asked for.

    The flags' rows are written once the caller's transaction commits, each on its own
    (one row, one statement): a switch then never holds its run and mixture while waiting
    for a flag that another switch, or a taint being stored, holds, and the writes hold no
    flag while waiting for another (two transactions each waiting for the other deadlock,
    and Postgres aborts one: a 500)."""
    corruption_refresh()
    ids = sorted(Flag.objects.filter(source_id__in=list(source_ids)).values_list("pk", flat=True))

    def ask() -> None:
        for pk in ids:
            flag_taint_request(flag_id=pk)

    transaction.on_commit(ask)
    return len(ids)


def _flagged_docs_in_tokenized(flag: Flag, ts: TokenizedSource) -> int:
    """How many flagged documents the tokenized source holds."""
    if ts.status != ArtifactStatus.READY:
        return 0
    if flag.target == Flag.Target.SOURCE:
        return max(ts.num_documents, 1)
    ranges = _tokenized_file_ranges(ts)
    if flag.target == Flag.Target.FILE and flag.source_file is not None:
        start, stop = ranges.get(flag.source_file.path, (0, 0))
        return stop - start
    return flag_documents.count_below(flag, ts.num_documents)


def _tokenized_file_ranges(ts: TokenizedSource) -> dict[str, tuple[int, int]]:
    """{relative file path: [first document index, end)} from the tokenized manifest."""
    ranges = (ts.params or {}).get("file_ranges") or {}
    return {path: (int(v[0]), int(v[1])) for path, v in ranges.items()}


def _flagged_docs_in_pool(flag: Flag, pool: Pool, hit_tokenized: dict[int, int]) -> int:
    """How many flagged documents made it into the pool (its filter and train/val split
    decide), from the pool's per-document Parquet listing."""

    if pool.status != ArtifactStatus.READY:
        return 0
    total = 0
    for ts in pool.parents.filter(pk__in=list(hit_tokenized)):
        total += pool_documents.pool_documents_hit(
            pool=pool,
            tokenized=ts,
            doc_ids=pool_documents.flag_document_ids(flag=flag, tokenized=ts),
        )
    return total


def _flagged_docs_in_version(flag: Flag, version: MixtureVersion, hit_pools: dict[int, int]) -> int:
    if version.status not in (ArtifactStatus.READY, ArtifactStatus.BUILDING):
        return 0
    # A pool in two stages holds its documents once.
    return sum(hit_pools.get(p, 0) for p in {c.pool_id for c in version.components.all()})


def flag_reads_compute(*, flag_id: int, batch: int = 50) -> int:
    """For each run ``flag_id`` taints whose read is not stored: where it first reads a
    flagged document (``selectors.flags.flag_read`` without the step), stored on its
    taint, ``batch`` runs at a time with the flag's count of done ones. Idempotent: a
    rerun computes only what is missing. Returns how many it stored."""
    flag = Flag.objects.select_related("source", "source_file").get(pk=flag_id)
    todo = Taint.objects.filter(flag=flag, run__isnull=False, read__isnull=True)
    done = 0
    while True:
        taints = list(todo.select_related("run__mixture_version").order_by("id")[:batch])
        if not taints:
            break
        segments = runs_segments([t.run for t in taints])
        for t in taints:
            row = flag_read(flag=flag, reports=[], segments=segments[t.run_id])
            stored = {k: row[k] for k in ("first_sample", "never", "error") if k in row}
            stored["segments"] = row.get("segments", [])
            Taint.objects.filter(pk=t.pk).update(read=stored)
            done += 1
        Flag.objects.filter(pk=flag.pk).update(
            reads_done=Taint.objects.filter(
                flag=flag, run__isnull=False, read__isnull=False
            ).count()
        )
    return done

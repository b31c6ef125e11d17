"""Flags and what they taint: a flag with every tainted item described, when each run
first read the flagged documents (the step), recent flags and tainted runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from django.db.models import Count, Prefetch, QuerySet, prefetch_related_objects

from shardcore import flagged_reads as core
from shardcore.errors import ShardcoreError
from shardcore.manifest import read_manifest
from webapp.catalog import flag_documents, pool_documents
from webapp.catalog.models import (
    Export,
    Flag,
    MixtureVersion,
    Pool,
    RunSegment,
    Taint,
    TokenizedSource,
    TrainingRun,
)
from webapp.catalog.selectors import facts
from webapp.catalog.selectors.common import get_or_not_found
from webapp.catalog.selectors.runs import step_of_sample_at, steps_of_samples_at
from webapp.paging import page_of


def flag_rows() -> QuerySet[Flag]:
    """Flags newest first with their source and file: the API pages this query."""
    return Flag.objects.select_related("source", "source_file").order_by("-created_at")


def flag_row(*, flag_id: int, only: Sequence[str] = ()) -> Flag:
    """The flag (only its ``only`` fields when given), or NotFound."""
    rows = Flag.objects.only(*only) if only else Flag.objects.all()
    return get_or_not_found(rows, "flag", pk=flag_id)


# What taint_describe reads besides the run and the flag: fetched after the taints, by
# the ids they hold (a query per kind present, none for a kind absent). Joined into the
# taints' query (13 tables), Postgres took 13-40 ms to plan it, for 1 ms of work. The
# ``params`` of pools and versions (their quality reports) are not read.
def _target_prefetches() -> tuple:
    return (
        "tokenized_source__source",
        "tokenized_source__tokenizer",
        Prefetch("pool", queryset=Pool.objects.defer("params")),
        Prefetch(
            "mixture_version",
            queryset=MixtureVersion.objects.select_related("mixture").defer("params"),
        ),
        Prefetch(
            "export",
            queryset=Export.objects.select_related("version__mixture").defer("version__params"),
        ),
    )


def taints_with_targets(taints: list[Taint]) -> list[Taint]:
    """``taints`` (fetched with their run and flag: ``select_related("run", "flag")``) with
    every target ``taint_describe`` reads loaded."""
    prefetch_related_objects(taints, *_target_prefetches())
    return taints


def taint_describe(t: Taint) -> dict:
    """One tainted item: a label, the entity whose page shows it (``kind``, ``id``: a
    materialized copy shows on its version's page, a tokenized source on its source's),
    the flag and how many flagged documents are inside."""
    target = t.target
    if t.run_id:
        label, kind, pk = f"run {target.name}", "run", t.run_id
    elif t.mixture_version_id:
        label, kind, pk = f"mixture {target}", "mixture_version", t.mixture_version_id
    elif t.pool_id:
        label, kind, pk = f"pool {target.name}", "pool", t.pool_id
    elif t.export_id:
        label = f"materialized copy of {target.version}"
        kind, pk = "mixture_version", target.version_id
    else:
        label = f"tokenized {target.source.name} ({target.tokenizer.spec})"
        kind, pk = "source", target.source_id
    return {
        "label": label,
        "kind": kind,
        "id": pk,
        "flag": t.flag.reason,
        "flag_id": t.flag_id,
        "documents": t.documents,
        "created_at": t.created_at,
    }


def flag_detail(*, flag_id: int, reads: bool = True, page=1, documents_after=None) -> dict:
    """A flag and one page of what it taints (in the order the taint was recorded; each
    item once): ``taints`` (each described; for a run, when it first read the flagged
    documents, ``read`` and its one-line ``first_read``, from the stored first flagged
    sample and the run's two progress reports around it), ``page``, ``has_next``,
    ``has_prev``, the page's tainted rows by kind (``tokenized``, ``pools``, ``versions``,
    ``runs``), ``counts`` of each kind (and ``copies``) and the flagged ``documents`` in
    the source, kept on the flag's row, ``reads`` ({done, total}) while the first reads
    are being computed, ``taint`` (``facts.flag_taint_read``: ``computing`` or
    ``error`` until the task stored what the flag taints), and ``document_ids``: a page of
    the document indices it names after ``documents_after`` (``flag_documents.PAGE``, from
    the runs holding them), with ``documents_next`` (the ``documents_after`` of the next
    page, None at the end). Three queries per page of runs
    (the flag, the page with its runs, the steps of its runs; one more per other kind of
    target on the page), whatever the size of the catalog or the number of tainted runs."""
    flag = get_or_not_found(
        Flag.objects.select_related("source", "source_file"), "flag", pk=flag_id
    )
    # The (flag, id) index serves the page; a taint is unique per (flag, target).
    paged_taints = page_of(flag.taints.select_related("run").order_by("id"), page)
    taints = paged_taints["rows"]
    for t in taints:
        t.flag = flag
    taints_with_targets(taints)
    runs = [t.run for t in taints if t.run_id]
    # The steps of the page's runs' first flagged samples: one query for the page.
    steps = steps_of_samples_at(
        [
            (t.run, int(t.read["first_sample"]))
            for t in taints
            if reads and t.run_id and t.read and t.read.get("first_sample") is not None
        ]
    )
    described = []
    for t in taints:
        d = taint_describe(t)
        if t.run_id and reads:
            d["read"] = taint_read_row(t, flag=flag, step=steps.get(t.run_id))
            d["first_read"] = flag_read_text(d["read"])
        described.append(d)
    counts = {
        k: int((flag.counts or {}).get(k, 0))
        for k in ("tokenized", "pools", "versions", "runs", "copies")
    }
    return {
        "flag": flag,
        "taints": described,
        "page": paged_taints["page"],
        "has_next": paged_taints["has_next"],
        "has_prev": paged_taints["has_prev"],
        "tokenized": [t.tokenized_source for t in taints if t.tokenized_source_id],
        "pools": [t.pool for t in taints if t.pool_id],
        "versions": [t.mixture_version for t in taints if t.mixture_version_id],
        "runs": runs,
        "counts": counts,
        "documents": int((flag.counts or {}).get("documents", 0)),
        "reads": {"done": flag.reads_done, "total": flag.reads_total},
        "taint": facts.flag_taint_read(flag),
        **_documents_page(flag, documents_after),
    }


def _documents_page(flag: Flag, after) -> dict:
    try:
        after = min(max(-1, int(after)), 2**62) if after not in (None, "") else -1
    except (TypeError, ValueError):
        after = -1
    got = flag_documents_page(flag=flag, after=after)
    return {
        "document_ids": got["document_ids"],
        "documents_after": after,
        "documents_next": got["next_after"],
    }


def flag_documents_page(*, flag: Flag, after: int = -1, limit: int = flag_documents.PAGE) -> dict:
    """Up to ``limit`` (at most ``flag_documents.PAGE_MAX``) of the document indices the
    flag names greater than ``after``, ascending: ``num_documents``, ``document_ids`` and
    ``next_after`` (the ``after`` of the next page; None at the end). Reads the runs
    holding them, never the flag's whole list."""
    limit = max(1, min(int(limit), flag_documents.PAGE_MAX))
    ids = flag_documents.page(flag, after=int(after), limit=limit + 1) if flag.num_documents else []
    more = len(ids) > limit
    ids = ids[:limit]
    return {
        "num_documents": flag.num_documents,
        "document_ids": ids,
        "next_after": ids[-1] if more else None,
    }


def flag_recent(*, limit: int = 20) -> list[Flag]:
    """The newest flags with how many items each taints (``num_taints``): one query."""
    return list(
        Flag.objects.select_related("source", "source_file")
        .annotate(num_taints=Count("taints"))
        .order_by("-created_at")[:limit]
    )


def tainted_runs() -> QuerySet[TrainingRun]:
    """Runs that read flagged data (the audit page's headline list)."""
    return (
        TrainingRun.objects.filter(taints__isnull=False)
        .select_related("mixture_version__mixture")
        .annotate(num_flags=Count("taints__flag", distinct=True))
        .order_by("-created_at")
    )


# --- per-step lineage -------------------------------------------------------------------

# (flag, mixture version) -> per pool index of the version's manifest, which records hold
# a flagged document; the first flagged sample; flagged samples in a prefix. The rows are
# immutable once written, so the answers never change.
_FLAGGED_RECORDS: dict[tuple[int, int], dict] = {}
_FIRST_FLAGGED: dict[tuple[int, int], int | None] = {}
_FLAGGED_COUNTS: dict[tuple[int, int, int | None], int] = {}


def _flagged_records(*, flag: Flag, version: MixtureVersion) -> dict:
    """The flag's documents -> their rows in each pool of the version
    (the documents table) -> per pool, the records holding them (segment arrays)."""
    key = (flag.pk, version.pk)
    if key in _FLAGGED_RECORDS:
        return _FLAGGED_RECORDS[key]
    manifest = read_manifest(version.path)
    index = {p.get("fingerprint"): i for i, p in enumerate(manifest["pools"])}
    pools = Pool.objects.filter(components__version=version).distinct()
    records = {}
    for pool in pools.prefetch_related(
        Prefetch("parents", queryset=TokenizedSource.objects.filter(source_id=flag.source_id))
    ):
        if pool.fingerprint not in index:
            continue
        rows = [
            pool_documents.pool_document_rows(
                pool=pool,
                tokenized=ts,
                doc_ids=pool_documents.flag_document_ids(flag=flag, tokenized=ts),
            )
            for ts in pool.parents.all()
        ]
        if rows:
            records[index[pool.fingerprint]] = core.flagged_records(
                manifest["pools"][index[pool.fingerprint]]["path"], np.concatenate(rows)
            )
    _FLAGGED_RECORDS[key] = records
    return records


def flag_first_sample(*, flag: Flag, version: MixtureVersion) -> int | None:
    """The first training sample of ``version`` whose record holds a document ``flag``
    names: the flag's documents -> their rows in each pool of the version
    (the documents table) -> the records holding them (segment arrays) -> the first
    sample of the schedule reading one (``shardcore.flagged_reads``)."""
    key = (flag.pk, version.pk)
    if key not in _FIRST_FLAGGED:
        records = _flagged_records(flag=flag, version=version)
        _FIRST_FLAGGED[key] = core.first_sample(version.path, records)
    return _FIRST_FLAGGED[key]


def segment_flagged(*, flag: Flag, segment: RunSegment) -> dict:
    """What one segment of a run holds of ``flag``'s documents: the version's samples the
    run reads there ([0, its length); an open segment reads to the version's end), how
    many of them read a flagged record, and the first, in the run's sample numbering
    (None: none)."""
    version = segment.mixture_version
    stop = None if segment.end_sample is None else segment.end_sample - segment.first_sample
    first = flag_first_sample(flag=flag, version=version)
    if first is None or (stop is not None and first >= stop):
        return {"version": version.pk, "flagged_samples": 0, "first_sample": None}
    key = (flag.pk, version.pk, stop)
    if key not in _FLAGGED_COUNTS:
        _FLAGGED_COUNTS[key] = core.flagged_samples(
            version.path, _flagged_records(flag=flag, version=version), stop=stop
        )[0]
    return {
        "version": version.pk,
        "flagged_samples": _FLAGGED_COUNTS[key],
        "first_sample": segment.first_sample + first,
    }


def flag_read(
    *,
    flag: Flag,
    version: MixtureVersion | None = None,
    reports: list[tuple[int, int]],
    segments: list[RunSegment] | None = None,
) -> dict:
    """When a run of ``version`` (or of ``segments``, the versions a run switched between)
    with progress ``reports`` ((step, consumed samples)) first read a document ``flag``
    names: ``{flag, first_sample, read, step, exact, after_step, by_step, segments}``;
    ``read: False`` with the run's current ``consumed_samples`` and ``step``; ``never:
    True`` when no sample the run reads holds one; ``error`` when a version has no
    readable schedule. ``segments`` says per segment how many of the samples it reads are
    flagged and the first (run numbering). Assumes the trainer reads in Shardyard's order."""
    if segments is None:
        segments = [RunSegment(mixture_version=version, index=0, first_sample=0, first_step=1)]
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


def flag_read_text(row: dict) -> str:
    """One line answering "when did the run first read the flagged documents"."""
    first = row["first_sample"]
    if row.get("computing"):
        c = row["computing"]
        return (
            f"being computed: the first flagged sample of {c['done']:,} of {c['total']:,} "
            "tainted runs is stored so far"
        )
    if row.get("error"):
        return f"unknown: {row['error']}"
    if row.get("never"):
        return "never: no sample of this mixture reads a flagged document"
    if not row["read"]:
        return (
            f"not yet: the first flagged sample is {first}; at its current position the run "
            f"has consumed {row['consumed_samples']} samples (step {row['step']})"
        )
    if row["exact"]:
        return f"first read at step {row['step']} (sample {first})"
    return f"first read after step {row['after_step']}, by step {row['by_step']} (sample {first})"


def run_flag_reads(*, run: TrainingRun, flag_ids: list[int] | None = None) -> list[dict]:
    """When ``run`` first read the documents of each flag tainting it (or of those of
    ``flag_ids``), from the first flagged samples stored on its taints
    (``taint_read_row``), each with its one-line ``text``."""
    taints = Taint.objects.filter(run=run).select_related("flag", "flag__source_file", "run")
    if flag_ids is not None:
        taints = taints.filter(flag_id__in=flag_ids)
    rows = [taint_read_row(t, flag=t.flag) for t in taints.order_by("flag_id")]
    return [{**r, "text": flag_read_text(r)} for r in rows]


def taint_read_row(t: Taint, *, flag: Flag, step: dict | None = None) -> dict:
    """A run's taint as a ``flag_read`` row: the first flagged sample stored on it
    (``Taint.read``, computed by ``services.flags.flag_reads_compute``) and the step that read it,
    from the run's progress reports around it (``runs.step_of_sample_at``: two indexed
    reads). ``computing`` (with the flag's ``done`` and ``total``) while not stored."""
    row: dict[str, Any] = {"flag": flag, "first_sample": None, "read": False, "never": False}
    stored = t.read
    if stored is None:
        return {**row, "computing": {"done": flag.reads_done, "total": flag.reads_total}}
    row.update({k: stored[k] for k in ("first_sample", "never", "error") if k in stored})
    row["segments"] = stored.get("segments", [])
    if row.get("error") or row.get("never") or row["first_sample"] is None:
        return row
    return {**row, **(step or step_of_sample_at(t.run, int(row["first_sample"])))}

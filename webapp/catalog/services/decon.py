"""Writes of the contamination audit: flag the documents of a decon annotation that
overlap a benchmark (or one item), so that the flag machinery computes which pools,
mixture versions and runs hold them and each run's first step reading one; and record a
run's evaluation results per benchmark."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from shardcore.decon.spec import NAME
from webapp.catalog.errors import CatalogError, RunPermissionError
from webapp.catalog.models import Annotation, ArtifactStatus, Flag, RunEvaluation, TrainingRun
from webapp.catalog.services.annotations import annotation_flag_where
from webapp.roles import may_write_run


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def decon_filter(*, benchmark: str, item: str = "") -> str:
    """The filter over a decon annotation's columns naming the documents that overlap
    ``benchmark`` (or its ``item``)."""
    if item:
        return f"list_contains(decon.item_ids, {_quoted(f'{benchmark}:{item}')})"
    return f"list_contains(decon.benchmarks, {_quoted(benchmark)})"


def decon_flag(
    *, annotation_id: int, benchmark: str, item: str = "", reason: str = "", created_by=None
) -> tuple[Flag, bool]:
    """Flag the documents of decon annotation ``annotation_id`` that overlap ``benchmark``
    (or only its ``item``): a flag on those documents of its source, whose taint (pools,
    versions, runs and the step each run first read one) the flag's tasks compute. The
    same benchmark (and item) flagged again on the same annotation answers that flag.
    Returns the flag and whether it is new."""
    ann = Annotation.objects.filter(pk=annotation_id).first()
    if ann is None:
        raise CatalogError(f"annotation: no annotation {annotation_id}")
    if ann.annotator != "decon":
        raise CatalogError(f"annotation {ann.pk} is a {ann.annotator} annotation, not decon")
    if ann.status != ArtifactStatus.READY:
        raise CatalogError(f"annotation {ann.pk} is not built ({ann.status})")
    if not NAME.match(benchmark or ""):
        raise CatalogError(f"benchmark: {benchmark!r} is not a benchmark name")
    known = [b["name"] for b in ((ann.summary or {}).get("decon") or {}).get("benchmarks") or []]
    if benchmark not in known:
        raise CatalogError(
            f"benchmark: annotation {ann.pk} checked {', '.join(known) or 'no benchmark'}, "
            f"not {benchmark!r}"
        )
    with transaction.atomic():
        same = (
            Flag.objects.select_for_update()
            .filter(annotation=ann, benchmark=benchmark, benchmark_item=item)
            .order_by("pk")
            .first()
        )
        if same is not None:
            return same, False
        what = f"item {item} of benchmark {benchmark}" if item else f"benchmark {benchmark}"
        flag = annotation_flag_where(
            annotation_id=ann.pk,
            filter=decon_filter(benchmark=benchmark, item=item),
            reason=reason.strip()
            or f"contamination: documents overlapping {what} (annotation {ann.pk})",
            created_by=created_by,
        )
        Flag.objects.filter(pk=flag.pk).update(benchmark=benchmark, benchmark_item=item)
        flag.refresh_from_db()
    return flag, True


def run_evaluations_report(
    *, run_id: int, results: Iterable[dict], actor=None
) -> list[RunEvaluation]:
    """Record evaluation results of a run: each ``{"benchmark", "value", "metric"
    (default "score"), "step" (default the run's last step)}``; a result reported again
    (same benchmark, metric and step) keeps its first value. Only whoever may write the
    run reports them (RunPermissionError)."""
    run = TrainingRun.objects.get(pk=run_id)
    if actor is not None and not may_write_run(actor, run):
        raise RunPermissionError(
            f"run {run.name} belongs to another user: only its owner, its team or an admin "
            "may report its evaluations"
        )
    rows = []
    for i, r in enumerate(results):
        name = str(r.get("benchmark", ""))
        if not NAME.match(name):
            raise CatalogError(f"results[{i}].benchmark: {name!r} is not a benchmark name")
        rows.append(
            RunEvaluation(
                run=run,
                benchmark=name,
                metric=str(r.get("metric") or "score")[:100],
                step=int(r["step"]) if r.get("step") is not None else run.last_step,
                value=float(r["value"]),
            )
        )
    if not rows:
        raise CatalogError("results: give at least one result")
    RunEvaluation.objects.bulk_create(rows, ignore_conflicts=True)
    return rows

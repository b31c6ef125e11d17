"""Writes for annotations: the annotation job (one unit per tokenized shard, manifest last)
and its recorder, the annotations a pool joins, and "flag the documents where <filter>"
over an annotation's columns."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from shardcore import annotate, props, storage
from shardcore.annotate.artifact import DOC_ID, annotation_shards
from shardcore.annotate.stage import plan_annotation, summarize
from shardcore.decon import index as decon_index
from shardcore.decon import spec as decon_spec
from shardcore.errors import InputError
from shardcore.filters import filter_parse, filter_rows
from shardcore.manifest import MANIFEST_NAME
from shardcore.mixture.reader import sorted_distinct
from shardcore.units import Plan
from webapp.catalog import flag_documents
from webapp.catalog.errors import CatalogError, boundary
from webapp.catalog.models import Annotation, ArtifactStatus, Flag, TokenizedSource
from webapp.catalog.services.common import (
    artifact_dir,
    artifact_unbuilt,
    limited,
    refuse_corrupt,
)
from webapp.catalog.services.flags import flag_create
from webapp.catalog.services.launch import launch
from webapp.catalog.services.sources import source_location_check
from webapp.jobs import recorders
from webapp.jobs.models import ACTIVE_JOB_STATES, Job

RECORDER = "annotation"


def params_parse(annotator: str, params: dict[str, Any] | str | None) -> dict[str, Any]:
    """An annotator's parameters from a dict (the API) or ``k=v`` lines (the form), each
    converted to its default's type; an unknown annotator or parameter is a CatalogError."""

    try:
        cls = annotate.get(annotator)
    except InputError as exc:
        raise CatalogError(f"annotator: {exc}") from None
    if params is None or params == "":
        return {}
    if isinstance(params, str):
        pairs = [p.strip() for p in params.replace(",", "\n").splitlines() if p.strip()]
    elif isinstance(params, dict):
        pairs = [f"{k}={_text(v)}" for k, v in params.items()]
    else:
        raise CatalogError("params: expected an object of parameter: value")
    for pair in pairs:
        key = pair.partition("=")[0].strip()
        if key not in cls.defaults:
            raise CatalogError(
                f"params: annotator {annotator!r} has no parameter {key!r} "
                f"(parameters: {', '.join(sorted(cls.defaults)) or 'none'})"
            )
    try:
        typed = annotate.parse_params(cls, pairs)
        cls(**typed)  # every parameter within its bound (shardcore.limits), before any plan
    except InputError as exc:
        raise CatalogError(f"params: {str(exc).removeprefix('--param ')}") from None
    return typed


def decon_benchmarks_check(params: dict[str, Any]) -> dict[str, Any]:
    """The decon annotator's parameters with ``benchmarks`` (a spec or a compiled index)
    checked to lie under the source roots, as the spec's benchmark files must: the service
    reads no file an editor could not register as a source."""
    where = str(params.get("benchmarks") or "").strip()
    if not where:
        raise CatalogError("params: benchmarks: name a benchmark spec file or a compiled index")
    try:
        location = source_location_check(uri=where)
    except CatalogError as exc:
        raise CatalogError(f"params: benchmarks: {exc}") from None
    if not decon_index.is_index(location):
        try:
            files = [f for b in decon_spec.load_spec(location) for f in b.files]
        except InputError as exc:
            raise CatalogError(f"params: benchmarks: {exc}") from None
        for f in files:
            try:
                source_location_check(uri=f)
            except CatalogError as exc:
                raise CatalogError(f"params: benchmarks: {location}: {exc}") from None
    return {**params, "benchmarks": location}


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@boundary
def annotation_build(
    *,
    tokenized_id: int,
    annotator: str,
    params: dict[str, Any] | str | None = None,
    text_from: str = "auto",
    created_by=None,
) -> Annotation:
    """Start an annotation job over a ready tokenized source; returns the BUILDING row (its
    ``job`` shows progress). The same (source x annotator x parameters) already built or
    building is answered with that row: an annotation is immutable and named by its
    fingerprint, and building one never touches another."""

    ts = TokenizedSource.objects.select_related("source").get(pk=tokenized_id)
    if ts.status != ArtifactStatus.READY:
        raise CatalogError(f"tokenized source {ts.pk} is not built ({ts.status})")
    refuse_corrupt([ts])
    typed = params_parse(annotator, params)
    if annotator == "decon":
        typed = decon_benchmarks_check(typed)
    out = artifact_dir("annotations", f"{ts.source.name}-{annotator}")
    made: list[Plan] = []

    def plan() -> Plan:
        try:
            made.append(
                limited(
                    plan_annotation,
                    ts.path,
                    out,
                    annotator=annotator,
                    params=typed,
                    text_from=text_from,
                    what=f"planning annotation {annotator!r} of {ts}",
                )
            )
        except (InputError, ValueError) as exc:
            raise CatalogError(f"cannot annotate {ts}: {exc}") from exc
        return made[-1]

    def create(job: Job, plan: Plan) -> Annotation:
        return Annotation.objects.create(
            tokenized_source=ts,
            annotator=plan.params["annotator"],
            annotator_version=plan.meta["annotator"]["version"],
            columns=plan.meta["annotator"]["fields"],
            params=plan.params["params"],
            fingerprint=plan.meta["fingerprint"],
            num_documents=plan.meta["documents"],
            path=out,
            job=job,
            created_by=created_by,
        )

    # The same annotation is known by its fingerprint, which the plan computes.
    return launch(
        lock=lambda: TokenizedSource.objects.select_for_update().get(pk=ts.pk),
        running=lambda: _same(ts, made[-1].meta["fingerprint"]) if made else None,
        plan=plan,
        create=create,
        title=f"annotate {ts.source.name} (#{ts.pk}) with {annotator}",
        recorder=RECORDER,
        created_by=created_by,
    )


def _same(ts: TokenizedSource, fingerprint: str) -> Annotation | None:
    """The source's annotation of this fingerprint that is built, or whose job runs."""

    rows = Annotation.objects.filter(tokenized_source=ts, fingerprint=fingerprint)
    ready = rows.filter(status=ArtifactStatus.READY).order_by("-pk").first()
    if ready is not None:
        return ready
    return (
        rows.filter(status=ArtifactStatus.BUILDING, job__state__in=ACTIVE_JOB_STATES)
        .order_by("-pk")
        .first()
    )


@recorders.register(RECORDER)
def annotation_record(*, job, manifest: dict | None) -> None:
    """Recorder of annotation jobs: the manifest's counts and the chart summary (computed
    here, once, so that pages never read the Parquet files)."""

    ann = Annotation.objects.select_for_update().get(job=job)
    if manifest is None:
        artifact_unbuilt(ann, job=job)
        return
    ann.fingerprint = manifest["fingerprint"]
    ann.num_documents = manifest["totals"]["documents"]
    ann.num_bytes = manifest["totals"]["bytes"]
    ann.manifest_path = storage.join(ann.path, MANIFEST_NAME)
    ann.summary = summarize(ann.path)
    ann.status = ArtifactStatus.READY
    ann.finished_at = timezone.now()
    ann.save()


def pool_annotations(
    *, annotation_ids: Iterable[int], parents: list[TokenizedSource]
) -> list[Annotation]:
    """The ready annotations a pool over ``parents`` joins (each of one of them)."""
    ids = sorted({int(getattr(i, "pk", i)) for i in annotation_ids or []})
    if not ids:
        return []
    rows = list(Annotation.objects.filter(pk__in=ids).order_by("pk"))
    missing = sorted(set(ids) - {a.pk for a in rows})
    if missing:
        raise CatalogError(f"annotations: no annotation {missing[0]}")
    inputs = {t.pk for t in parents}
    for a in rows:
        if a.status != ArtifactStatus.READY:
            raise CatalogError(f"annotations: annotation {a.pk} is not built ({a.status})")
        if a.tokenized_source_id not in inputs:
            raise CatalogError(
                f"annotations: annotation {a.pk} ({a.annotator}) annotates tokenized source "
                f"{a.tokenized_source_id}, which is not an input of the pool"
            )
    return rows


# --- flag the documents where ... --------------------------------------------------------


def _matching(path: str, annotator: str, expression: str) -> np.ndarray:
    """The doc_ids (ascending, distinct) of annotation ``path`` where ``expression`` holds (its
    columns read as ``<annotator>.<column>``, exactly as a pool that joins it reads them),
    evaluated one shard at a time: one shard's columns in memory, and the matching ids."""
    import pyarrow as pa

    found: list[np.ndarray] = []
    for table in annotation_shards(path):
        cols = [c for c in table.column_names if c != DOC_ID]
        inner = pa.StructArray.from_arrays([table.column(c).combine_chunks() for c in cols], cols)
        view = pa.table(
            {
                DOC_ID: table.column(DOC_ID),
                props.PROPS: pa.StructArray.from_arrays([inner], [annotator]),
            }
        )
        rows = filter_rows(view, expression, where=f"annotation {path}")
        found.append(table.column(DOC_ID).take(pa.array(rows)).to_numpy())
    if not found:
        return np.zeros(0, dtype=np.int64)
    return sorted_distinct(np.concatenate(found))


def annotation_flag_where(
    *, annotation_id: int, filter: str, reason: str = "", created_by=None
) -> Flag:
    """Flag the documents of the annotation's source where ``filter`` holds over its
    columns (``pii.emails > 0``), tainting everything downstream, runs included. Over at
    most ``settings.PLAN_INLINE_DOCUMENTS`` documents the filter is evaluated here (a
    filter that holds for none is refused); over a larger annotation the flag is recorded
    with its filter and no documents yet, and its taint task evaluates it
    (``flags.flag_taint_compute``). Either way a filter that does not parse, or names a
    column the annotation does not have, is refused here."""

    ann = Annotation.objects.select_related("tokenized_source__source").get(pk=annotation_id)
    if ann.status != ArtifactStatus.READY:
        raise CatalogError(f"annotation {ann.pk} is not built ({ann.status})")
    filter = (filter or "").strip()
    if not filter:
        raise CatalogError("filter: say which documents, e.g. pii.emails > 0")
    deferred = ann.num_documents > settings.PLAN_INLINE_DOCUMENTS
    ids = np.zeros(0, dtype=np.int64)
    try:
        filter_parse(filter)
        if not deferred:
            ids = limited(
                _matching,
                ann.path,
                ann.annotator,
                filter,
                what=f"evaluating {filter!r} over annotation {ann.pk}",
            )
        elif _columns_type(ann.columns) is not None:
            limited(
                _columns_check,
                ann.path,
                ann.annotator,
                ann.columns,
                filter,
                what=f"checking {filter!r} against the columns of annotation {ann.pk}",
            )
    except InputError as exc:
        raise CatalogError(f"filter: {exc}") from None
    if not deferred and not ids.size:
        raise CatalogError(_none_match(filter, ann))
    reason = reason.strip() or f"{filter} (annotation {ann.pk}, {ann.annotator})"
    # The annotation's doc_ids are the tokenized source's document indices, which are the
    # source's (its documents in the order they were tokenized): what a flag names.
    return flag_create(
        reason=reason,
        source_id=ann.tokenized_source.source_id,
        document_ids=None if deferred else ids,
        where=filter,
        annotation_id=ann.pk,
        created_by=created_by,
    )


def _columns_type(columns: list[dict] | None):
    """The Arrow struct of an annotation's recorded columns (None: a type not spelled as
    one Arrow alias, or none recorded)."""
    import pyarrow as pa

    try:
        fields = [pa.field(c["name"], pa.type_for_alias(c["type"])) for c in columns or []]
    except (KeyError, TypeError, ValueError):
        return None
    return pa.struct(fields) if fields else None


def _columns_check(path: str, annotator: str, columns: list[dict], expression: str) -> None:
    """``expression`` evaluated over no rows of the annotation's columns (as ``_matching``
    reads them): an unknown column or a type mismatch is an InputError at once, without
    reading the annotation."""
    import pyarrow as pa

    inner = _columns_type(columns)
    view = pa.table(
        {
            DOC_ID: pa.array([], pa.int64()),
            props.PROPS: pa.array([], pa.struct([pa.field(annotator, inner)])),
        }
    )
    filter_rows(view, expression, where=f"annotation {path}")


def _none_match(filter: str, ann: Annotation) -> str:
    return (
        f"filter: {filter!r} holds for none of the {ann.num_documents:,} documents of "
        f"annotation {ann.pk}; nothing to flag"
    )


def flag_where_evaluate(flag: Flag) -> np.ndarray:
    """What the taint task of a flag recorded over a large annotation runs first: the
    documents where its filter holds (the same evaluation as in a request, in the worker,
    a shard at a time), stored on the flag; a redelivered task computes the same ids. A
    CatalogError when the filter holds for none, or cannot be evaluated."""
    ann = flag.annotation
    if ann is None:
        raise CatalogError(
            f"filter: {flag.where!r}: the annotation it was to be evaluated over is "
            "deleted; nothing to flag"
        )
    if ann.status != ArtifactStatus.READY:
        raise CatalogError(f"annotation {ann.pk} is not built ({ann.status})")
    try:
        ids = _matching(ann.path, ann.annotator, flag.where)
    except InputError as exc:
        raise CatalogError(f"filter: {exc}") from None
    if not ids.size:
        raise CatalogError(_none_match(flag.where, ann))
    with transaction.atomic():
        flag_documents.store(flag, ids)
    return ids

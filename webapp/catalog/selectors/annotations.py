"""Annotations: the annotators on offer, a source page's annotations and the tokenized
sources a near-duplicate group may join, an annotation with the others of its source and
of its group, the annotations a job builds, the API's list, and the
``<annotator>.<column>`` names a filter can use. Writes: ``webapp.catalog.services``
(``annotations``, ``annotation_groups``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import QuerySet

from shardcore import annotate
from shardcore.annotate.neardup import STAGE as GROUP_STAGE
from webapp.catalog.models import Annotation, ArtifactStatus, TokenizedSource
from webapp.catalog.selectors.common import get_or_not_found

SOURCE_ANNOTATIONS = 100
GROUP_CANDIDATES = 200
OTHERS_SHOWN = 50


def annotator_choices() -> list[dict[str, Any]]:
    """Every registered annotator with its version, parameters (defaults) and columns: what
    the Annotate form and the API offer. No query: the registry of ``shardcore.annotate``."""

    out: list[dict[str, Any]] = []
    for name in annotate.names():
        try:
            cls = annotate.get(name)
            columns = [
                {"name": f.name, "type": str(f.type)} for f in cls(**{}).fields()
            ]  # the schema of a default instance
        except Exception as exc:  # a broken plugin is listed with its error, not hidden
            out.append({"name": name, "error": str(exc)})
            continue
        out.append(
            {
                "name": name,
                "version": str(cls.version),
                "params": dict(cls.defaults),
                "columns": columns,
                "corpus_level": bool(cls.corpus_level),
            }
        )
    return out


def source_annotations(*, tokenized: list[TokenizedSource]) -> dict:
    """For a source page, given its tokenized versions (read by ``source_detail``): their
    newest annotations (``SOURCE_ANNOTATIONS``, with their jobs), and the ready tokenized
    sources a near-duplicate group from there may join: the source's own first, then the
    others by source name (the newest ``GROUP_CANDIDATES``). Two queries at most."""
    own = [t for t in tokenized if t.is_ready]
    others = (
        TokenizedSource.objects.filter(status=ArtifactStatus.READY)
        .exclude(pk__in=[t.pk for t in tokenized])
        .select_related("source")
        .order_by("-created_at")[:GROUP_CANDIDATES]
    )
    return {
        "annotations": list(
            Annotation.objects.filter(tokenized_source__in=tokenized)
            .select_related("job")
            .order_by("-created_at")[:SOURCE_ANNOTATIONS]
        ),
        "group_candidates": own + sorted(others, key=lambda t: (t.source.name, t.pk))
        if own
        else [],
    }


def annotation_detail(*, annotation_id: int) -> dict:
    """An annotation with its tokenized source (its source and tokenizer) and job, the
    other annotations its group job built (``annotation_group``), and the newest other
    annotations of its tokenized source (``OTHERS_SHOWN``). Three queries."""
    ann = get_or_not_found(
        Annotation.objects.select_related(
            "tokenized_source__source", "tokenized_source__tokenizer", "job"
        ),
        "annotation",
        pk=annotation_id,
    )
    others = (
        Annotation.objects.filter(tokenized_source_id=ann.tokenized_source_id)
        .exclude(pk=ann.pk)
        .order_by("-created_at")[:OTHERS_SHOWN]
    )
    return {"annotation": ann, "group": annotation_group(ann), "others": list(others)}


def annotation_group(ann: Annotation) -> list[Annotation]:
    """The other annotations built by the group job that built ``ann`` (in source order),
    empty for an annotation of one source."""
    if ann.job is None or ann.job.kind != GROUP_STAGE:
        return []
    return list(
        Annotation.objects.filter(job=ann.job)
        .exclude(pk=ann.pk)
        .select_related("tokenized_source__source")
        .order_by("pk")
    )


def annotations_of_job(*, job_id: int) -> list[Annotation]:
    """The annotations a job builds (one, or one per source of a group), in source order."""
    return list(Annotation.objects.filter(job_id=job_id).order_by("pk"))


def annotation_rows(*, tokenized_id: int | None = None) -> QuerySet[Annotation]:
    """Annotations newest first (of one tokenized source): the API pages this query."""
    rows = Annotation.objects.order_by("-created_at")
    if tokenized_id is not None:
        rows = rows.filter(tokenized_source_id=tokenized_id)
    return rows


def annotation_known(*, annotation_id: int) -> int:
    """``annotation_id`` when that annotation exists (NotFound otherwise): asked before a
    write on it, so that a missing one is a 404 rather than the service's refusal."""
    return get_or_not_found(Annotation.objects.only("id"), "annotation", pk=annotation_id).pk


def annotation_target(*, tokenized_id: int) -> TokenizedSource:
    """The tokenized source one asks to annotate, with its source (NotFound when none)."""
    return get_or_not_found(
        TokenizedSource.objects.select_related("source"), "tokenized source", pk=tokenized_id
    )


def annotation_columns(*, tokenized_ids: Iterable[int] | None = None) -> list[str]:
    """``<annotator>.<column>`` of every ready annotation (of the given tokenized sources):
    the names offered wherever a property is offered."""
    rows = Annotation.objects.filter(status=ArtifactStatus.READY)
    if tokenized_ids is not None:
        rows = rows.filter(tokenized_source__in=list(tokenized_ids))
    names: list[str] = []
    for annotator, columns in rows.values_list("annotator", "columns").order_by("annotator"):
        for c in columns or []:
            name = f"{annotator}.{c['name']}"
            if name not in names:
                names.append(name)
    return names

"""Annotations: "Annotate" on a tokenized source (annotator and parameters), near-duplicates
across several tokenized sources, the annotation page with a chart of each column, and
"flag the documents where <filter>"."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from webapp.catalog.errors import CatalogError
from webapp.catalog.models import Annotation, ArtifactStatus, TokenizedSource
from webapp.catalog.services import annotation_groups, annotations
from webapp.catalog.services.flags import flag_awaiting_documents
from webapp.dashboard import annotation_charts as charts
from webapp.roles import require_role


def source_annotations(tokenized: list[TokenizedSource]) -> dict:
    """For the source page: the annotations of its tokenized versions listed there, the
    ready versions one can annotate, and the annotators on offer."""
    return {
        "annotations": list(
            Annotation.objects.filter(tokenized_source__in=tokenized)
            .select_related("job")
            .order_by("-created_at")[:100]
        ),
        "annotatable": [t for t in tokenized if t.is_ready],
        "annotators": annotations.annotator_choices(),
        "group_candidates": _group_candidates(tokenized),
    }


def _group_candidates(tokenized: list[TokenizedSource]) -> list[TokenizedSource]:
    """The ready tokenized sources a near-duplicate group from this source page may
    join: this source's first, then the others by source name (the most recent 200)."""
    own = [t for t in tokenized if t.is_ready]
    if not own:
        return []
    others = (
        TokenizedSource.objects.filter(status=ArtifactStatus.READY)
        .exclude(pk__in=[t.pk for t in tokenized])
        .select_related("source")
        .order_by("-created_at")[:200]
    )
    return own + sorted(others, key=lambda t: (t.source.name, t.pk))


@require_POST
def annotate_group(request):
    """Near-duplicates across the tokenized sources chosen (in the order listed)."""
    require_role(request.user, "editor")
    back = request.POST.get("source_id", "")
    try:
        ids = [int(i) for i in request.POST.getlist("tokenized_ids")]
        rows = annotation_groups.annotation_group_build(
            tokenized_ids=ids, params=request.POST.get("params", ""), created_by=request.user
        )
    except (CatalogError, ValueError) as e:
        messages.error(request, str(e) if isinstance(e, CatalogError) else "not an id")
        if back.isdigit():
            return redirect("dashboard:source", source_id=int(back))
        return redirect("dashboard:sources")
    if all(a.is_ready for a in rows):
        messages.success(
            request, f"Near-duplicates across these sources are built already: annotations "
            f"{', '.join(str(a.pk) for a in rows)}."
        )  # fmt: skip
        return redirect("dashboard:annotation", annotation_id=rows[0].pk)
    messages.success(request, f"Clustering near-duplicates across {len(rows)} tokenized sources.")
    return redirect("dashboard:job", job_id=rows[0].job_id)


@require_POST
def annotate(request, tokenized_id: int):
    require_role(request.user, "editor")
    ts = get_object_or_404(TokenizedSource.objects.select_related("source"), pk=tokenized_id)
    try:
        ann = annotations.annotation_build(
            tokenized_id=ts.pk,
            annotator=request.POST.get("annotator", ""),
            params=request.POST.get("params", ""),
            text_from=request.POST.get("text_from", "auto") or "auto",
            created_by=request.user,
        )
    except CatalogError as e:
        messages.error(request, str(e))
        return redirect("dashboard:source", source_id=ts.source_id)
    if ann.is_ready:
        messages.success(request, f"Annotation {ann.pk} is built already: the same parameters.")
        return redirect("dashboard:annotation", annotation_id=ann.pk)
    messages.success(request, f"Annotating {ts.source.name} (#{ts.pk}) with {ann.annotator}.")
    return redirect("dashboard:job", job_id=ann.job_id)


def annotation_detail(request, annotation_id: int):
    ann = get_object_or_404(
        Annotation.objects.select_related(
            "tokenized_source__source", "tokenized_source__tokenizer"
        ),
        pk=annotation_id,
    )
    summary = ann.summary or {}
    columns = summary.get("columns", {})
    figures = [
        (name, charts.column_figure(ann.annotator, name, columns[name]), columns[name])
        for name in [c["name"] for c in ann.columns]
        if name in columns
    ]
    dup = summary.get("duplicates")
    return render(
        request,
        "dashboard/annotations/detail.html",
        {
            "annotation": ann,
            "summary": summary,
            "figures": figures,
            "names": [f"{ann.annotator}.{c['name']}" for c in ann.columns],
            "example": charts.filter_example(ann.annotator, ann.columns, summary),
            "languages_figure": charts.languages_figure(summary["languages"])
            if summary.get("languages")
            else None,
            "duplicates": dup,
            "duplicates_figure": charts.clusters_figure(
                dup["largest"], title="Largest duplicate clusters", x_label="duplicate cluster"
            )
            if dup
            else None,
            "clusters": summary.get("clusters"),
            "clusters_figure": charts.clusters_figure(
                summary["clusters"][:30], title="Cluster sizes"
            )
            if summary.get("clusters")
            else None,
            "group": annotation_groups.group_siblings(ann),
            "others": Annotation.objects.filter(tokenized_source=ann.tokenized_source)
            .exclude(pk=ann.pk)
            .order_by("-created_at")[:50],
        },
    )


@require_POST
def annotation_flag_where(request, annotation_id: int):
    require_role(request.user, "editor")
    ann = get_object_or_404(Annotation.objects.only("id"), pk=annotation_id)
    try:
        flag = annotations.annotation_flag_where(
            annotation_id=ann.pk,
            filter=request.POST.get("filter", ""),
            reason=request.POST.get("reason", ""),
            created_by=request.user,
        )
    except CatalogError as e:
        messages.error(request, str(e))
        return redirect("dashboard:annotation", annotation_id=ann.pk)
    if flag_awaiting_documents(flag):
        messages.success(
            request,
            f"Flag {flag.pk} recorded; the documents where {flag.where} holds (of "
            f"{flag.annotation.num_documents:,}) and what they taint are being found by a "
            "worker.",
        )
        return redirect("dashboard:flag", flag_id=flag.pk)
    messages.success(
        request,
        f"Flag {flag.pk} recorded over {flag.num_documents:,} document(s); what it "
        "taints is being computed by a worker.",
    )
    return redirect("dashboard:flag", flag_id=flag.pk)

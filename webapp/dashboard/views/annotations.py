"""Annotations: "Annotate" on a tokenized source (annotator and parameters), near-duplicates
across several tokenized sources, the annotation page with a chart of each column, and
"flag the documents where <filter>"."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.catalog import selectors as catalog
from webapp.catalog.errors import CatalogError
from webapp.catalog.services import annotation_groups, annotations
from webapp.catalog.services.flags import flag_awaiting_documents
from webapp.dashboard import annotation_contexts as contexts
from webapp.roles import require_role


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
            request,
            f"Near-duplicates across these sources are built already: annotations "
            f"{', '.join(str(a.pk) for a in rows)}.",
        )
        return redirect("dashboard:annotation", annotation_id=rows[0].pk)
    messages.success(request, f"Clustering near-duplicates across {len(rows)} tokenized sources.")
    return redirect("dashboard:job", job_id=rows[0].job_id)


@require_POST
def annotate(request, tokenized_id: int):
    require_role(request.user, "editor")
    ts = catalog.annotation_target(tokenized_id=tokenized_id)  # NotFound: a 404 page
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
    ctx = contexts.annotation_detail(annotation_id=annotation_id)
    return render(request, "dashboard/annotations/detail.html", ctx)


@require_POST
def annotation_flag_where(request, annotation_id: int):
    require_role(request.user, "editor")
    annotation_id = catalog.annotation_known(annotation_id=annotation_id)  # else a 404 page
    try:
        flag = annotations.annotation_flag_where(
            annotation_id=annotation_id,
            filter=request.POST.get("filter", ""),
            reason=request.POST.get("reason", ""),
            created_by=request.user,
        )
    except CatalogError as e:
        messages.error(request, str(e))
        return redirect("dashboard:annotation", annotation_id=annotation_id)
    if flag_awaiting_documents(flag):
        messages.success(
            request,
            f"Flag {flag.pk} recorded; the documents where {flag.where} holds (of "
            f"{flag.annotation.num_documents if flag.annotation else 0:,}) and what they taint "
            "are being found by a worker.",
        )
        return redirect("dashboard:flag", flag_id=flag.pk)
    messages.success(
        request,
        f"Flag {flag.pk} recorded over {flag.num_documents:,} document(s); what it "
        "taints is being computed by a worker.",
    )
    return redirect("dashboard:flag", flag_id=flag.pk)

"""Jobs: the list, the live detail page, its JSON poll, cancel and retry."""

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_POST

from webapp.catalog import selectors as catalog
from webapp.dashboard import contexts
from webapp.jobs import selectors as jobs
from webapp.jobs import services as job_services
from webapp.jobs.services import JobError
from webapp.roles import require_role


def job_list(request):
    ctx = jobs.job_page(state=request.GET.get("state", ""), page=request.GET.get("page", 1))
    return render(request, "dashboard/jobs/list.html", ctx)


def job_detail(request, job_id: int):
    ctx = contexts.job_detail(job_id=job_id, units_from=request.GET.get("units_from", 0))
    if ctx["job"].kind in ("annotation", "annotate.neardup"):  # to follow when done
        ctx["annotations"] = catalog.annotations_of_job(job_id=job_id)
    if ctx["job"].kind == "planning":  # the pool it plans, then builds with a job of its own
        ctx["planned"] = catalog.pool_planned_by(job_id=job_id)
    return render(request, "dashboard/jobs/detail.html", ctx)


def job_progress(request, job_id: int):
    """The job page's poll; once the job has ended, also ``outcome_html``: the page's parts
    that its end changes (failed units, bad input, the unit timeline), rendered as on the
    page, for job.js to swap in."""
    ctx = contexts.job_detail(job_id=job_id, units_from=request.GET.get("units_from", 0))
    data = contexts.job_progress_json(job_id=job_id, detail=ctx)
    if not data["is_active"]:
        data["outcome_html"] = render_to_string(
            "dashboard/jobs/_outcome.html", ctx, request=request
        )
    return JsonResponse(data)


def _act(request, job_id: int, action, done: str):
    require_role(request.user, "editor")
    try:
        action(job_id=job_id)
    except JobError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, done)
    return redirect("dashboard:job", job_id=job_id)


@require_POST
def job_cancel(request, job_id: int):
    return _act(
        request, job_id, job_services.job_cancel, "Cancelled: remaining units will not run."
    )


@require_POST
def job_retry(request, job_id: int):
    return _act(
        request, job_id, job_services.job_retry, "Retrying the failed and unfinished units."
    )

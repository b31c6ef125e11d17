"""The mixture builder: the page, its live prediction (JSON) and saving a version."""

import json

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.catalog.errors import CatalogError
from webapp.catalog.services.mixtures import mixture_version_save
from webapp.dashboard import contexts
from webapp.roles import require_role


def mixture_builder(request):
    """The builder; with ``?run=`` (and ``reference=``) also the run's proposal of next
    weights, which saves as a version continuing the run (the run page's switch)."""
    require_role(request.user, "editor")
    context = contexts.builder_context()
    context.update(
        contexts.builder_proposal(
            run=request.GET.get("run", ""), reference=request.GET.get("reference", "")
        )
    )
    return render(request, "dashboard/mixtures/builder.html", context)


def _payload(request) -> dict:
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):  # RecursionError: a body nested thousands deep
        return {}
    return data if isinstance(data, dict) else {}


@require_POST
def mixture_predict(request):
    require_role(request.user, "editor")
    return JsonResponse(contexts.mixture_predict(payload=_payload(request)))


@require_POST
def mixture_save(request):
    """Save the draft: its version is built by a job, whose progress the version page
    shows until the schedule is recorded."""
    require_role(request.user, "editor")
    payload = _payload(request)
    name = str(payload.get("name") or "").strip()
    if not name:
        return JsonResponse({"error": "give the mixture a name"}, status=400)
    try:
        version = mixture_version_save(
            name=name,
            draft=payload,
            description=str(payload.get("description") or ""),
            created_by=request.user,
        )
    except CatalogError as e:
        return JsonResponse({"error": str(e)}, status=400)
    if getattr(version, "existed", False):
        messages.info(request, f"Nothing changed: {version} holds this draft already.")
    else:
        messages.success(request, f"Saved {version}: its schedule is being built.")
    return JsonResponse(
        {"url": reverse("dashboard:mixture_version", args=[version.pk]), "job": version.job_id}
    )

"""Audit: which mixture versions and runs contain a source, file or document; flags."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.catalog import selectors as catalog
from webapp.catalog.errors import CatalogError
from webapp.catalog.services import flags
from webapp.dashboard import contexts
from webapp.dashboard.forms import AuditForm, FlagForm
from webapp.roles import require_role


def audit(request):
    form = AuditForm(request.GET or None)
    result = None
    if form.is_valid():
        result = contexts.audit_search(**form.cleaned_data)
    return render(
        request,
        "dashboard/audit/search.html",
        {"form": form, "result": result, "flags": catalog.flag_recent()},
    )


@require_POST
def flag_create(request):
    require_role(request.user, "editor")
    form = FlagForm(request.POST)
    if not form.is_valid():
        messages.error(request, form.errors.as_text())
        return redirect("dashboard:audit")
    try:
        flag = flags.flag_create(**form.cleaned_data, created_by=request.user)
    except CatalogError as e:
        messages.error(request, str(e))
        return redirect("dashboard:audit")
    messages.success(
        request, f"Flag {flag.pk} recorded; what it taints is being computed by a worker."
    )
    return redirect("dashboard:flag", flag_id=flag.pk)


def flag_detail(request, flag_id: int):
    return render(
        request,
        "dashboard/audit/flag.html",
        contexts.flag_detail(
            flag_id=flag_id,
            page=request.GET.get("page", 1),
            documents_after=request.GET.get("documents_after"),
        ),
    )

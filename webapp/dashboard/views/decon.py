"""The contamination audit's pages: the benchmarks decon annotations checked documents
against; one benchmark (or item) with its overlapping documents and, once flagged, the
pools, versions and runs holding them with each run's first step reading one."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.catalog.errors import CatalogError
from webapp.catalog.selectors import decon as sel
from webapp.catalog.services import decon as svc
from webapp.roles import require_role


def decon_list(request):
    return render(request, "dashboard/decon/list.html", {"benchmarks": sel.decon_benchmarks()})


def decon_benchmark(request, name: str):
    item = request.GET.get("item", "")[:200]
    audit = sel.decon_benchmark(benchmark=name, item=item)  # NotFound: a 404 page
    return render(request, "dashboard/decon/benchmark.html", {"audit": audit})


@require_POST
def decon_flag(request, name: str):
    require_role(request.user, "editor")
    item = request.POST.get("item", "")[:200]
    back = reverse("dashboard:decon_benchmark", args=[name]) + (f"?item={item}" if item else "")
    annotation = request.POST.get("annotation", "")
    if not annotation.isdigit():
        messages.error(request, "annotation: give an annotation id")
        return redirect(back)
    try:
        flag, created = svc.decon_flag(
            annotation_id=int(annotation), benchmark=name, item=item, created_by=request.user
        )
    except CatalogError as e:
        messages.error(request, str(e))
        return redirect(back)
    if created:
        messages.success(
            request,
            f"Flag {flag.pk} recorded; the pools, versions and runs holding these documents "
            "are being found by a worker.",
        )
    return redirect(back)

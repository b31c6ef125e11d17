"""Sources, pools, mixtures and runs: lists and detail pages, source registration."""

from pathlib import Path

from django.contrib import messages
from django.http import FileResponse, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_http_methods, require_POST

from shardcore import storage
from webapp.catalog import selectors as catalog
from webapp.catalog.errors import CatalogError
from webapp.catalog.selectors import decon as decon_selectors
from webapp.catalog.services import exports, pools, runs, sources, tokenized
from webapp.dashboard import annotation_contexts, contexts
from webapp.dashboard.forms import PoolBuildForm, SourceRegisterForm, TokenizeForm
from webapp.roles import require_role


def _create(request, form, service, template: str, listed):
    """``service`` called with a valid ``form``'s fields and the user: ``(row, None)``; on
    bad input or a refusal, ``(None, the list page again)`` with the user's input and the
    error beside the form (400), instead of a redirect that would lose what they typed."""
    require_role(request.user, "editor")
    if form.is_valid():
        try:
            return service(**form.cleaned_data, created_by=request.user), None
        except CatalogError as e:
            form.add_error(_error_field(form, str(e)), str(e))
    messages.error(request, "Not saved: see the form below.")
    return None, render(request, template, {**listed(), "form": form}, status=400)


def _error_field(form, message: str) -> str | None:
    """The form field a service's refusal is about, so that it shows at that field: the
    field its message starts with ("filter: ...", "source name: ..."), the one whose value
    it starts with ("/data/x: no such file or directory"), the name for a name taken;
    None (above the form) when it names none."""
    head = message.split(":", 1)[0].strip()
    for name in form.fields:
        if head in (name, name.replace("_", " ")) or head.endswith(" " + name):
            return name
    for name, value in form.cleaned_data.items():
        if isinstance(value, str) and value.strip() and message.startswith(value.strip()):
            return name
    if "name" in form.fields and " named " in message and "already exists" in message:
        return "name"
    return None


def source_list(request):
    ctx = catalog.source_list(page=request.GET.get("page", 1))
    return render(request, "dashboard/sources/list.html", {**ctx, "form": SourceRegisterForm()})


@require_POST
def source_register(request):
    source, again = _create(
        request,
        SourceRegisterForm(request.POST),
        sources.source_register,
        "dashboard/sources/list.html",
        catalog.source_list,
    )
    if again:
        return again
    messages.success(
        request,
        f"Registered {source.name}: {source.num_files:,} file(s), {source.num_documents:,} documents.",
    )
    return redirect("dashboard:source", source_id=source.pk)


@require_POST
def source_scan(request, source_id: int):
    require_role(request.user, "editor")
    try:
        source = sources.source_scan(source_id=source_id)
    except CatalogError as e:
        messages.error(request, str(e))
    else:
        messages.success(
            request,
            f"Scanned {source.name}: {source.num_files:,} file(s), {source.num_documents:,} documents.",
        )
    return redirect("dashboard:source", source_id=source_id)


def source_detail(request, source_id: int):
    ctx = contexts.source_detail(source_id=source_id)
    return render(
        request,
        "dashboard/sources/detail.html",
        {
            **ctx,
            **annotation_contexts.source_annotations(tokenized=ctx["tokenized"]),
            "tokenize_form": TokenizeForm(),
        },
    )


@require_POST
def source_tokenize(request, source_id: int):
    require_role(request.user, "editor")
    form = TokenizeForm(request.POST)
    if not form.is_valid():
        messages.error(request, form.errors.as_text())
        return redirect("dashboard:source", source_id=source_id)
    try:
        ts = tokenized.tokenized_source_build(
            source_id=source_id,
            tokenizer=form.cleaned_data["tokenizer"],
            engine=form.cleaned_data["engine"],
            created_by=request.user,
        )
    except CatalogError as e:
        messages.error(request, str(e))
        return redirect("dashboard:source", source_id=source_id)
    messages.success(request, f"Tokenizing {ts.source.name} with {ts.tokenizer.spec}.")
    return redirect("dashboard:job", job_id=ts.job_id)


def pool_list(request):
    ctx = catalog.pool_list(page=request.GET.get("page", 1))
    return render(request, "dashboard/pools/list.html", {**ctx, "form": PoolBuildForm()})


@require_POST
def pool_build(request):
    pool, again = _create(
        request,
        PoolBuildForm(request.POST),
        pools.pool_build,
        "dashboard/pools/list.html",
        catalog.pool_list,
    )
    if again:
        return again
    messages.success(request, f"Building pool {pool.name}.")
    return redirect("dashboard:job", job_id=pool.job_id)


def pool_detail(request, pool_id: int):
    ctx = contexts.pool_detail(pool_id=pool_id, by=request.GET.get("by", ""))
    ctx["decon"] = decon_selectors.pool_decon(pool=ctx["pool"])
    return render(request, "dashboard/pools/detail.html", ctx)


def mixture_list(request):
    ctx = catalog.mixture_list(page=request.GET.get("page", 1))

    ctx["builder_url"] = reverse("dashboard:mixture_builder")
    return render(request, "dashboard/mixtures/list.html", ctx)


def mixture_detail(request, mixture_id: int):
    ctx = catalog.mixture_detail(mixture_id=mixture_id)
    return render(request, "dashboard/mixtures/detail.html", ctx)


def mixture_version(request, version_id: int):
    ctx = contexts.mixture_version_detail(version_id=version_id, by=request.GET.get("by", ""))
    return render(request, "dashboard/mixtures/version.html", ctx)


@require_POST
def mixture_version_materialize(request, version_id: int):
    require_role(request.user, "editor")
    try:
        job = exports.mixture_version_materialize(version_id=version_id, created_by=request.user)
    except CatalogError as e:
        messages.error(request, str(e))
        return redirect("dashboard:mixture_version", version_id=version_id)
    messages.success(request, "Materializing: the samples are written in schedule order.")
    return redirect("dashboard:job", job_id=job.pk)


def run_list(request):
    ctx = catalog.run_page(page=request.GET.get("page", 1))
    return render(request, "dashboard/runs/list.html", ctx)


def run_detail(request, run_id: int):
    context = contexts.run_detail(run_id=run_id)
    context["decon"] = decon_selectors.run_decon(run=context["run"])
    reference = request.GET.get("reference", "")
    if reference:
        context.update(contexts.run_proposal(run=context["run"], reference=reference))
    return render(request, "dashboard/runs/detail.html", context)


@require_POST
def run_switch(request, run_id: int):
    """Save the proposal against the posted reference run as a new version continuing from
    the run's resume position, and switch the run to it. The weights are computed here
    again from the books, never taken from the form; the form's ``proposal`` (the shown
    proposal's fingerprint) must match them, and the service saves a proposal once. The
    service checks the run is the user's (owner, team or admin)."""
    require_role(request.user, "trainer")
    reference = request.POST.get("reference", "")
    shown = request.POST.get("proposal", "")
    back = redirect("dashboard:run", run_id=run_id)
    if not reference.isdigit():
        messages.error(request, "reference: give a run id")
        return back
    try:
        proposal = catalog.run_mixture_proposal(run_id=run_id, reference_run_id=int(reference))
        if shown != proposal["fingerprint"]:
            raise CatalogError(
                "proposal: the proposal changed since the page showed it (new losses, or "
                "the run switched): review the one shown now"
            )
        result = runs.run_switch(
            run_id=run_id,
            weights={p["pool"]: p["proposed"] for p in proposal["pools"]},
            actor=request.user,
            proposal=proposal,
        )
    except CatalogError as e:
        messages.error(request, str(e))
        return redirect(f"{back.url}?reference={reference}#proposal")
    version, seg = result["version"], result["segment"]
    messages.success(
        request,
        f"Saved {version} with the proposed weights; the run reads it from its sample "
        f"{seg.first_sample:,} (step {seg.first_step:,}) on.",
    )
    return back


def mixture_version_json(request, version_id: int):
    doc = catalog.mixture_version_document(version_id=version_id)
    resp = JsonResponse(doc, json_dumps_params={"indent": 2})
    # Quoted by Django (RFC 6266): a name can never add a header or a parameter.
    resp["Content-Disposition"] = (
        content_disposition_header(True, f"{doc['mixture']}-v{doc['number']}.json") or ""
    )
    return resp


def stored_file_response(location: str, filename: str) -> FileResponse:
    """A stored file as a download named ``filename``: a local file, or an object on
    object storage streamed through the store (never copied to the web host), with the same
    headers (type from the name, length, attachment)."""
    if not storage.is_remote(location):
        return FileResponse(open(location, "rb"), as_attachment=True, filename=filename)
    parent, _, key = storage.resolve(location).rpartition("/")
    store = storage.open_store(parent)
    size = store.size(key)
    resp = FileResponse(store.open(key), as_attachment=True, filename=filename)
    resp["Content-Length"] = str(size)
    return resp


def export_download(request, export_id: int):
    location = catalog.export_file(export_id=export_id)
    return stored_file_response(location, storage.resolve(location).rsplit("/", 1)[-1])


@require_http_methods(["GET", "HEAD", "POST"])
def mixture_version_export(request, version_id: int, fmt: str):
    """The version's trainer config as a download. A GET never writes: it serves the
    recorded file, or the same text computed in memory when none was recorded. An editor's
    POST writes it once under the version's exports/ and records it (it then lists on the
    version page)."""

    try:
        if request.method == "POST":
            require_role(request.user, "editor")
            export = exports.mixture_version_export(version_id=version_id, fmt=fmt)
            path, version = Path(export.path), export.version
            location = export.path
        else:
            _fmt, version, path, export = exports.mixture_version_export_find(  # type: ignore[assignment]
                version_id=version_id, fmt=fmt
            )
            if export is None and _fmt in exports.EXPORT_WRITES_FILES:
                raise CatalogError(
                    f"{version} has no {_fmt} export yet: an editor writes it (Export button, "
                    "or manage.py catalog export)"
                )
            if export is None:
                text = exports.mixture_version_export_render(version_id=version_id, fmt=fmt)
                resp = HttpResponse(text, content_type="text/plain; charset=utf-8")
                resp["Content-Disposition"] = content_disposition_header(
                    True, f"{version.mixture.name}-v{version.number}-{Path(path).name}"
                )
                return resp
            location = export.path
    except CatalogError as e:
        # The reason as the answer, never the (debug) list of URLs a 404 page may show.
        return HttpResponse(f"{e}\n", status=404, content_type="text/plain; charset=utf-8")
    name = f"{version.mixture.name}-v{version.number}-{Path(path).name}"
    return stored_file_response(location, name)


def mixture_diff_pick(request, mixture_id: int):
    """The mixture page's "Compare vA with vB" form: the diff of the two versions chosen."""
    a, b = request.GET.get("a", ""), request.GET.get("b", "")
    ids = catalog.mixture_version_ids(mixture_id=mixture_id)
    if not (a.isdigit() and b.isdigit() and int(a) in ids and int(b) in ids) or a == b:
        messages.error(request, "Diff: choose two different versions of this mixture.")
        return redirect("dashboard:mixture", mixture_id=mixture_id)
    return redirect("dashboard:mixture_version_diff", a_id=int(a), b_id=int(b))


def mixture_version_diff(request, a_id: int, b_id: int):
    return render(
        request,
        "dashboard/mixtures/diff.html",
        catalog.mixture_version_diff(a_id=a_id, b_id=b_id),
    )

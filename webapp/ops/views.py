"""Operations pages: the webhooks a user set up for themselves and their teams (added and
removed by editors and admins: a webhook sends the catalog's events, job errors and flag
reasons included, to an address outside it), and the storage report."""

from __future__ import annotations

import secrets

from django import forms
from django.contrib import messages
from django.contrib.auth.models import Group
from django.db.models import Q
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from webapp.ops.models import WEBHOOK_EVENTS, WebhookDelivery, WebhookEndpoint
from webapp.ops.storage import (
    KINDS,
    RetireRefused,
    artifact_retire,
    artifact_retire_preview,
    storage_latest,
    storage_measure_request,
)
from webapp.ops.webhooks import endpoint_create, url_refusal
from webapp.roles import ROLES, require_role


def _teams(user):
    """The user's teams: their groups that are not role groups."""
    return Group.objects.filter(user=user).exclude(name__in=ROLES).order_by("name")


class WebhookForm(forms.Form):
    url = forms.URLField(max_length=1000, label="URL", assume_scheme="https")
    secret = forms.CharField(
        max_length=200,
        required=False,
        help_text="Shared secret for the X-Shardyard-Signature header; empty: one is generated.",
    )
    events = forms.MultipleChoiceField(
        choices=[(e, e) for e in WEBHOOK_EVENTS], widget=forms.CheckboxSelectMultiple
    )
    format = forms.ChoiceField(choices=WebhookEndpoint.Format.choices)
    team = forms.ModelChoiceField(
        queryset=Group.objects.none(), required=False, empty_label="just me"
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = _teams(user)

    def clean_url(self):
        url = self.cleaned_data["url"]
        why = url_refusal(url)
        if why:
            raise forms.ValidationError(why)
        return url


def _visible(user):
    return WebhookEndpoint.objects.filter(Q(owner=user) | Q(team__in=_teams(user)))


def webhooks(request):
    """List, with the last deliveries, and (for editors) the form for a new one."""
    if request.method == "POST":
        require_role(request.user, "editor")
    form = WebhookForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        secret = form.cleaned_data["secret"] or secrets.token_urlsafe(24)
        endpoint = endpoint_create(
            url=form.cleaned_data["url"],
            secret=secret,
            events=form.cleaned_data["events"],
            owner=request.user,
            team=form.cleaned_data["team"],
            format=form.cleaned_data["format"],
        )
        shown = "" if form.cleaned_data["secret"] else f" Its secret (shown once): {secret}"
        messages.success(request, f"Webhook {endpoint.pk} to {endpoint.url} added.{shown}")
        return redirect("webhooks")
    endpoints = list(_visible(request.user).select_related("team", "owner").order_by("-id"))
    recent = WebhookDelivery.objects.filter(endpoint__in=endpoints).order_by("-id")[:30]
    return render(
        request,
        "ops/webhooks.html",
        {"form": form, "endpoints": endpoints, "deliveries": recent},
    )


@require_POST
def webhook_delete(request, pk: int):
    require_role(request.user, "editor")
    endpoint = get_object_or_404(_visible(request.user), pk=pk)
    endpoint.delete()
    messages.success(request, f"Webhook {pk} removed.")
    return redirect("webhooks")


def storage_page(request):
    """Bytes held per source, artifact, owner and team, as the newest measurement stored
    them (with its age; nothing is measured here); editors ask for a new measurement and
    retire artifacts here."""
    latest = storage_latest()
    return render(request, "ops/storage.html", {"report": latest["report"], "latest": latest})


@require_POST
def storage_measure(request):
    """Queue a measurement for a worker (or find the one under way)."""
    require_role(request.user, "editor")
    row = storage_measure_request(requested_by=request.user)
    messages.success(
        request,
        f"A worker measures the storage now (measurement {row.pk}, {row.state}); "
        "this page shows the result when it is done.",
    )
    return redirect("storage")


@require_http_methods(["GET", "POST"])
def storage_retire(request, kind: str, pk: int):
    """GET: what retiring would remove (or why it is refused), with the confirming form.
    POST with ``confirm=yes`` (that form): retire. A POST without it shows the page: files
    are removed only once the editor has seen which ones."""
    require_role(request.user, "editor")
    if kind not in KINDS:
        messages.error(request, f"kind {kind!r}: choose from {', '.join(KINDS)}")
        return redirect("storage")
    if request.method == "POST" and request.POST.get("confirm") != "yes":
        return redirect("storage_retire", kind=kind, pk=pk)
    if request.method == "GET":
        try:
            preview = artifact_retire_preview(kind=kind, pk=pk)
        except KINDS[kind].DoesNotExist as exc:  # type: ignore[attr-defined]
            messages.error(request, str(exc))
            return redirect("storage")
        return render(request, "ops/retire.html", {"artifact": preview})
    try:
        done = artifact_retire(kind=kind, pk=pk)
    except RetireRefused as exc:
        messages.error(request, str(exc))
    except KINDS[kind].DoesNotExist as exc:  # type: ignore[attr-defined]
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Retired {kind} {pk}: {done['bytes_freed']:,} bytes freed.")
    return redirect("storage")

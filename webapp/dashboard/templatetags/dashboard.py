"""Template helpers: role checks for showing buttons and the chart embed."""

from __future__ import annotations

import itertools

from django import template
from django.utils.html import format_html, json_script

from shardcore.export import FORMATS, ExportFormat
from shardcore.sizes import format_size
from webapp.roles import has_role as _has_role

register = template.Library()
_ids = itertools.count()


@register.filter
def has_role(user, role: str) -> bool:
    """``{% if user|has_role:"editor" %}``: only hides buttons; views check again."""
    return _has_role(user, role)


@register.simple_tag
def export_formats(*, local: bool = False) -> list[ExportFormat]:
    """``{% export_formats as formats %}``: the trainer exports a version page links
    (``local=True``: only those that name no local file, for a version on object storage)."""
    return [f for f in FORMATS.values() if not (local and f.local_only)]


@register.simple_tag
def plot(figure: dict, height: int = 380):
    """A plotly figure (a dict from dashboard.charts) as a div plus its JSON; charts.js draws
    every such div with the locally served plotly.js."""
    element_id = f"fig-{next(_ids)}"
    height = (figure.get("layout") or {}).get("height") or height  # a figure may need more
    return format_html(
        '<div class="chart" data-figure="{}" style="height:{}px"></div>{}',
        element_id,
        height,
        json_script(figure, element_id),
    )


@register.filter
def percent(fraction) -> str:
    try:
        return f"{100 * float(fraction):.0f}%"
    except (TypeError, ValueError):
        return ""


@register.filter
def thousands(value) -> str:
    """An integer with thousands separators (1,234,567); other values unchanged."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return value


@register.filter
def size(value) -> str:
    """Bytes as ``shardcore.sizes.format_size`` writes them (886.4 kB: kB = 1000 bytes, as
    everywhere in Shardyard); Django's filesizeformat would say 865.6 KB."""
    try:
        return format_size(int(value))
    except (TypeError, ValueError):
        return ""


@register.filter
def pyrepr(value) -> str:
    """A Python literal of the value (for code snippets the user copies)."""
    return repr(value)


@register.filter
def percent1(fraction) -> str:
    """A share with one decimal (66.7%)."""
    try:
        return f"{100 * float(fraction):.1f}%"
    except (TypeError, ValueError):
        return ""


@register.filter
def next_of(items, index: int):
    """``items[index + 1]`` (the next row of a list: versions are listed newest first)."""
    return items[int(index) + 1]


# What a page's object is called in the API (its route), and the client call that needs its id.
_API_ROUTES = {
    "source": ("sources", None),
    "pool": ("pools", "client.report_losses(run_id, step=step, val={{{pk}: loss}})"),
    "mixture": ("mixtures", None),
    "version": ("mixture-versions", 'client.register_run(mixture_version={pk}, name="my-run")'),
    "run": ("runs", "client.resume_position({pk})"),
    "job": ("jobs", None),
    "flag": ("flags", None),
    "annotation": ("annotations", None),
}


@register.simple_tag
def api_ref(kind: str, pk: int):
    """The ids the API needs, copyable: the object's id, its API URL and, where a training
    loop uses the id, the ``shardcore.client`` call (copy.js wires the buttons)."""
    route, client = _API_ROUTES[kind]
    pk = int(pk)
    parts = [
        format_html(
            '<span class="muted">{} id</span> <code id="api-id">{}</code> '
            '<button type="button" class="small" data-copy="#api-id">Copy id</button>',
            kind,
            pk,
        ),
        format_html(
            '<span class="muted">API</span> <code id="api-url">GET /api/{}/{}/</code> '
            '<button type="button" class="small" data-copy="#api-url">Copy</button>',
            route,
            pk,
        ),
    ]
    if client:
        parts.append(
            format_html(
                '<span class="muted">client</span> <code id="api-client">{}</code> '
                '<button type="button" class="small" data-copy="#api-client">Copy</button>',
                client.format(pk=pk),
            )
        )
    return format_html(
        '<p class="api-ref" id="api-ref">{}</p>',
        format_html(" · ".join(["{}"] * len(parts)), *parts),
    )

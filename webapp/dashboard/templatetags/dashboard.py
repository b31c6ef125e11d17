"""Template helpers: role checks for showing buttons and the chart embed."""

from __future__ import annotations

import itertools

from django import template
from django.utils.html import format_html, json_script

from webapp.roles import has_role as _has_role

register = template.Library()
_ids = itertools.count()


@register.filter
def has_role(user, role: str) -> bool:
    """``{% if user|has_role:"editor" %}``: only hides buttons; views check again."""
    return _has_role(user, role)


@register.simple_tag
def plot(figure: dict, height: int = 380):
    """A plotly figure (a dict from dashboard.charts) as a div plus its JSON; charts.js draws
    every such div with the locally served plotly.js."""
    element_id = f"fig-{next(_ids)}"
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

"""Shared by every chart: the palette, the layout, the empty figure, colours and number labels."""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence

# Fixed colours so that a pool or a shuffle keeps its colour across charts of one page.
# Colour-blind safe (from Okabe & Ito's and Paul Tol's qualitative schemes): any two differ
# by at least 17 in CIELAB (delta E 1976) for normal vision and simulated deuteranopia
# and protanopia (Machado 2009), and each is dark enough to read on white. The palette
# before had pairs at 2.8 (teal and pink to a deuteranope) and look-alike greens and
# blues. No black or dark grey: the quality charts draw their references in those.
PALETTE = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#CC3311",  # red
    "#33BBEE",  # cyan
    "#882255",  # wine
    "#CC79A7",  # reddish purple
)


TAINT = "#c0392b"
# Neutral colours, apart from the palette: what is not one of a chart's series.
GREY, SLATE = "#7f8c8d", "#2c3e50"


MEASURES = ("documents", "bytes", "tokens")


def _layout(title: str, **extra) -> dict:
    # The legend sits above the plot, under the title: below it, it would print over the
    # x axis's title (plotly places that title without regard to a legend).
    layout = {
        "title": {"text": title},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "legend": {
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": 0,
            "yanchor": "bottom",
            "yref": "container",
        },
        "template": "plotly_white",
    }
    layout.update(extra)
    _fit_axes(layout)
    return layout


def _fit_axes(layout: dict) -> dict:
    """Axes push the margins to fit their tick labels and titles (automargin), so that a
    title never prints over ticks or over the legend below the plot."""
    for key, axis in layout.items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            axis.setdefault("automargin", True)
    return layout


def _empty(title: str, message: str) -> dict:
    return {
        "data": [],
        "layout": _layout(
            title,
            xaxis={"visible": False},
            yaxis={"visible": False},
            annotations=[{"text": message, "showarrow": False, "xref": "paper", "yref": "paper"}],
        ),
    }


# A property with many values (file paths) shows its largest; the rest are one bar.
TOP_VALUES = 12


def _natural(label: str) -> tuple:
    """Sort key that orders numbers inside labels by value ("128-255" before "1,024-2,047");
    "worst label" last."""

    parts = re.split(r"(\d[\d,]*)", str(label))
    key = tuple((0, int(p.replace(",", ""))) if p[:1].isdigit() else (1, p) for p in parts if p)
    return (label == "worst label", key)


def colour_of(label: str) -> str:
    """A colour fixed by the label's text, so that one pool (or value) has the same colour
    on every chart and page, whatever else is drawn beside it."""

    return PALETTE[zlib.crc32(str(label).encode()) % len(PALETTE)]


def human_number(n: float) -> str:
    """``n`` in at most three significant digits with a k, M, B or T suffix: 0, 512,
    900k, 1M, 2.01M, 15T."""
    n = float(f"{float(n):.3g}")  # rounded first: 999,999 is 1M, not 1e+03k
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:g}{suffix}"
    return f"{n:g}"


def log_ticks(values) -> dict:
    """Tick settings for a log axis over ``values``: its labelled ticks at 1, 2 and 5 times
    a power of ten within the values' range (powers of ten alone over more than three
    decades), written as ``human_number`` does. Left to itself, plotly writes every minor
    tick's leading digit ("2 3 4 5 6 7 8 9 10 2 3"), which reads as numbers that are not
    there."""
    positive = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    if not positive:
        return {}
    lo, hi = min(positive), max(positive)
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    steps = (1,) if math.log10(hi / lo) > 3 else (1, 2, 5)
    ticks = [m * 10.0**e for e in range(first, last + 1) for m in steps]
    inside = [t for t in ticks if lo / 1.0001 <= t <= hi * 1.0001]
    # Fewer than two ticks inside: the nearest ones around the range give the scale.
    if len(inside) < 2:
        below = [t for t in ticks if t <= lo] or ticks[:1]
        above = [t for t in ticks if t >= hi] or ticks[-1:]
        inside = sorted({below[-1], *inside, above[0]})
    return {"tickmode": "array", "tickvals": inside, "ticktext": [human_number(t) for t in inside]}


def colours_of(labels: Sequence[str]) -> dict[str, str]:
    """A distinct colour for each of ``labels`` (up to the palette's size): each keeps
    ``colour_of`` its text unless another label of the set took it first (in sorted
    order), then it takes the next free colour. The same set gets the same colours on
    every chart of a page."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for label in sorted({str(x) for x in labels}):
        start = PALETTE.index(colour_of(label))
        free = [PALETTE[(start + i) % len(PALETTE)] for i in range(len(PALETTE))]
        colour = next((c for c in free if c not in taken), free[0])
        out[label] = colour
        taken.add(colour)
        if len(taken) == len(PALETTE):
            taken.clear()
    return out

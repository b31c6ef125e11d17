"""Charts as data: each function takes plain numbers and returns a plotly figure as a dict
(``{"data": [...], "layout": {...}}``) that the page hands to plotly.js unchanged.

No database, no Django, no plotly import: the figures are JSON-ready dicts, so a test
checks a chart by looking at its numbers, and selectors stay the only code that queries.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Mapping, Sequence
from datetime import datetime

# Fixed colours so that a pool or a shuffle keeps its colour across charts of one page.
PALETTE = (
    "#2a6fdb",
    "#e67e22",
    "#27ae60",
    "#8e44ad",
    "#c0392b",
    "#16a085",
    "#d4ac0d",
    "#7f8c8d",
    "#2c3e50",
    "#e84393",
)
TAINT = "#c0392b"
MEASURES = ("documents", "bytes", "tokens")


def _layout(title: str, **extra) -> dict:
    # The legend sits above the plot, under the title: below it, it would print over the
    # x axis's title (plotly places that title without regard to a legend).
    layout = {
        "title": {"text": title},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": 0, "yanchor": "bottom",
                   "yref": "container"},
        "template": "plotly_white",
    }  # fmt: skip
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


def composition_bars(
    values: Mapping[str, Mapping[str, int]],
    *,
    prop: str,
    title: str | None = None,
    top: int = TOP_VALUES,
) -> dict:
    """Share of documents, bytes and tokens per value of one property: its ``top`` values
    by documents, then the others as one bar ("k other values").

    ``values`` is ``{"en": {"documents": 10, "bytes": 900, "tokens": 250}, ...}``. Shares
    are of the property's totals for each measure, so the three measures share one axis
    and a value skewed to long documents shows as a bytes bar taller than its documents
    bar. One chart per property: values of different properties never share an axis.
    """
    title = title or f"Documents, bytes and tokens by {prop}"
    if not values:
        return _empty(title, f"no values of {prop} recorded")

    def n(v: Mapping, m: str) -> int:
        return int(v.get(m, 0) or 0)

    totals = {m: sum(n(v, m) for v in values.values()) for m in MEASURES}
    ranked = sorted(values, key=lambda k: (-n(values[k], "documents"), str(k)))
    shown, rest = ranked[:top], ranked[top:]
    if len(rest) == 1:  # one bar either way: name it
        shown, rest = ranked, []
    labels = [str(v) for v in shown]
    counts = {m: [n(values[v], m) for v in shown] for m in MEASURES}
    if rest:
        labels.append(f"{len(rest):,} other values")
        for m in MEASURES:
            counts[m].append(sum(n(values[v], m) for v in rest))
    data = [
        {
            "type": "bar",
            "name": m,
            "x": labels,
            "y": [c / totals[m] if totals[m] else 0.0 for c in counts[m]],
            "customdata": counts[m],
            "hovertemplate": "%{x}<br>" + m + ": %{customdata:,} (%{y:.1%})<extra></extra>",
            "marker": {"color": PALETTE[i]},
        }
        for i, m in enumerate(MEASURES)
    ]
    return {
        "data": data,
        "layout": _layout(
            title,
            barmode="group",
            xaxis={"title": {"text": prop}, "type": "category"},
            yaxis={"title": {"text": "share"}, "tickformat": ".0%"},
        ),
    }


def composition_by_property(
    by_property: Mapping[str, Mapping[str, Mapping[str, int]]], *, top: int = TOP_VALUES
) -> list[tuple[str, dict]]:
    """``composition_bars`` of each property, by property name: ``[(prop, figure)]``."""
    return [
        (prop, composition_bars(by_property[prop], prop=prop, top=top))
        for prop in sorted(by_property)
    ]


def length_histogram(
    edges: Sequence[float],
    counts: Sequence[int],
    *,
    title: str = "Document length",
    unit: str = "characters",
) -> dict:
    """Documents per length bin; ``edges`` has one more entry than ``counts``. Lengths span
    orders of magnitude, so bins are drawn on a log x axis at their geometric centre."""
    if not counts and len(edges) <= 1:
        return _empty(title, "no documents")
    if len(edges) != len(counts) + 1:
        raise ValueError(f"{len(edges)} edges for {len(counts)} counts: need counts + 1")
    centres = [math.sqrt(max(a, 1) * max(b, 1)) for a, b in zip(edges, edges[1:], strict=False)]
    widths = [b - a for a, b in zip(edges, edges[1:], strict=False)]
    labels = [f"{int(a):,}–{int(b):,}" for a, b in zip(edges, edges[1:], strict=False)]
    return {
        "data": [
            {
                "type": "bar",
                "x": centres,
                "y": list(counts),
                "width": widths,
                "customdata": labels,
                "hovertemplate": "%{customdata} " + unit + ": %{y:,} documents<extra></extra>",
                "marker": {"color": PALETTE[0]},
            }
        ],
        "layout": _layout(
            title,
            xaxis={"type": "log", "title": {"text": unit}, **log_ticks([*edges, *centres])},
            yaxis={"title": {"text": "documents"}},
            bargap=0.05,
        ),
    }


def _natural(label: str) -> tuple:
    """Sort key that orders numbers inside labels by value ("128-255" before "1,024-2,047");
    "worst label" last."""

    parts = re.split(r"(\d[\d,]*)", str(label))
    key = tuple((0, int(p.replace(",", ""))) if p[:1].isdigit() else (1, p) for p in parts if p)
    return (label == "worst label", key)


def _deviation_traces(
    curve: Mapping, *, axis: str = "", show_legend: bool = True, stat: str = "max"
) -> list[dict]:
    sizes = list(curve["window_sizes"])
    traces = []
    colours = colours_of([n for n in curve["deviations"] if n != "worst label"])
    for name in sorted(curve["deviations"], key=_natural):
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": name,
                "legendgroup": name,
                "showlegend": show_legend,
                "x": sizes,
                "y": list(curve["deviations"][name]),
                # A value keeps its colour on every chart; the worst label is drawn dark.
                "line": {"color": "#222" if name == "worst label" else colours[name]},
                "hovertemplate": f"{name}<br>window %{{x:,}}: {stat} %{{y:.3g}}<extra></extra>",
                **({"xaxis": f"x{axis}", "yaxis": f"y{axis}"} if axis else {}),
            }
        )
    ref = curve.get("reference")
    if ref and ref.get("mean"):
        common = {"legendgroup": "reference", "x": sizes,
                  **({"xaxis": f"x{axis}", "yaxis": f"y{axis}"} if axis else {})}  # fmt: skip
        traces.append({**common, "type": "scatter", "mode": "lines", "showlegend": False,
                       "y": list(ref["hi"]), "line": {"width": 0}, "hoverinfo": "skip",
                       "name": "perfect shuffle (spread)"})  # fmt: skip
        traces.append({**common, "type": "scatter", "mode": "lines", "showlegend": False,
                       "y": list(ref["lo"]), "line": {"width": 0}, "fill": "tonexty",
                       "fillcolor": "rgba(0,0,0,0.12)", "hoverinfo": "skip",
                       "name": "perfect shuffle (spread)"})  # fmt: skip
        traces.append(
            {**common, "type": "scatter", "mode": "lines", "showlegend": show_legend,
             "name": f"perfect shuffle ({ref.get('trials', '?')} simulations)",
             "y": list(ref["mean"]), "line": {"color": "#000", "width": 2},
             "hovertemplate": "perfect shuffle at %{x:,}: %{y:.3g}<extra></extra>"}
        )  # fmt: skip
    if curve.get("ideal") is not None:
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "i.i.d. bound (sample level)",
                "legendgroup": "ideal",
                "showlegend": show_legend,
                "x": sizes,
                "y": list(curve["ideal"]),
                "line": {"color": "#000", "dash": "dash"},
                "hovertemplate": "ideal at %{x:,}: %{y:.3g}<extra></extra>",
                **({"xaxis": f"x{axis}", "yaxis": f"y{axis}"} if axis else {}),
            }
        )
    return traces


def window_deviation(
    curve: Mapping, *, title: str = "Window deviation vs window size", stat: str = "max"
) -> dict:
    """Deviation of each characteristic's share in a window from its global share, against
    the window size, log-log, with the bound a uniformly random order would reach.

    ``curve`` is ``{"window_sizes": [...], "deviations": {characteristic: [...]}, "ideal":
    [...] or None}``; a good shuffle's lines run along the dashed ideal.
    """
    if not curve.get("window_sizes"):
        return _empty(title, "no quality report yet")
    return {
        "data": _deviation_traces(curve, stat=stat),
        "layout": _layout(
            title,
            xaxis={
                "type": "log",
                "title": {"text": "window size (samples)"},
                **log_ticks(_curve_values(curve)[0]),
            },
            yaxis={
                "type": "log",
                "title": {"text": f"{stat} deviation"},
                **log_ticks(_curve_values(curve)[1]),
            },
        ),
    }


def position_heatmap(
    positions: Sequence[float],
    categories: Sequence[str],
    shares: Sequence[Sequence[float]],
    *,
    title: str = "Composition over position",
) -> dict:
    """Share of each category (row) in each stretch of training (column). ``positions``
    are the stretch centres as fractions of the whole run; ``shares[row][column]``."""
    if len(shares) != len(categories):
        raise ValueError(f"{len(shares)} rows of shares for {len(categories)} categories")
    for row in shares:
        if len(row) != len(positions):
            raise ValueError(f"a row has {len(row)} shares for {len(positions)} positions")
    if not categories or not positions:
        return _empty(title, "no composition recorded")
    # Rows in the labels' natural order ("2" before "10", "128-255" before "1,024-2,047"),
    # top to bottom.
    order = sorted(range(len(categories)), key=lambda i: _natural(str(categories[i])))
    categories = [categories[i] for i in order]
    shares = [shares[i] for i in order]
    return {
        "data": [
            {
                "type": "heatmap",
                "x": list(positions),
                "y": list(categories),
                "z": [list(r) for r in shares],
                "colorscale": "Viridis",
                "zmin": 0,
                "colorbar": {"title": {"text": "share"}, "tickformat": ".0%"},
                "hovertemplate": "%{y} at %{x:.0%}: %{z:.1%}<extra></extra>",
            }
        ],
        "layout": _layout(
            title,
            xaxis={"title": {"text": "training position"}, "tickformat": ".0%"},
            yaxis={"automargin": True, "type": "category", "autorange": "reversed"},
        ),
    }


def shuffle_comparison(
    curves: Mapping[str, Mapping], *, title: str = "Shuffles compared", stat: str = "max"
) -> dict:
    """One window-deviation panel per shuffle (exact, grid, local, buffer, ...) side by
    side, sharing the y axis so the panels compare at a glance."""
    names = [n for n in curves if curves[n].get("window_sizes")]
    if not names:
        return _empty(title, "no shuffle reports yet")
    n = len(names)
    gap = 0.04
    width = (1 - gap * (n - 1)) / n
    data: list[dict] = []
    layout = _layout(title)
    annotations = []
    # The panels share one y axis: its ticks span every panel's values.
    y_ticks = log_ticks([v for n in names for v in _curve_values(curves[n])[1]])
    for i, name in enumerate(names):
        axis = "" if i == 0 else str(i + 1)
        data += _deviation_traces(curves[name], axis=axis or "1", show_legend=i == 0, stat=stat)
        lo = i * (width + gap)
        layout[f"xaxis{axis}"] = {
            "type": "log",
            **log_ticks(curves[name]["window_sizes"]),
            "domain": [lo, lo + width],
            "anchor": f"y{axis}",
            "title": {"text": "window"},
        }
        layout[f"yaxis{axis}"] = {
            "type": "log",
            **y_ticks,
            "anchor": f"x{axis}",
            **({"matches": "y", "showticklabels": False} if i else {}),
            **({} if i else {"title": {"text": f"{stat} deviation"}}),
        }
        annotations.append(
            {
                "text": f"<b>{name}</b>",
                "x": lo + width / 2,
                "y": 1.02,
                "xref": "paper",
                "yref": "paper",
                "showarrow": False,
                "xanchor": "center",
                "yanchor": "bottom",
            }
        )
    # Traces of the first panel name their axes "x1"/"y1"; plotly calls them "x"/"y".
    for t in data:
        if t.get("xaxis") == "x1":
            t["xaxis"], t["yaxis"] = "x", "y"
    layout["annotations"] = annotations
    return {"data": data, "layout": _fit_axes(layout)}


def predicted_epochs(
    rows: Sequence[Mapping], *, title: str = "Predicted tokens and epochs", warn_epochs: float = 4.0
) -> dict:
    """Tokens each pool contributes (bars) and how many times its data is repeated (markers,
    right axis). Rows: ``{"pool": name, "tokens": int, "epochs": float}``. Pools repeated
    more than ``warn_epochs`` times are drawn in red: beyond about four epochs repeated
    tokens are worth markedly less than fresh ones."""
    if not rows:
        return _empty(title, "choose pools to see the prediction")
    pools = [str(r["pool"]) for r in rows]
    epochs = [float(r["epochs"]) for r in rows]
    return {
        "data": [
            {
                "type": "bar",
                "name": "tokens",
                "x": pools,
                "y": [int(r["tokens"]) for r in rows],
                "marker": {"color": PALETTE[0]},
                "hovertemplate": "%{x}: %{y:,} tokens<extra></extra>",
            },
            {
                "type": "scatter",
                "mode": "markers",
                "name": "epochs",
                "x": pools,
                "y": epochs,
                "yaxis": "y2",
                "marker": {
                    "size": 12,
                    "color": [TAINT if e > warn_epochs else PALETTE[2] for e in epochs],
                },
                "hovertemplate": "%{x}: %{y:.2f} epochs<extra></extra>",
            },
        ],
        "layout": _layout(
            title,
            yaxis={"title": {"text": "tokens"}},
            yaxis2={
                "title": {"text": "epochs"},
                "overlaying": "y",
                "side": "right",
                "rangemode": "tozero",
                # Its own round ticks (1, 2, 3), not the tokens axis's lines ("2.43").
                "tickmode": "auto",
                "showgrid": False,
            },
            shapes=[
                {
                    "type": "line",
                    "xref": "paper",
                    "x0": 0,
                    "x1": 1,
                    "yref": "y2",
                    "y0": warn_epochs,
                    "y1": warn_epochs,
                    "line": {"color": TAINT, "dash": "dot", "width": 1},
                }
            ],
            annotations=[
                {
                    "xref": "paper",
                    "x": 1,
                    "xanchor": "right",
                    "yref": "y2",
                    "y": warn_epochs,
                    "yanchor": "bottom",
                    "text": f"{warn_epochs:g} epochs: repeats beyond are worth less",
                    "showarrow": False,
                    "font": {"size": 10, "color": TAINT},
                }
            ],
        ),
    }


def progress_by_step(
    points: Sequence[Mapping],
    *,
    stages: Sequence[Mapping] = (),
    total_tokens: int | None = None,
    title: str = "Progress by training step",
) -> dict:
    """Consumed tokens against training step, one marker per progress report. Points:
    ``{"step": int, "tokens": int, "at": ISO time}``. ``stages`` are the schedule's later
    stages ``{"label", "tokens", "step"}``: where each starts in tokens (a dotted
    horizontal line) and, once the run got there, the step at which it did (a dotted
    vertical line labelled with the stage); ``total_tokens`` draws the budget."""
    if not points:
        return _empty(title, "no progress reported yet")
    shapes, notes = [], []
    if total_tokens:
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": total_tokens,
                "y1": total_tokens,
                "line": {"color": "#000", "dash": "dash", "width": 1},
            }
        )
        notes.append(
            {
                "x": 1,
                "xref": "paper",
                "xanchor": "right",
                "y": total_tokens,
                "yanchor": "bottom",
                "text": f"budget: {total_tokens:,} tokens",
                "showarrow": False,
                "font": {"size": 10},
            }
        )
    for st in stages:
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": st["tokens"],
                "y1": st["tokens"],
                "line": {"color": "#555", "dash": "dot", "width": 1},
            }
        )
        if st.get("step") is None:
            notes.append(
                {
                    "x": 0,
                    "xref": "paper",
                    "y": st["tokens"],
                    "text": f"{st['label']} from {st['tokens']:,} tokens (not reached)",
                    "showarrow": False,
                    "xanchor": "left",
                    "yanchor": "bottom",
                    "font": {"size": 10, "color": "#555"},
                }
            )
            continue
        shapes.append(
            {
                "type": "line",
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "x0": st["step"],
                "x1": st["step"],
                "line": {"color": "#555", "dash": "dot", "width": 1},
            }
        )
        notes.append(
            {
                "x": st["step"],
                "y": 1,
                "yref": "paper",
                "text": f"{st['label']} from step {st['step']:,}",
                "showarrow": False,
                "xanchor": "left",
                "yanchor": "bottom",
                "font": {"size": 10, "color": "#555"},
            }
        )
    layout = _layout(
        title,
        xaxis={"title": {"text": "training step"}, "rangemode": "tozero"},
        yaxis={"title": {"text": "tokens consumed"}, "rangemode": "tozero"},
        shapes=shapes,
        annotations=notes,
    )
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "tokens",
                "x": [int(p["step"]) for p in points],
                "y": [int(p["tokens"]) for p in points],
                "customdata": [str(p.get("at", "")) for p in points],
                "hovertemplate": "step %{x:,}: %{y:,} tokens<br>%{customdata}<extra></extra>",
                "line": {"color": PALETTE[0]},
            }
        ],
        "layout": layout,
    }


def loss_curves(
    series: Sequence[Mapping],
    *,
    x_title: str = "step",
    boundaries: Sequence[Mapping] = (),
    title: str = "Validation loss",
    empty: str = "no losses reported yet",
) -> dict:
    """Loss curves, one line per series: ``{"name", "x": [...], "y": [...], "colour": i,
    "dash": bool}`` (dashed: an overlaid run; same colour index, same pool or source).
    ``boundaries`` are vertical dotted lines ``{"x": value, "label": text}`` (stage
    starts, shard boundaries, switches of version) with their label at the top; with
    ``"colour": i`` (a pool's epoch starts) in that series colour, dashed, labelled at the
    bottom."""
    series = [s for s in series if s["x"]]
    if not series:
        return _empty(title, empty)
    shapes, notes = [], []
    for b in boundaries:
        coloured = b.get("colour") is not None
        colour = PALETTE[int(b["colour"]) % len(PALETTE)] if coloured else "#555"
        shapes.append(
            {
                "type": "line",
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "x0": b["x"],
                "x1": b["x"],
                "line": {"color": colour, "dash": "dash" if coloured else "dot", "width": 1},
            }
        )
        if b.get("label"):
            notes.append(
                {
                    "x": b["x"],
                    "y": 0 if coloured else 1,
                    "yref": "paper",
                    "text": b["label"],
                    "showarrow": False,
                    "xanchor": "left",
                    "yanchor": "bottom",
                    "font": {"size": 10, "color": colour},
                }
            )
    layout = _layout(
        title,
        xaxis={"title": {"text": x_title}},
        yaxis={"title": {"text": "loss (nats per token)"}},
        shapes=shapes,
        annotations=notes,
    )
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers" if len(s["x"]) < 60 else "lines",
            "name": s["name"],
            "x": list(s["x"]),
            "y": [round(float(v), 5) for v in s["y"]],
            "line": {
                "color": PALETTE[int(s.get("colour", 0)) % len(PALETTE)],
                "dash": "dash" if s.get("dash") else "solid",
                "width": 1 if s.get("dash") else 2,
            },
            "hovertemplate": f"{s['name']}<br>{x_title} %{{x:,}}: %{{y:.4f}}<extra></extra>",
        }
        for s in series
    ]
    return {"data": data, "layout": layout}


# Lineage runs left to right from what trains to what was read.
LINEAGE_KINDS = ("run", "mixture_version", "pool", "tokenized_source", "source")


def lineage_layout(
    nodes: Sequence[Mapping], edges: Sequence[tuple[str, str]]
) -> dict[str, tuple[float, float]]:
    """Positions for a layered graph: one column per kind in LINEAGE_KINDS order (unknown
    kinds after), nodes spread evenly down their column in the order given."""
    columns: dict[str, list[str]] = {}
    for node in nodes:
        columns.setdefault(node["kind"], []).append(node["id"])
    order = [k for k in LINEAGE_KINDS if k in columns] + sorted(
        k for k in columns if k not in LINEAGE_KINDS
    )
    pos = {}
    for x, kind in enumerate(order):
        ids = columns[kind]
        for i, node_id in enumerate(ids):
            pos[node_id] = (float(x), 1.0 - (i + 1) / (len(ids) + 1))
    return pos


# Lineage labels: the narrowest plot a page gives the chart (half a page), the width of a
# 10 px character, and the room a column's neighbours leave; a label that does not fit is
# shortened with an ellipsis and shown whole on hover.
LINEAGE_PLOT_PX = 420
LINEAGE_CHAR_PX = 6.5
LINEAGE_ROW_PX = 34  # a marker and its label above it
LINEAGE_MIN_HEIGHT = 400


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(1, limit - 1)] + "…"


def lineage_graph(
    nodes: Sequence[Mapping],
    edges: Sequence[tuple[str, str]],
    *,
    title: str = "Lineage",
    plot_px: int = LINEAGE_PLOT_PX,
) -> dict:
    """Run -> mixture version -> pools -> tokenized sources -> sources, as a layered graph.
    Nodes: ``{"id", "kind", "label", "tainted": bool, "url": optional}``; edges are pairs of
    node ids. Tainted nodes and edges into them are red, so a flag's reach is visible.

    Labels never overlap: each is at most as wide as its column (shortened with an
    ellipsis, the whole label on hover), the columns have half a column of margin at the
    edges, and the figure grows tall enough for its longest column. ``plot_px``: the
    narrowest the page draws the plot."""
    if not nodes:
        return _empty(title, "no lineage recorded")
    pos = lineage_layout(nodes, edges)
    tainted = {n["id"] for n in nodes if n.get("tainted")}
    kinds = [k for k in LINEAGE_KINDS if any(n["kind"] == k for n in nodes)]
    kinds += sorted({n["kind"] for n in nodes} - set(LINEAGE_KINDS))
    per_column = max(sum(1 for n in nodes if n["kind"] == k) for k in kinds)
    chars = max(6, int((plot_px / len(kinds) - 12) / LINEAGE_CHAR_PX))
    height = max(LINEAGE_MIN_HEIGHT, 110 + LINEAGE_ROW_PX * (per_column + 1))
    data: list[dict] = []
    for clean in (True, False):
        xs: list[float | None] = []
        ys: list[float | None] = []
        for a, b in edges:
            if a not in pos or b not in pos:
                continue
            if (b in tainted or a in tainted) == clean:
                continue
            xs += [pos[a][0], pos[b][0], None]
            ys += [pos[a][1], pos[b][1], None]
        if xs:
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": xs,
                    "y": ys,
                    "hoverinfo": "skip",
                    "showlegend": False,
                    "line": {"color": "#b8bfcc" if clean else TAINT, "width": 1 if clean else 2},
                }
            )
    for clean in (True, False):
        group = [n for n in nodes if (n["id"] in tainted) != clean]
        if not group:
            continue
        labels = [str(n.get("label", n["id"])) for n in group]
        data.append(
            {
                "type": "scatter",
                "mode": "markers+text",
                "name": "clean" if clean else "tainted",
                "x": [pos[n["id"]][0] for n in group],
                "y": [pos[n["id"]][1] for n in group],
                "text": [_shorten(t, chars) for t in labels],
                "hovertext": labels,
                "customdata": [n.get("url", "") for n in group],
                "textposition": "top center",
                "textfont": {"size": 10},
                "hovertemplate": "%{hovertext}<extra></extra>",
                "marker": {
                    "size": 14,
                    "color": PALETTE[0] if clean else TAINT,
                    "symbol": "circle" if clean else "x",
                },
            }
        )
    return {
        "data": data,
        "layout": _layout(
            title,
            height=height,
            xaxis={
                "tickmode": "array",
                "tickvals": list(range(len(kinds))),
                "ticktext": [k.replace("_", " ") for k in kinds],
                "showgrid": False,
                "zeroline": False,
                "side": "top",
                "range": [-0.5, len(kinds) - 0.5],
                "fixedrange": True,
            },
            yaxis={"visible": False, "range": [-0.05, 1.05], "fixedrange": True},
            hovermode="closest",
            margin={"l": 10, "r": 10, "t": 70, "b": 50},
        ),
    }


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


def _curve_values(curve: Mapping) -> tuple[list, list]:
    """Every window size and every deviation a window-deviation chart of ``curve`` draws."""
    ys = [v for series in curve["deviations"].values() for v in series]
    ref = curve.get("reference") or {}
    for key in ("lo", "hi", "mean"):
        ys += list(ref.get(key) or [])
    if curve.get("ideal") is not None:
        ys += list(curve["ideal"])
    return list(curve["window_sizes"]), ys


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


def schedule_composition(
    stages: Sequence[Mapping], pools: Sequence[str], *, title: str = "Composition of the schedule"
) -> dict:
    """Each stage of a schedule as a bar as wide as its tokens, at its place in training
    (x: training tokens), stacked by the share of each pool's samples in it. ``stages``:
    ``{"name", "first_token", "num_tokens", "samples_per_pool"}`` in any order (drawn in
    schedule order); ``pools`` names the entries of ``samples_per_pool``."""
    stages = sorted(
        (s for s in stages if int(s.get("num_tokens", 0)) > 0), key=lambda s: s["first_token"]
    )
    if not stages or not pools:
        return _empty(title, "no schedule yet")
    centres = [int(s["first_token"]) + int(s["num_tokens"]) / 2 for s in stages]
    widths = [int(s["num_tokens"]) for s in stages]
    names = [str(s["name"]) for s in stages]
    colours = colours_of(pools)
    data = []
    for j, pool in enumerate(pools):
        shares, samples = [], []
        for s in stages:
            counts = [int(c) for c in s["samples_per_pool"]]
            total = sum(counts) or 1
            samples.append(counts[j] if j < len(counts) else 0)
            shares.append(samples[-1] / total)
        if not any(samples):
            continue
        data.append(
            {
                "type": "bar",
                "name": str(pool),
                "x": centres,
                "y": shares,
                "width": widths,
                "customdata": [[n, k] for n, k in zip(names, samples, strict=True)],
                "marker": {"color": colours[str(pool)], "line": {"color": "#fff", "width": 1}},
                "hovertemplate": f"{pool}<br>stage %{{customdata[0]}}: %{{y:.1%}} "
                "(%{customdata[1]:,} samples)<extra></extra>",
            }
        )
    edges = [int(s["first_token"]) for s in stages] + [
        int(stages[-1]["first_token"]) + int(stages[-1]["num_tokens"])
    ]
    return {
        "data": data,
        "layout": _layout(
            title,
            barmode="stack",
            bargap=0,
            # Ticks at the stage edges, in three significant digits: plotly's own ticks
            # on the bar centres read "900.096k".
            xaxis={"title": {"text": "training position (tokens)"}, "range": [0, edges[-1]],
                   "tickmode": "array", "tickvals": edges,
                   "ticktext": [human_number(e) for e in edges]},
            yaxis={"title": {"text": "share of the stage's samples"}, "tickformat": ".0%",
                   "range": [0, 1.12]},
            annotations=[
                {"x": c, "y": 1.06, "text": n, "showarrow": False, "xref": "x", "yref": "y"}
                for c, n in zip(centres, names, strict=True)
            ],
            shapes=[
                {"type": "line", "x0": e, "x1": e, "y0": 0, "y1": 1, "xref": "x", "yref": "y",
                 "line": {"color": "#333", "width": 1, "dash": "dot"}}
                for e in edges[1:-1]
            ],
        ),
    }  # fmt: skip


UNIT_STATE_COLOURS = {
    "succeeded": PALETTE[2],
    "running": PALETTE[0],
    "failed": TAINT,
    "cancelled": PALETTE[7],
    "queued": PALETTE[6],
}


def unit_timeline(units: Sequence[Mapping], *, title: str = "Units over time, by worker") -> dict:
    """One bar per unit that ran: from its start to its end (or ``now`` while running), on
    the row of the worker that ran it, coloured by state. ``units``: ``{"unit", "worker",
    "state", "start", "end"}`` with ISO times (``end`` may be None) and ``"now"``."""
    ran = [u for u in units if u.get("start")]
    if not ran:
        return _empty(title, "no unit has started yet")

    def ms(a: str, b: str) -> float:
        return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() * 1000

    data = []
    for state in dict.fromkeys(u["state"] for u in ran):
        mine = [u for u in ran if u["state"] == state]
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": state,
                "y": [u.get("worker") or "?" for u in mine],
                "base": [u["start"] for u in mine],
                "x": [max(ms(u["start"], u.get("end") or u["now"]), 1.0) for u in mine],
                "customdata": [[u["unit"], round(ms(u["start"], u.get("end") or u["now"]) / 1000, 2)]
                               for u in mine],
                "marker": {"color": UNIT_STATE_COLOURS.get(state, PALETTE[8])},
                "hovertemplate": "%{customdata[0]} on %{y}: %{customdata[1]} s<extra>"
                + state + "</extra>",
            }
        )  # fmt: skip
    return {
        "data": data,
        "layout": _layout(
            title,
            barmode="overlay",
            xaxis={"type": "date", "title": {"text": "time"}},
            yaxis={"title": {"text": "worker"}, "automargin": True},
        ),
    }

"""Charts of what an artifact holds: composition by property, lengths, window deviation,
position heat maps, shuffle comparison, predicted epochs, a schedule's composition."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from webapp.dashboard.charts.common import (
    MEASURES,
    PALETTE,
    TAINT,
    TOP_VALUES,
    _empty,
    _fit_axes,
    _layout,
    _natural,
    colours_of,
    human_number,
    log_ticks,
)
from webapp.dashboard.charts.runs import _curve_values


def composition_bars(
    values: Mapping[str, Mapping[str, int]],
    *,
    prop: str,
    title: str | None = None,
    top: int = TOP_VALUES,
    rest: Mapping[str, int] | None = None,
) -> dict:
    """Share of documents, bytes and tokens per value of one property: its ``top`` values
    by documents, then the others as one bar ("other (k values)").

    ``values`` is ``{"en": {"documents": 10, "bytes": 900, "tokens": 250}, ...}``; ``rest``
    (``{"values": k, "documents", "bytes", "tokens"}``) sums the values not listed there
    (a source's stats keep its most common values). Shares are of the property's totals
    over every value, for each measure, so the three measures share one axis and a value
    skewed to long documents shows as a bytes bar taller than its documents bar. One
    chart per property: values of different properties never share an axis.
    """
    title = title or f"Documents, bytes and tokens by {prop}"
    if not values:
        return _empty(title, f"no values of {prop} recorded")

    def n(v: Mapping, m: str) -> int:
        return int(v.get(m, 0) or 0)

    unlisted = {m: n(rest or {}, m) for m in MEASURES}
    num_unlisted = n(rest or {}, "values")
    totals = {m: sum(n(v, m) for v in values.values()) + unlisted[m] for m in MEASURES}
    ranked = sorted(values, key=lambda k: (-n(values[k], "documents"), str(k)))
    shown, others = ranked[:top], ranked[top:]
    if len(others) == 1 and not num_unlisted:  # one bar either way: name it
        shown, others = ranked, []
    labels = [str(v) for v in shown]
    counts = {m: [n(values[v], m) for v in shown] for m in MEASURES}
    if others or num_unlisted:
        labels.append(f"other ({len(others) + num_unlisted:,} values)")
        for m in MEASURES:
            counts[m].append(sum(n(values[v], m) for v in others) + unlisted[m])
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
    by_property: Mapping[str, Mapping[str, Mapping[str, int]]],
    *,
    top: int = TOP_VALUES,
    others: Mapping[str, Mapping[str, int]] | None = None,
) -> list[tuple[str, dict]]:
    """``composition_bars`` of each property, by property name: ``[(prop, figure)]``;
    ``others``: per property, the values ``by_property`` does not list, summed."""
    rest = others or {}
    return [
        (prop, composition_bars(by_property[prop], prop=prop, top=top, rest=rest.get(prop)))
        for prop in sorted(by_property)
    ]


def length_histogram(
    edges: Sequence[float],
    counts: Sequence[int],
    *,
    title: str = "Document length",
    unit: str = "characters",
    empty: str = "no documents",
) -> dict:
    """Documents per length bin; ``edges`` has one more entry than ``counts``. Lengths span
    orders of magnitude, so bins are drawn on a log x axis at their geometric centre.
    ``empty``: what the chart says when there is no bin (why there are no lengths)."""
    if not counts and len(edges) <= 1:
        return _empty(title, empty)
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
        common = {
            "legendgroup": "reference",
            "x": sizes,
            **({"xaxis": f"x{axis}", "yaxis": f"y{axis}"} if axis else {}),
        }
        traces.append(
            {
                **common,
                "type": "scatter",
                "mode": "lines",
                "showlegend": False,
                "y": list(ref["hi"]),
                "line": {"width": 0},
                "hoverinfo": "skip",
                "name": "perfect shuffle (spread)",
            }
        )
        traces.append(
            {
                **common,
                "type": "scatter",
                "mode": "lines",
                "showlegend": False,
                "y": list(ref["lo"]),
                "line": {"width": 0},
                "fill": "tonexty",
                "fillcolor": "rgba(0,0,0,0.12)",
                "hoverinfo": "skip",
                "name": "perfect shuffle (spread)",
            }
        )
        traces.append(
            {
                **common,
                "type": "scatter",
                "mode": "lines",
                "showlegend": show_legend,
                "name": f"perfect shuffle ({ref.get('trials', '?')} simulations)",
                "y": list(ref["mean"]),
                "line": {"color": "#000", "width": 2},
                "hovertemplate": "perfect shuffle at %{x:,}: %{y:.3g}<extra></extra>",
            }
        )
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
            xaxis={
                "title": {"text": "training position (tokens)"},
                "range": [0, edges[-1]],
                "tickmode": "array",
                "tickvals": edges,
                "ticktext": [human_number(e) for e in edges],
            },
            yaxis={
                "title": {"text": "share of the stage's samples"},
                "tickformat": ".0%",
                "range": [0, 1.12],
            },
            annotations=[
                {"x": c, "y": 1.06, "text": n, "showarrow": False, "xref": "x", "yref": "y"}
                for c, n in zip(centres, names, strict=True)
            ],
            shapes=[
                {
                    "type": "line",
                    "x0": e,
                    "x1": e,
                    "y0": 0,
                    "y1": 1,
                    "xref": "x",
                    "yref": "y",
                    "line": {"color": "#333", "width": 1, "dash": "dot"},
                }
                for e in edges[1:-1]
            ],
        ),
    }

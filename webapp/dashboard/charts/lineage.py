"""The lineage graph of a run, a version, a pool or a source."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from webapp.dashboard.charts.common import PALETTE, TAINT, _empty, _layout

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

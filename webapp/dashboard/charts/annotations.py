"""Charts of an annotation's columns, from the summary its job computed
(``shardcore.annotate.stage.summarize``): a histogram or value counts per column, documents and
mean confidence per language, the largest duplicate clusters, topic cluster sizes; and an
example filter over its columns for the page's form."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webapp.dashboard.charts.common import PALETTE, _empty, _layout

# Columns that hold ids (a duplicate or topic cluster of each document): their values
# name groups, so a histogram of them says nothing (mostly clusters of one); the page
# charts the clusters' sizes instead.
ID_COLUMNS = frozenset({"dup_cluster", "cluster"})


def column_figure(annotator: str, name: str, entry: Mapping[str, Any]) -> dict | None:
    """One column: a histogram of a number, documents per value of a small-range integer or
    of text (its most frequent values; of a list, the most frequent values it holds),
    true/false counts of a flag, documents of the one value of a constant column. None
    for a column of ids (``ID_COLUMNS``)."""
    title = f"{annotator}.{name}"
    kind = entry.get("kind")
    if name in ID_COLUMNS:
        return None
    if kind == "number" and entry.get("count") and entry.get("min") == entry.get("max"):
        # One value: a bar of it, not a histogram around it (-0.5..0.5 for all zeros).
        return _bars(title, [str(entry["min"])], [entry["count"]], xtitle=title, category=True)
    if kind == "number" and entry.get("values"):
        x = [str(v) for v, _ in entry["values"]]
        y = [c for _, c in entry["values"]]
        return _bars(title, x, y, xtitle=title, category=True)
    if kind == "number" and entry.get("histogram"):
        edges, counts = entry["histogram"]["edges"], entry["histogram"]["counts"]
        x = [(a + b) / 2 for a, b in zip(edges, edges[1:], strict=False)]
        widths = [b - a for a, b in zip(edges, edges[1:], strict=False)]
        fig = _bars(title, x, counts, xtitle=title)
        fig["data"][0]["width"] = widths
        return fig
    if kind in ("text", "list") and entry.get("top"):
        return _bars(
            title,
            [str(v) for v, _ in entry["top"]],
            [c for _, c in entry["top"]],
            xtitle=title,
            category=True,
        )
    if kind == "bool":
        return _bars(
            title, ["true", "false"], [entry["true"], entry["false"]], xtitle=title, category=True
        )
    return _empty(title, "no values")


def _bars(title: str, x: list, y: list, *, xtitle: str, category: bool = False) -> dict:
    xaxis: dict[str, Any] = {"title": {"text": xtitle}}
    if category:
        xaxis["type"] = "category"
    return {
        "data": [
            {
                "type": "bar",
                "x": x,
                "y": y,
                "marker": {"color": PALETTE[0]},
                "hovertemplate": "%{x}: %{y:,} documents<extra></extra>",
            }
        ],
        "layout": _layout(title, xaxis=xaxis, yaxis={"title": {"text": "documents"}}),
    }


def languages_figure(rows: list[dict]) -> dict:
    """Documents per language (bars) with the mean confidence of each (a line, right axis)."""
    title = "Documents and mean confidence per language"
    if not rows:
        return _empty(title, "no languages")
    langs = [str(r["lang"]) for r in rows]
    return {
        "data": [
            {
                "type": "bar",
                "name": "documents",
                "x": langs,
                "y": [r["documents"] for r in rows],
                "marker": {"color": PALETTE[0]},
            },
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "mean confidence",
                "x": langs,
                "y": [r["mean_score"] for r in rows],
                "yaxis": "y2",
                "marker": {"color": PALETTE[1]},
            },
        ],
        "layout": _layout(
            title,
            xaxis={"type": "category", "title": {"text": "language"}},
            yaxis={"title": {"text": "documents"}},
            yaxis2={
                "title": {"text": "confidence"},
                "overlaying": "y",
                "side": "right",
                "range": [0, 1],
            },
        ),
    }


def clusters_figure(rows: list[dict], *, title: str, x_label: str = "cluster") -> dict:
    """Sizes of the largest clusters (duplicate or topic)."""
    if not rows:
        return _empty(title, "no clusters")
    key = "size" if "size" in rows[0] else "documents"
    return _bars(
        title,
        [str(r["cluster"]) for r in rows],
        [r[key] for r in rows],
        xtitle=x_label,
        category=True,
    )


def filter_example(annotator: str, columns: list[Mapping[str, Any]], summary: Mapping) -> str:
    """A filter over the annotation's first column that is not an id, valid for its type:
    ``pii.emails > 0`` for a number, ``lang_id.lang = 'en'`` for text (its most frequent
    value), ``quality.has_lorem_ipsum = true`` for a flag, ``len(decon.benchmarks) > 0``
    for a list (``lang_id.lang > 0`` compared text with a number)."""
    stats = summary.get("columns") or {}
    for column in columns:
        name = column["name"]
        if name in ID_COLUMNS:
            continue
        full, kind = f"{annotator}.{name}", str(column.get("type", ""))
        if kind.startswith(("string", "large_string", "utf8")):
            top = (stats.get(name) or {}).get("top") or [["value", 0]]
            value = str(top[0][0]).replace("'", "''")
            return f"{full} = '{value}'"
        if kind == "bool":
            return f"{full} = true"
        if kind.startswith(("list", "large_list")):
            return f"len({full}) > 0"
        return f"{full} > 0"
    return ""

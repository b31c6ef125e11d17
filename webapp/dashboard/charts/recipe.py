"""The diversity recipe's charts and table rows: from a ``recipe_report`` dict recorded by
a build (``webapp.catalog.services.recipe``), per characteristic family, the cumulative
characteristic error over training of the order against random permutations of the same
records, and the distribution of per-batch error (the order's worst batch against the best
and the mean batch of random orders)."""

from __future__ import annotations

from collections.abc import Mapping

from webapp.dashboard.charts.common import GREY, PALETTE, _empty, _layout

FAMILY_NAMES = {
    "length": "document length (quantile bins)",
    "pool": "pool",
    "_doc.source": "tokenized source",
}


def family_title(name: str) -> str:
    return FAMILY_NAMES.get(name, name)


def cumulative_error(
    position, fam: Mapping, *, title: str, trials: int, unit: str = "records"
) -> dict:
    """Lines over ``unit`` placed (a pool's records, a schedule's samples): the order's
    error ||T - tau S|| (tokens) and the lowest and mean over ``trials`` random
    permutations at each checkpoint."""
    cum = fam.get("cumulative") or {}
    if not position or not cum.get("order"):
        return _empty(title, "no recipe measurement yet")
    lines = [
        ("this order", cum["order"], PALETTE[0], "solid"),
        (f"random, lowest of {trials}", cum["random_min"], PALETTE[1], "dash"),
        (f"random, mean of {trials}", cum["random_mean"], GREY, "dot"),
    ]
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": name,
            "x": list(position),
            "y": [round(float(v), 3) for v in ys],
            "line": {"color": colour, "dash": dash},
            "hovertemplate": f"{name}<br>{unit} %{{x:,}}: %{{y:,.1f}} tokens<extra></extra>",
        }
        for name, ys, colour, dash in lines
    ]
    layout = _layout(
        title,
        xaxis={"title": {"text": f"{unit} trained on"}},
        yaxis={"title": {"text": "cumulative error (tokens)"}, "rangemode": "tozero"},
    )
    return {"data": data, "layout": layout}


def batch_distribution(fam: Mapping, *, title: str, batch_size: int, unit: str = "records") -> dict:
    """Bars of per-batch error on shared bins: the order's batches and one random order's
    (the mean over the random orders), with the order's worst and random's best batch
    as vertical lines."""
    b = fam.get("batches") or {}
    hist = b.get("histogram") or {}
    if not hist.get("edges"):
        return _empty(title, "no recipe measurement yet")
    edges = hist["edges"]
    mids = [round((a + c) / 2, 6) for a, c in zip(edges, edges[1:], strict=False)]
    data = [
        {
            "type": "bar",
            "name": "this order",
            "x": mids,
            "y": list(hist["order"]),
            "marker": {"color": PALETTE[0]},
            "opacity": 0.75,
        },
        {
            "type": "bar",
            "name": "random (one order, mean)",
            "x": mids,
            "y": [round(float(v), 3) for v in hist["random"]],
            "marker": {"color": PALETTE[1]},
            "opacity": 0.6,
        },
    ]
    shapes, notes = [], []
    # The two labels at different heights: the lines may be close together.
    for x, label, colour, y in (
        (b["order_worst"], "worst batch of this order", PALETTE[0], 1),
        (b["random_best"], "best random batch", PALETTE[1], 0.9),
    ):
        shapes.append(
            {
                "type": "line",
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "x0": x,
                "x1": x,
                "line": {"color": colour, "dash": "dash", "width": 1},
            }
        )
        notes.append(
            {
                "x": x,
                "y": y,
                "yref": "paper",
                "text": label,
                "showarrow": False,
                "xanchor": "left",
                "yanchor": "bottom",
                "font": {"size": 10, "color": colour},
            }
        )
    layout = _layout(
        title,
        barmode="overlay",
        xaxis={
            "title": {
                "text": f"batch error (distance of a {batch_size}-{unit[:-1]} batch's shares from the whole's)"
            }
        },
        yaxis={"title": {"text": "batches"}},
        shapes=shapes,
        annotations=notes,
    )
    return {"data": data, "layout": layout}


def recipe_view(report: Mapping | None, *, unit: str = "records") -> dict:
    """What the page shows of a recorded recipe report: ``error`` or ``families``, one
    entry per family with its table rows, verdicts and both figures, which count in
    ``unit`` as the card does (a pool's "records", a version's "samples")."""
    if not report:
        return {"missing": True}
    if report.get("error"):
        return {"error": report["error"]}
    position = report.get("position") or []
    trials = int(report.get("trials") or 0)
    bs = int(report.get("batch_size") or 0)
    fams = []
    for name, fam in (report.get("families") or {}).items():
        title = family_title(name)
        cum, b = fam["cumulative"], fam["batches"]
        rows = [
            {
                "position": p,
                "order": o,
                "random_min": lo,
                "random_mean": mean,
                "ratio": (o / lo) if lo else None,
            }
            for p, o, lo, mean in zip(
                position, cum["order"], cum["random_min"], cum["random_mean"], strict=True
            )
        ]
        fams.append(
            {
                "key": name.replace(".", "-").replace("_", ""),
                "name": name,
                "title": title,
                "rows": rows[:-1],  # the last checkpoint is every record: every order is at 0
                "below_all": cum["below_all"],
                "max_ratio": cum["max_ratio"],
                "batches": b,
                "cumulative_figure": cumulative_error(
                    position, fam, title=f"Cumulative error, {title}", trials=trials, unit=unit
                ),
                "batch_figure": batch_distribution(
                    fam, title=f"Per-batch error, {title}", batch_size=bs, unit=unit
                ),
            }
        )
    return {
        "families": fams,
        "records": report.get("num_records"),
        "batch_size": bs,
        "trials": trials,
    }


def recipe_card(report: Mapping | None, *, unit: str = "records", stages: int = 1) -> dict:
    """The recipe card of a pool or a version (``stages``: how many stages its schedule
    has): ``missing``, ``error``, ``outdated`` (measured before like was compared with
    like: a staged schedule against random orders that mixed its stages, a pool against
    random orders of its records; not shown), or ``stages``, each a ``recipe_view`` of
    one stage's report (a version is measured stage by stage) with its ``name``, samples
    and, per family, both verdicts (``cumulative_verdict``, ``batch_verdict``; no batch
    chart when there are too few batches to judge)."""
    if not report or report.get("error"):
        return recipe_view(report, unit=unit)
    if "baseline" not in report or (stages > 1 and len(report.get("stages") or []) < 2):
        return {"outdated": True}
    parts = report.get("stages") or [report]
    out: list[dict] = []
    for k, part in enumerate(parts):
        view = recipe_view(part, unit=unit)
        for f in view["families"]:
            fam = part["families"][f["name"]]
            f["verdict"] = fam["cumulative"]["verdict"]
            f["batch_verdict"] = fam["batches"]["verdict"]
            f["ok"] = f["verdict"]["ok"] and f["batch_verdict"]["ok"]
            if f["batch_verdict"]["kind"] == "unjudged":
                f["batch_figure"] = None
            if len(parts) > 1:
                f["key"] = f"{k}-{f['key']}"
        if "name" in part:
            last = part["first_sample"] + part["measured"] - 1
            view.update(
                name=part["name"],
                first=part["first_sample"],
                last=last,
                num_samples=part["num_samples"],
                measured=part["measured"],
            )
        out.append(view)
    return {
        "stages": out,
        "staged": len(out) > 1,
        "records": sum(int(p["num_records"]) for p in parts),
        "batch_size": int(report.get("batch_size") or 0),
        "trials": int(report.get("trials") or 0),
        "baseline": report["baseline"],
        "min_batches": int(report.get("min_batches") or 0),
    }

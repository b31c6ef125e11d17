"""Charts of a training run: progress by step and loss curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from webapp.dashboard.charts.common import PALETTE, _empty, _layout


def progress_by_step(
    points: Sequence[Mapping],
    *,
    stages: Sequence[Mapping] = (),
    total_tokens: int | None = None,
    switches: Sequence[Mapping] = (),
    title: str = "Progress by training step",
) -> dict:
    """Consumed tokens against training step, one marker per progress report. Points:
    ``{"step": int, "tokens": int, "at": ISO time}``. ``stages`` are the schedule's later
    stages ``{"label", "tokens", "step"}``: where each starts in tokens (a dotted
    horizontal line) and, once the run got there, the step at which it did (a dotted
    vertical line labelled with the stage); ``switches`` ``{"step", "label"}`` are where
    the run switched version (a dashed vertical line, as on the loss charts);
    ``total_tokens`` draws the budget."""
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
    for sw in switches:
        shapes.append(
            {
                "type": "line",
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "x0": sw["step"],
                "x1": sw["step"],
                "line": {"color": "#555", "dash": "dash", "width": 1},
            }
        )
        notes.append(
            {
                "x": sw["step"],
                "y": 1,
                "yref": "paper",
                "text": f"{sw['label']} after step {sw['step']:,}",
                "showarrow": False,
                "xanchor": "left",
                "yanchor": "bottom",
                "font": {"size": 10, "color": "#555"},
            }
        )
    steps = [int(p["step"]) for p in points] + [int(sw["step"]) for sw in switches]
    steps += [int(st["step"]) for st in stages if st.get("step") is not None]
    _stagger(notes, 0, max(steps))
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
    xs = [v for s in series for v in s["x"]] + [b["x"] for b in boundaries]
    _stagger(notes, min(xs), max(xs))
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


# Labels on lines (stage starts, switches, epoch starts) are 10 px text; a chart's plot
# is at least this wide on the pages (half a 1280 px page).
LABEL_CHAR_PX, LABEL_ROW_PX, MIN_PLOT_PX = 6.2, 13, 480


def _stagger(notes: list[dict], lo: float, hi: float, *, plot_px: int = MIN_PLOT_PX) -> None:
    """Shift labels that would print over each other onto rows of their own: at the top
    (y = 1) upwards and at the bottom (y = 0) upwards too, each label on the lowest row
    whose last label ends before it starts (its width estimated from its characters).
    Two pools' epochs that start at the same step were labelled on one spot."""
    span = (hi - lo) or 1.0
    for top in (True, False):
        row_ends: list[float] = []
        placed = [
            n for n in notes if "xref" not in n and (n.get("y") == 1) == top and n.get("text")
        ]
        for n in sorted(placed, key=lambda n: n["x"]):
            width = (len(n["text"]) * LABEL_CHAR_PX + 6) / plot_px * span
            row = next((i for i, end in enumerate(row_ends) if end <= n["x"]), len(row_ends))
            if row == len(row_ends):
                row_ends.append(0.0)
            row_ends[row] = n["x"] + width
            if row:
                n["yshift"] = row * LABEL_ROW_PX


def _curve_values(curve: Mapping) -> tuple[list, list]:
    """Every window size and every deviation a window-deviation chart of ``curve`` draws."""
    ys = [v for series in curve["deviations"].values() for v in series]
    ref = curve.get("reference") or {}
    for key in ("lo", "hi", "mean"):
        ys += list(ref.get(key) or [])
    if curve.get("ideal") is not None:
        ys += list(curve["ideal"])
    return list(curve["window_sizes"]), ys

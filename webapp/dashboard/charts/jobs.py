"""A job's units over time, by worker."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from webapp.dashboard.charts.common import GREY, PALETTE, SLATE, TAINT, _empty, _layout

UNIT_STATE_COLOURS = {
    "succeeded": PALETTE[2],
    "running": PALETTE[0],
    "failed": TAINT,
    "cancelled": GREY,
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
                "customdata": [
                    [u["unit"], round(ms(u["start"], u.get("end") or u["now"]) / 1000, 2)]
                    for u in mine
                ],
                "marker": {"color": UNIT_STATE_COLOURS.get(state, SLATE)},
                "hovertemplate": "%{customdata[0]} on %{y}: %{customdata[1]} s<extra>"
                + state
                + "</extra>",
            }
        )
    return {
        "data": data,
        "layout": _layout(
            title,
            barmode="overlay",
            xaxis={"type": "date", "title": {"text": "time"}},
            yaxis={"title": {"text": "worker"}, "automargin": True},
        ),
    }

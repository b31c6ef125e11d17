"""What a job adds up over its units, named the same way by every stage: the counts
(``UnitCounts``) and the bad-input reports (per file and reason, a count and the first
few samples), summed unit by unit. Re-exported by ``shardcore.units``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypedDict

# Samples kept per (file, reason) of a bad-input report, by a unit and by a job's sum.
BAD_SAMPLES_PER_REASON = 5


class BadReason(TypedDict):
    count: int
    samples: list[str]  # at most a few, each a line of text naming where


class UnitCounts(TypedDict, total=False):
    """The stats names every stage uses for what a job adds up over its units."""

    documents: int  # documents written (each document counted by one unit only)
    tokens: int  # tokens written
    bytes: int  # input bytes read
    bad_lines: int  # input records refused (default: the counts of bad_input)
    bad_input: dict[str, dict[str, BadReason]]  # {file: {reason: BadReason}}


COUNT_NAMES = ("documents", "tokens", "bytes", "bad_lines")


def merge_bad_input(total: dict, new: dict | list) -> dict:
    """Sum bad-input reports shaped {file: {reason: {"count": n, "samples": [...]}}}
    (a list of {"file", "reason", "count", "samples"} entries is accepted too)."""
    out = {f: {r: dict(v) for r, v in reasons.items()} for f, reasons in (total or {}).items()}
    for file, reason, count, samples in _bad_entries(new):
        add_bad_input(out, file, reason, count, samples)
    return out


def add_bad_input(
    total: dict[str, dict[str, Any]], file: str, reason: str, count: int, samples: Iterable[Any]
) -> None:
    """Add ``count`` refusals of ``reason`` in ``file`` to ``total`` in place, keeping the
    first ``BAD_SAMPLES_PER_REASON`` samples of each (file, reason)."""
    slot = total.setdefault(file, {}).setdefault(reason, {"count": 0, "samples": []})
    slot["count"] += count
    room = BAD_SAMPLES_PER_REASON - len(slot["samples"])
    if room > 0:
        slot["samples"] = slot["samples"] + list(samples)[:room]


def _bad_entries(report: dict | list) -> Iterable[tuple[str, str, int, list]]:
    if isinstance(report, list):
        for e in report:
            yield (
                str(e.get("file", "")),
                str(e.get("reason", "")),
                int(e.get("count", 1)),
                e.get("samples", []),
            )
        return
    for file, reasons in (report or {}).items():
        if not isinstance(reasons, dict):
            continue
        for reason, value in reasons.items():
            if isinstance(value, dict):
                yield str(file), str(reason), int(value.get("count", 0)), value.get("samples", [])
            elif isinstance(value, int):
                yield str(file), str(reason), value, []


def counts(stats: dict[str, Any]) -> dict[str, int]:
    """A unit's ``UnitCounts`` numbers (0 where the stage leaves one out)."""
    out = {name: int(stats.get(name) or 0) for name in COUNT_NAMES}
    if "bad_lines" not in stats:
        bad = stats.get("bad_input") or {}
        out["bad_lines"] = sum(int(r["count"]) for f in bad.values() for r in f.values())
    return out

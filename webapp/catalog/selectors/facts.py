"""Reading what is measured from an artifact's files and kept in rows (``Fact``, a flag's
taint state): a page or an API answer reads these rows and never an artifact's files, so
its cost does not grow with the artifact.

A read never writes. A fact that was never asked for (or whose task was lost: queued or
running for longer than ``STALE``) is read as ``{"computing": {"state": "queued", ...}}``
and noted as *asked* in the current request's collector; the service
``services.facts.fact_requests`` (which the catalog's middleware wraps around every page
and API request) asks for the noted facts once the view has answered: a row QUEUED and one
task message. Outside such a scope nothing is asked for; the next page view asks.
"""

from __future__ import annotations

from contextvars import ContextVar
from datetime import timedelta
from typing import Any

from django.utils import timezone

from webapp.catalog.models import Fact, Flag

# A QUEUED or RUNNING row older than this is asked for again (its message was lost).
STALE = timedelta(minutes=30)

# What the reads of the current request asked for: ("fact", kind, object_id, key) or
# ("taint", flag_id); None outside a ``services.facts.fact_requests`` scope.
ASKED: ContextVar[set[tuple] | None] = ContextVar("shardyard_facts_asked", default=None)


def _ask(what: tuple) -> None:
    asked = ASKED.get()
    if asked is not None:
        asked.add(what)


def _stale(state: str, since) -> bool:
    return state in (Fact.State.QUEUED, Fact.State.RUNNING) and (
        since is None or since < timezone.now() - STALE
    )


def fact_read(kind: str, object_id: int, key: str = "", *, request: bool = True) -> dict:
    """``{"value": ...}`` when stored; ``{"error": ...}`` when the measurement failed; else
    ``{"computing": {"state", "progress", "since"}}``: queued or running, or never asked
    (then noted as asked, with ``request``; without it the state is ``"not asked"``)."""
    fact = Fact.objects.filter(kind=kind, object_id=object_id, key=key).first()
    if fact is None or _stale(fact.state, fact.requested_at):
        if not request:
            return {"computing": {"state": "not asked", "progress": 0.0, "since": None}}
        _ask(("fact", kind, object_id, key))
        return {"computing": {"state": Fact.State.QUEUED, "progress": 0.0, "since": timezone.now()}}
    if fact.state == Fact.State.READY:
        return {"value": fact.value}
    if fact.state == Fact.State.FAILED:
        return {"error": fact.error}
    return {
        "computing": {
            "state": fact.state,
            "progress": fact.progress,
            "since": fact.started_at or fact.requested_at,
        }
    }


def facts_read(kind: str, object_ids: list[int], key: str = "") -> dict[int, Any]:
    """The stored values of ``kind`` for many objects in one query ({id: value}); the
    missing ones (never asked, or lost) are noted as asked."""
    rows = list(
        Fact.objects.filter(kind=kind, object_id__in=object_ids, key=key).values_list(
            "object_id", "state", "value", "requested_at"
        )
    )
    ready = {pk: value for pk, state, value, _ in rows if state == Fact.State.READY}
    waiting = {pk for pk, state, _, since in rows if not _stale(state, since)}
    for pk in object_ids:
        if pk not in ready and pk not in waiting:
            _ask(("fact", kind, pk, key))
    return ready


def flag_taint_read(flag: Flag) -> dict:
    """``{}`` when the flag's taint is stored; ``{"computing": {"state", "since"}}`` while
    queued or running (noted as asked again when that has lasted longer than STALE: its
    message or its worker was lost); ``{"error": ...}`` when computing it failed."""
    state = flag.taint_state
    if state == Flag.TaintState.READY:
        return {}
    if state == Flag.TaintState.FAILED:
        return {"error": flag.taint_error}
    since = flag.taint_requested_at
    if since is None or since < timezone.now() - STALE:
        _ask(("taint", flag.pk))
        state, since = Flag.TaintState.QUEUED, timezone.now()
    return {"computing": {"state": state, "since": since}}

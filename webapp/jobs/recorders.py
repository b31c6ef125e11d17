"""Job recorders by name: the function the engine calls when a job reaches a terminal
state, which turns its manifest into artifact rows (or marks the artifact unbuilt).

A Job row stores the recorder's short, stable name ("pool", "mixture.version"...), never
its import path: a row outlives the code that wrote it, and a module moved or a function
renamed must not strand the jobs recorded before (the dotted paths once stored needed a
data migration for a mere split of a module). The catalog registers its recorders with
``register`` on each function, and its app's ``ready()`` imports those modules, so every
process that runs Django (web, worker, command) has the whole registry before a job
finishes. The jobs app never imports the catalog.

A recorder is called as ``recorder(job=job, manifest=manifest)`` inside the transaction
that marks the job succeeded (``manifest`` is the stage's manifest) or failed or
cancelled (``manifest`` is None).
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured

Recorder = Callable[..., None]

_RECORDERS: dict[str, Recorder] = {}


class UnknownRecorder(LookupError):
    """A job names a recorder no module registered (a name mistyped, or a recorder removed
    while jobs that name it were still stored)."""

    def __init__(self, name: str) -> None:
        known = ", ".join(sorted(_RECORDERS)) or "none"
        super().__init__(f"no recorder is registered under the name {name!r} (known: {known})")
        self.name = name


def _where(fn: Recorder) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def register(name: str) -> Callable[[Recorder], Recorder]:
    """Decorator: record the function as the recorder named ``name``. A name names one
    function: a second function under a taken name is a configuration error, raised at
    import (the same function imported again, e.g. by a reload, is not a second one)."""
    if not name or name != name.strip():
        raise ImproperlyConfigured(
            f"recorder name {name!r}: a name is not empty and has no surrounding spaces"
        )

    def decorate(fn: Recorder) -> Recorder:
        taken = _RECORDERS.get(name)
        if taken is not None and _where(taken) != _where(fn):
            raise ImproperlyConfigured(
                f"recorder name {name!r} is taken by {_where(taken)}; {_where(fn)} needs "
                "another name"
            )
        _RECORDERS[name] = fn
        return fn

    return decorate


def recorder(name: str) -> Recorder:
    """The recorder registered under ``name``; ``UnknownRecorder`` if none is."""
    try:
        return _RECORDERS[name]
    except KeyError:
        raise UnknownRecorder(name) from None


def names() -> frozenset[str]:
    """Every registered name (complete once the apps are ready)."""
    return frozenset(_RECORDERS)

"""What the catalog refuses, as exceptions whose message is fit for a page. Services raise
them; views turn them into a 400 (or a 403 for RunPermissionError). ``refused`` is the one
translation of shardcore's errors into them, at the service boundary."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from shardcore.errors import ShardcoreError


class CatalogError(Exception):
    """A request the catalog refuses, with a message that says why."""


class RunPermissionError(CatalogError):
    """The user may not write this run: it belongs to someone else (a 403)."""


class RunSwitchedError(CatalogError):
    """A progress report read a version the run no longer reads at those samples: it
    switched version earlier (HTTP 409); the trainer resumes from its checkpoint at the
    switch and reads the run's segments."""


class SourcePathError(CatalogError):
    """A source location outside the allowed roots, or one Shardyard cannot read."""


# What a service catches from shardcore: its own errors (bad input, a bad manifest, corrupt
# data), and what reading user-named files raises (a ValueError from a parser, an OSError).
SHARDCORE_ERRORS = (ShardcoreError, ValueError, OSError)

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def refused(what: str) -> Iterator[None]:
    """``with refused("cannot build pool 'x'"):`` turns shardcore's refusals into a
    CatalogError ``"<what>: <the error>"``; a CatalogError passes through unchanged."""
    try:
        yield
    except CatalogError:
        raise
    except SHARDCORE_ERRORS as exc:
        raise CatalogError(f"{what}: {exc}") from exc


def boundary(service: Callable[P, R]) -> Callable[P, R]:
    """A service or selector a view calls: what shardcore refuses inside it leaves as a
    CatalogError with shardcore's own message, so views catch CatalogError alone."""

    @functools.wraps(service)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return service(*args, **kwargs)
        except CatalogError:
            raise
        except SHARDCORE_ERRORS as exc:
            raise CatalogError(str(exc)) from exc

    return call


def checked(read: Callable[[], R]) -> R:
    """A value a form or the API was sent, read by ``read`` (``limits.parse`` and a
    ``shardcore.limits`` check): what the library refuses leaves as a CatalogError with its
    own message, which the form field or serializer shows as its validation error."""
    try:
        return read()
    except SHARDCORE_ERRORS as exc:
        raise CatalogError(str(exc)) from exc

"""Counting megatron-core's index builders: a bench that claims the export's cache was hit
shows that no builder ran, and a control with other arguments shows that they did."""

from __future__ import annotations

from typing import Any


def count_calls(targets: list[tuple[Any, str]]) -> dict[str, int]:
    """Wrap each ``(module, function name)`` so that every call adds one to the returned
    counter's ``"n"``; the wrapped function still runs."""
    calls = {"n": 0}

    def counted(fn):
        def wrapper(*a, **k):
            calls["n"] += 1
            return fn(*a, **k)

        return wrapper

    for mod, name in targets:
        setattr(mod, name, counted(getattr(mod, name)))
    return calls

"""What every executor shares: the interface, and what an output already holds of a plan
(its saved plan, its finished manifest, its units' markers)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from shardcore import units
from shardcore.errors import InputError
from shardcore.manifest import is_complete, read_manifest

OnUnitDone = Callable[[dict[str, Any], dict[str, Any]], None]


class Executor(ABC):
    """Runs a plan to its manifest (or submits it, returning None when told not to wait)."""

    name = ""

    @abstractmethod
    def run(self, plan: units.Plan, *, on_unit_done: OnUnitDone | None = None) -> dict | None:
        """Run (or submit) every unit not done yet, then finalize; the manifest, or None
        when the work was only submitted (``--no-wait``, ``--dry-run``)."""


def resume(plan: units.Plan) -> dict[str, Any] | None:
    """What the output already holds of ``plan``: its manifest when the artifact is finished
    (None when not), refusing an output whose saved plan is another one (a build with other
    inputs or parameters)."""
    try:
        saved = units.load_plan(plan.out).to_json()
    except FileNotFoundError:
        saved = None
    wanted = json.loads(json.dumps(plan.to_json()))
    if saved is not None and saved != wanted:
        raise InputError(
            f"{plan.out} holds a build of other inputs or parameters; remove it or choose "
            "another --out"
        )
    if is_complete(plan.out):
        if saved is None:
            raise InputError(f"{plan.out} already holds a finished artifact; choose another --out")
        return read_manifest(plan.out)
    return None


def undone(plan: units.Plan, phase: int) -> list[int]:
    """The indices (in the phase) of the units of ``phase`` without a completion marker."""
    return [
        i
        for i, unit in enumerate(plan.phases[phase])
        if units.unit_result(plan.out, unit["id"]) is None
    ]

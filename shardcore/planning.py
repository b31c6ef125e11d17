"""Planning as a job's work: a stage whose one unit makes another stage's plan.

A plan over a few inputs is made where it is asked for (a command, a web request). One that
reads every document's metadata, such as a pool's filter over billions of documents, is
work for a worker: ``deferred`` returns the plan of that work. Its unit calls the *planner*
(the dotted path of a function returning a ``units.Plan``, with JSON keyword arguments) and
saves the plan it returns next to that plan's output (``units.save_plan``: its files, then
``_plan.json``); its finalize writes the planning's own manifest, which names the plan.
Whoever deferred it then starts the planned job from ``units.load_plan(target)``.

A planner whose reading is itself large work (a pool's filter over every input's documents)
contributes *preparatory phases* (``Prepared``): units that run before the plan unit, each
on part of the inputs, writing what they find under the planning's output, in a directory
the plan unit hands the planner (``Steps.keyword``). The planning's phases are then
``[*prepared phases, [{"id": "plan"}]]``; the steps (a ``Steps`` named by dotted path in the
plan, so a worker finds them) run their units and declare what each reads, so that on
object storage a unit fetches exactly those files and lists nothing.

The planning job's output is ``_pass1/planning`` inside the planned artifact's (scratch:
the artifact's finalize removes ``_pass1``). A planner's refusal (a filter that selects
nothing) is the unit's error, said by the job. Rerunning the unit plans again and writes
the same bytes: a plan depends on its inputs, never on the host.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardcore import atomic, storage, units
from shardcore.errors import InputError
from shardcore.manifest import MANIFEST_NAME

STAGE = "planning"
DIR = "_pass1/planning"
FORMAT = 1


@dataclass(frozen=True)
class Steps:
    """The preparatory units' code: ``run(plan, unit) -> stats`` (``plan``: the planning's,
    its output local), ``reads(plan, unit)`` (the files of the planning's output a unit
    reads, relative to it; asked of the plan unit too), and where the planner finds what
    they wrote: ``directory`` (relative to the planning's output), given to the planner as
    its argument ``keyword``."""

    run: Callable[[units.Plan, dict[str, Any]], dict[str, Any]]
    reads: Callable[[units.Plan, dict[str, Any]], list[str]]
    keyword: str
    directory: str


@dataclass(frozen=True)
class Prepared:
    """Phases of units that run before the plan unit (``Steps``, named by ``steps``, the
    dotted path of a ``Steps``). Their ids must not be ``plan``."""

    steps: str
    phases: list[list[dict[str, Any]]]


def deferred(
    *,
    planner: str,
    kwargs: dict[str, Any],
    out: str,
    what: str,
    prepare: Prepared | None = None,
) -> units.Plan:
    """The plan of planning ``out`` by ``planner(**kwargs)`` (whose plan must have ``out``
    as its output); ``what`` names the work for its job's log and errors. ``prepare``: the
    phases that run first (the planner then gets their directory as one more argument)."""
    _planner(planner)  # refused now, not in the worker
    target = storage.resolve(out)
    params = {"planner": planner, "kwargs": kwargs, "target": target, "what": what}
    phases: list[list[dict[str, Any]]] = []
    if prepare is not None:
        _steps(prepare.steps)
        if any(unit["id"] == "plan" for phase in prepare.phases for unit in phase):
            raise ValueError("a preparatory unit may not be called 'plan'")
        params["steps"] = prepare.steps  # (absent otherwise: earlier plans' params stay)
        phases = [phase for phase in prepare.phases if phase]
    return units.Plan(STAGE, storage.join(target, DIR), params, [*phases, [{"id": "plan"}]])


def _steps(path: str) -> Steps:
    """The ``Steps`` a dotted path names."""
    module, _, name = path.rpartition(".")
    found = getattr(importlib.import_module(module), name, None) if module else None
    if not isinstance(found, Steps):
        raise ValueError(f"steps {path!r} are not planning steps")
    return found


def _planner(planner: str) -> Callable[..., Any]:
    """The function a dotted path names."""
    module, _, name = planner.rpartition(".")
    found = getattr(importlib.import_module(module), name, None) if module else None
    if not callable(found):
        raise ValueError(f"planner {planner!r} is not a function")
    return found


def _run(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    steps = _steps(plan.params["steps"]) if "steps" in plan.params else None
    kwargs = plan.params["kwargs"]
    try:
        if unit["id"] != "plan":
            if steps is None:
                raise RuntimeError(f"{plan.out}: unit {unit['id']!r} of a planning without steps")
            return steps.run(plan, unit)
        if steps is not None:
            kwargs = {**kwargs, steps.keyword: os.path.join(plan.out, steps.directory)}
        made = _planner(plan.params["planner"])(**kwargs)
    except InputError as exc:  # said as the request would have said it, naming the work
        raise type(exc)(f"{plan.params['what']}: {exc}") from exc
    target = plan.params["target"]
    if storage.resolve(made.out) != target:
        raise RuntimeError(
            f"{plan.params['what']}: the planner's plan writes {made.out}, not {target}"
        )
    units.save_plan(made)
    return {"stage": made.stage, "phases": len(made.phases), "units": made.num_units}


def _reads(plan: units.Plan, unit: dict[str, Any]) -> list[str]:
    """What a unit reads of the planning's output: the steps say for theirs and the plan
    unit's; a plan unit without steps reads nothing of it."""
    if "steps" not in plan.params:
        return []
    return _steps(plan.params["steps"]).reads(plan, unit)


def _finalize_reads(plan: units.Plan, stats: list[dict[str, Any]]) -> list[str]:
    """Finalize reads the units' stats only."""
    return []


def _finalize(plan: units.Plan, stats: list[dict[str, Any]]) -> dict[str, Any]:
    made = stats[-1]  # the plan unit's (the preparatory units' come first)
    manifest = {
        "kind": STAGE,
        "format": FORMAT,
        "plan": storage.join(plan.params["target"], units.PLAN_NAME),
        **made,
    }
    # plan.out is local here (a remote output's finalize runs in its work directory).
    atomic.write_text(
        Path(plan.out) / MANIFEST_NAME, json.dumps(manifest, indent=1, sort_keys=True)
    )
    return manifest


units.register_stage(
    STAGE, run_unit=_run, finalize=_finalize, reads=_reads, finalize_reads=_finalize_reads
)

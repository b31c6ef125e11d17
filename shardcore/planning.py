"""Planning as a job's work: a stage whose one unit makes another stage's plan.

A plan over a few inputs is made where it is asked for (a command, a web request). One that
reads every document's metadata, such as a pool's filter over billions of documents, is
work for a worker: ``deferred`` returns the plan of that work. Its unit calls the *planner*
(the dotted path of a function returning a ``units.Plan``, with JSON keyword arguments) and
saves the plan it returns next to that plan's output (``units.save_plan``: its files, then
``_plan.json``); its finalize writes the planning's own manifest, which names the plan.
Whoever deferred it then starts the planned job from ``units.load_plan(target)``.

The planning job's output is ``_pass1/planning`` inside the planned artifact's (scratch:
the artifact's finalize removes ``_pass1``). A planner's refusal (a filter that selects
nothing) is the unit's error, said by the job. Rerunning the unit plans again and writes
the same bytes: a plan depends on its inputs, never on the host.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shardcore import atomic, storage, units
from shardcore.errors import InputError
from shardcore.manifest import MANIFEST_NAME

STAGE = "planning"
DIR = "_pass1/planning"
FORMAT = 1


def deferred(*, planner: str, kwargs: dict[str, Any], out: str, what: str) -> units.Plan:
    """The plan of planning ``out`` by ``planner(**kwargs)`` (whose plan must have ``out``
    as its output); ``what`` names the work for its job's log and errors."""
    _planner(planner)  # refused now, not in the worker
    target = storage.resolve(out)
    return units.Plan(
        STAGE,
        storage.join(target, DIR),
        {"planner": planner, "kwargs": kwargs, "target": target, "what": what},
        [[{"id": "plan"}]],
    )


def _planner(planner: str) -> Callable[..., Any]:
    """The function a dotted path names."""
    module, _, name = planner.rpartition(".")
    found = getattr(importlib.import_module(module), name, None) if module else None
    if not callable(found):
        raise ValueError(f"planner {planner!r} is not a function")
    return found


def _run(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    try:
        made = _planner(plan.params["planner"])(**plan.params["kwargs"])
    except InputError as exc:  # said as the request would have said it, naming the work
        raise type(exc)(f"{plan.params['what']}: {exc}") from exc
    target = plan.params["target"]
    if storage.resolve(made.out) != target:
        raise RuntimeError(
            f"{plan.params['what']}: the planner's plan writes {made.out}, not {target}"
        )
    units.save_plan(made)
    return {"stage": made.stage, "phases": len(made.phases), "units": made.num_units}


def _finalize(plan: units.Plan, stats: list[dict[str, Any]]) -> dict[str, Any]:
    (made,) = stats
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


units.register_stage(STAGE, run_unit=_run, finalize=_finalize)

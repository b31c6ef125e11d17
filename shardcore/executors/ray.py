"""The ``ray`` executor: one Ray task per unit, phase after phase, then a finalize task.

The command attaches to a running cluster (``--ray-address``, e.g. ``auto`` on a node of it
or ``ray://head:10001``) or starts a local one. Each task is named after the stage, the
phase and the unit (``pool p2 bucket-00017``), so the dashboard's task list shows the build
by stage; it asks for the unit's CPUs and memory as resources (``--cpus-per-task``,
``--mem``). A task whose worker dies (the process killed, the node lost) is run again by Ray
(``max_retries``, ``--retries``): the unit rewrites the same bytes, and a unit already
marked done is not run again. The units read the plan from the artifact's storage and write
their markers there, as under every executor; the driver needs no database either. Each
unit's start and end are lines of its worker's log (``unit ... started``, ``done in``).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from shardcore import units
from shardcore.errors import InputError
from shardcore.executors.base import Executor, OnUnitDone, resume, undone
from shardcore.manifest import read_manifest
from shardcore.sizes import parse_size


def _run_units(out: str, phase: int, index: int) -> dict[str, Any]:
    """One unit of the plan saved in ``out`` (what a Ray task runs); its start and end go
    to the worker's log, as under Slurm."""
    plan = units.load_plan(out)
    unit = plan.phases[phase][index]
    name = f"{plan.stage} p{phase + 1} unit {index} {unit['id']}"
    print(f"{name}: started", flush=True)
    start = time.monotonic()
    stats = units.run_unit(plan, unit["id"], unit=unit)
    print(f"{name}: done in {time.monotonic() - start:.1f}s", flush=True)
    return stats


def _finalize(out: str) -> None:
    """Write the manifest (read back by the driver: a manifest may hold lazy tables that
    do not travel)."""
    units.finalize(units.load_plan(out))


class RayExecutor(Executor):
    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        cpus_per_unit: int = 1,
        memory: str | None = None,
        retries: int = 3,
    ) -> None:
        self.address = address
        self.cpus = cpus_per_unit
        self.memory = parse_size(memory) if memory else None
        self.retries = retries

    def run(
        self, plan: units.Plan, *, on_unit_done: OnUnitDone | None = None
    ) -> dict[str, Any] | None:
        try:
            import ray
        except ImportError as exc:
            raise InputError(
                "--executor ray needs the ray package where the command runs: "
                "pip install 'shardyard[ray]' (or the cluster's own ray version)"
            ) from exc

        finished = resume(plan)
        if finished is not None:
            print(f"{plan.out}: finished earlier (its manifest is there)", file=sys.stderr)
            return finished
        units.save_plan(plan)
        started = not ray.is_initialized()
        if started:
            ray.init(address=self.address, log_to_driver=False, configure_logging=False)
        try:
            resources: dict[str, Any] = {"num_cpus": self.cpus, "max_retries": self.retries}
            if self.memory:
                resources["memory"] = self.memory
            unit_task, final_task = ray.remote(_run_units), ray.remote(_finalize)
            for p, phase in enumerate(plan.phases):
                refs = {
                    unit_task.options(
                        name=f"{plan.stage} p{p + 1} {phase[i]['id']}", **resources
                    ).remote(plan.out, p, i): phase[i]
                    for i in undone(plan, p)
                }
                while refs:
                    ready, _ = ray.wait(list(refs), num_returns=1)
                    unit = refs.pop(ready[0])
                    stats = ray.get(ready[0])
                    if on_unit_done:
                        on_unit_done(unit, stats)
            final = final_task.options(name=f"{plan.stage} finalize", **resources)
            ray.get(final.remote(plan.out))
            return read_manifest(plan.out)
        finally:
            if started:
                ray.shutdown()

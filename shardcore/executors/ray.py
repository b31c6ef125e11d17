"""The ``ray`` executor: one Ray task per unit, phase after phase, then a finalize task.

The command attaches to a running cluster (``--ray-address``, e.g. ``auto`` on a node of it
or ``ray://head:10001``) or starts a local one. Each task is named after the stage, the
phase and the unit (``pool p2 bucket-00017``), so the dashboard's task list shows the build
by stage; it asks for the unit's CPUs and memory as resources (``--cpus-per-task``,
``--mem``). A task whose worker dies (the process killed, the node lost) is run again by Ray
(``max_retries``, ``--retries``): the unit rewrites the same bytes, and a unit already
marked done is not run again. The units read the plan from the artifact's storage and write
their markers there, as under every executor; the driver needs no database either.
"""

from __future__ import annotations

import sys
from typing import Any

from shardcore import units
from shardcore.executors.base import Executor, OnUnitDone, resume, undone
from shardcore.sizes import parse_size


def _run_units(out: str, phase: int, index: int) -> dict[str, Any]:
    """One unit of the plan saved in ``out`` (what a Ray task runs)."""
    plan = units.load_plan(out)
    unit = plan.phases[phase][index]
    return units.run_unit(plan, unit["id"], unit=unit)


def _finalize(out: str) -> dict[str, Any]:
    return units.finalize(units.load_plan(out))


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
        import ray

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
            task = ray.remote(_run_units).options(**resources)
            for p, phase in enumerate(plan.phases):
                refs = {
                    task.options(name=f"{plan.stage} p{p + 1} {phase[i]['id']}").remote(
                        plan.out, p, i
                    ): phase[i]
                    for i in undone(plan, p)
                }
                while refs:
                    ready, _ = ray.wait(list(refs), num_returns=1)
                    unit = refs.pop(ready[0])
                    stats = ray.get(ready[0])
                    if on_unit_done:
                        on_unit_done(unit, stats)
            final = ray.remote(_finalize).options(
                name=f"{plan.stage} finalize",
                max_retries=self.retries,
                **({"memory": self.memory} if self.memory else {}),
            )
            return ray.get(final.remote(plan.out))
        finally:
            if started:
                ray.shutdown()

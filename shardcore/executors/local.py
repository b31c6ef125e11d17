"""The ``local`` executor: the units run in processes of the command (``units.run_local``)."""

from __future__ import annotations

from typing import Any

from shardcore import units
from shardcore.executors.base import Executor, OnUnitDone


class LocalExecutor(Executor):
    name = "local"

    def __init__(self, *, workers: int = 1) -> None:
        self.workers = workers

    def run(
        self, plan: units.Plan, *, on_unit_done: OnUnitDone | None = None
    ) -> dict[str, Any] | None:
        return units.run_local(plan, workers=self.workers, on_unit_done=on_unit_done)

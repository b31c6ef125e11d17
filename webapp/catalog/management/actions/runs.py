"""Actions on training runs: register, report progress, ask where to resume."""

from __future__ import annotations

import argparse
import json
from typing import Any

from webapp.catalog import selectors
from webapp.catalog.management.actions.base import Action
from webapp.catalog.services import runs


class RunRegister(Action):
    name = "run-register"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("mixture_version_id", type=int)

    def run(self, o: dict[str, Any]) -> str:
        run = runs.run_register(name=o["name"], mixture_version_id=o["mixture_version_id"])
        return f"run {run.pk} {run.name}"


class RunProgress(Action):
    name = "run-progress"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_id", type=int)
        parser.add_argument("step", type=int)
        parser.add_argument("consumed_samples", type=int)

    def run(self, o: dict[str, Any]) -> str:
        run = runs.run_progress_record(
            run_id=o["run_id"], step=o["step"], consumed_samples=o["consumed_samples"]
        )
        return f"run {run.pk}: step {run.last_step}, {run.consumed_samples} samples"


class RunResume(Action):
    name = "run-resume"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_id", type=int)

    def run(self, o: dict[str, Any]) -> str:
        return json.dumps(selectors.run_resume_position(run_id=o["run_id"]), sort_keys=True)

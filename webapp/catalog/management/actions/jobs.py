"""Actions on jobs: cancel, retry, reap lost units; and start a scrub."""

from __future__ import annotations

import argparse
from typing import Any

from webapp.catalog.management.actions.base import Action, launched
from webapp.catalog.scrub import scrub_start
from webapp.jobs import services as jobs


class JobCancel(Action):
    name = "job-cancel"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("job_id", type=int)

    def run(self, o: dict[str, Any]) -> str:
        job = jobs.job_cancel(job_id=o["job_id"])
        return f"job {job.pk} {job.state}"


class JobRetry(Action):
    name = "job-retry"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("job_id", type=int)
        parser.add_argument(
            "--include-running", action="store_true", help="also rerun units whose worker is gone"
        )

    def run(self, o: dict[str, Any]) -> str:
        job = jobs.job_retry(job_id=o["job_id"], include_running=o["include_running"])
        return f"job {job.pk} {job.state}"


class Scrub(Action):
    name = "scrub"
    help = "start a scrub job: re-verify every built artifact's checksums now"

    def run(self, o: dict[str, Any]) -> str:
        return f"scrub: {launched(scrub_start().pk)}"


class JobsReap(Action):
    name = "jobs-reap"
    help = "requeue units of active jobs claimed longer ago than the lease"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--lease", type=int, help="seconds (default: SHARDYARD_UNIT_LEASE)")

    def run(self, o: dict[str, Any]) -> str:
        reaped = jobs.job_reap(lease_seconds=o["lease"])
        return (
            "\n".join(
                f"job {job.pk}: {job.log_tail.splitlines()[-1].split(' ', 2)[-1]}" for job in reaped
            )
            or "no lost units"
        )

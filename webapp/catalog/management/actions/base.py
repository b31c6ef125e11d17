"""What every ``manage.py catalog`` action is, and the line a launched job prints."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandError

from webapp.jobs.models import Job, JobState


class Action:
    name = ""
    help: str | None = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The action's arguments (none by default)."""

    def run(self, o: dict[str, Any]) -> str:
        raise NotImplementedError


def launched(job_id: int | None) -> str:
    """'job N queued', or a CommandError when the launch failed (e.g. the broker is down:
    the job is failed with the reason and can be retried) or made no job."""
    if job_id is None:
        raise CommandError("the launch made no job")
    job = Job.objects.get(pk=job_id)
    if job.state == JobState.FAILED:
        raise CommandError(f"job {job.pk} failed at launch: {job.error}")
    return f"job {job.pk} {job.state}"

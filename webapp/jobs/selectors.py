"""Reads for jobs: a page of jobs and a job's page (progress, units, failures, bad input),
each in a fixed number of queries whatever the number of units."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, QuerySet

from webapp.jobs.models import ACTIVE_JOB_STATES, Job, JobState, JobUnit, UnitState
from webapp.paging import page_of


def job_page(*, state: str = "", page=1) -> dict:
    """A page of jobs, newest first, without the plan (it can hold thousands of units):
    ``state`` "active" (queued or running), a job state, or anything else for all; with
    the ``state`` and the ``states`` to choose from, each once."""
    qs = Job.objects.defer("plan", "bad_input", "log_tail").order_by("-created_at")
    if state == "active":
        qs = qs.filter(state__in=ACTIVE_JOB_STATES)
    elif state in JobState.values:
        qs = qs.filter(state=state)
    return {**page_of(qs, page), "state": state, "states": ["active", *JobState.values]}


def job_running(*, limit: int = 10) -> list[Job]:
    """The newest active jobs, without their plans."""
    return list(
        Job.objects.filter(state__in=ACTIVE_JOB_STATES)
        .defer("plan", "bad_input", "log_tail")
        .order_by("-created_at")[:limit]
    )


@dataclass
class JobDetail:
    job: Job
    units: list[JobUnit]  # in plan order
    unit_states: dict[str, int]
    failed_units: list[JobUnit]
    workers: list[str]


def job_detail(*, job_id: int, units_limit: int = 200) -> JobDetail:
    """Four queries: the job, unit counts by state, the first ``units_limit`` units in
    plan order and the failed units (up to ``units_limit``)."""
    job = Job.objects.defer("plan").get(pk=job_id)
    states = dict(
        JobUnit.objects.filter(job_id=job_id)
        .values_list("state")
        .annotate(n=Count("id"))
        .values_list("state", "n")
    )
    units = list(JobUnit.objects.filter(job_id=job_id).order_by("phase", "id")[:units_limit])
    failed = list(
        JobUnit.objects.filter(job_id=job_id, state=UnitState.FAILED).order_by("id")[:units_limit]
    )
    return JobDetail(
        job=job,
        units=units,
        unit_states=states,
        failed_units=failed,
        workers=sorted({u.worker for u in units if u.worker}),
    )


def job_units(*, job_id: int, state: str | None = None) -> QuerySet[JobUnit]:
    qs = JobUnit.objects.filter(job_id=job_id).order_by("phase", "id")
    return qs.filter(state=state) if state else qs

"""Reads for jobs: the jobs list and a job's page (progress, units, failures, bad input),
each in a fixed number of queries whatever the number of units."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, QuerySet

from webapp.jobs.models import ACTIVE_JOB_STATES, Job, JobUnit, UnitState


def job_list(
    *, state: str | None = None, kind: str | None = None, limit: int = 50
) -> QuerySet[Job]:
    """Newest first, without the plan (it can hold thousands of units)."""
    qs = Job.objects.defer("plan").order_by("-created_at")
    if state:
        qs = qs.filter(state=state)
    if kind:
        qs = qs.filter(kind=kind)
    return qs[:limit]


def job_active_count() -> int:
    return Job.objects.filter(state__in=ACTIVE_JOB_STATES).count()


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

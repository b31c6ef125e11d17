"""Reads for jobs: a page of jobs and a job's page (progress, units, failures, bad input),
each in a fixed number of queries whatever the number of units."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, QuerySet

from webapp.jobs.common import bad_input_sum
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


def job_rows(*, listing: bool = False, state: str = "") -> QuerySet[Job]:
    """Jobs newest first without their plans: the API pages this query. A listing leaves
    out the bad input and log tail too, and holds the jobs in ``state`` when given."""
    qs = Job.objects.defer("plan").order_by("-created_at")
    if listing:
        qs = qs.defer("plan", "bad_input", "log_tail")
        if state:
            qs = qs.filter(state=state)
    return qs


def job_row(*, job_id: int) -> Job | None:
    """The job's id alone, read before a read or a write on it, or None when there is none
    (the job engine knows no catalog: who asked says what is missing)."""
    return Job.objects.only("id").filter(pk=job_id).first()


def job_running(*, limit: int = 10) -> list[Job]:
    """The newest active jobs, without their plans."""
    return list(
        Job.objects.filter(state__in=ACTIVE_JOB_STATES)
        .defer("plan", "bad_input", "log_tail")
        .order_by("-created_at")[:limit]
    )


BAD_INPUT_UNITS = 500  # units whose bad input the page of a running job sums


@dataclass
class JobDetail:
    job: Job
    units: list[JobUnit]  # in plan order
    unit_states: dict[str, int]
    failed_units: list[JobUnit]
    workers: list[str]


def job_detail(*, job_id: int, units_limit: int = 200, units_offset: int = 0) -> JobDetail:
    """Four queries: the job, unit counts by state, ``units_limit`` units in plan order
    from position ``units_offset`` (the (job, index) index: any page costs the same) and the failed
    units (up to ``units_limit``); a fifth while an active job has bad input."""
    job = Job.objects.defer("plan").get(pk=job_id)
    if job.is_active and job.bad_lines:
        # Summed when the job ends; while it runs, from the first units that refused input.
        job.bad_input = bad_input_sum(job_id=job_id, limit=BAD_INPUT_UNITS)
    states = dict(
        JobUnit.objects.filter(job_id=job_id)
        .values_list("state")
        .annotate(n=Count("id"))
        .values_list("state", "n")
    )
    # Without their specs and stats (JSON that can be large): the page shows neither.
    shown = JobUnit.objects.filter(job_id=job_id).defer("spec", "stats").order_by("index")
    # Positions are dense (0..units_total-1): a page starts at an index, not at an OFFSET
    # the database would have to count through.
    units = list(shown.filter(index__gte=units_offset)[:units_limit])
    failed = list(shown.filter(state=UnitState.FAILED)[:units_limit])
    return JobDetail(
        job=job,
        units=units,
        unit_states=states,
        failed_units=failed,
        workers=sorted({u.worker for u in units if u.worker}),
    )

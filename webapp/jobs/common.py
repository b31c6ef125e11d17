"""What the job engine's modules share: its errors, the job's log, a job's terminal record
(its recorder, with the job's bad input summed over its units) and database retries."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import psycopg
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from shardcore.storage import artifact_cache
from shardcore.units import merge_bad_input
from webapp.jobs.models import ACTIVE_JOB_STATES, Job, JobState, JobUnit
from webapp.jobs.recorders import UnknownRecorder, recorder

log = logging.getLogger("webapp.jobs.services")

LOG_TAIL_LINES = 200


class JobError(Exception):
    """A request the job's state does not allow (e.g. retrying a succeeded job)."""


class TransientUnitError(Exception):
    """Raised to the task when a unit hit a transient error and was put back in the queue."""


# A dropped or terminated database connection: Django's errors, and the driver's own where
# Django lets them through unwrapped (closing a server-side cursor of ``.iterator()``).
DB_DROPPED: tuple[type[BaseException], ...] = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


def transient_errors() -> tuple[type[BaseException], ...]:
    """Errors worth retrying after a pause: the database or broker went away for a moment.
    Everything else is a permanent failure recorded on the unit and the job."""
    import redis.exceptions

    return (
        *DB_DROPPED,
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        ConnectionError,
        TimeoutError,
    )


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def log_line(job: Job, message: str) -> None:
    """Append a line to the job's log tail (the caller holds the job row and saves it)."""
    line = f"{timezone.now():%Y-%m-%d %H:%M:%S} {message}"
    lines = (job.log_tail.splitlines() if job.log_tail else []) + [line]
    job.log_tail = "\n".join(lines[-LOG_TAIL_LINES:])


def unit_lease(seconds: int | None = None) -> timedelta:
    """How long a claim holds without a heartbeat: a running unit whose last heartbeat is
    older than this lost its worker."""
    return timedelta(seconds=settings.SHARDYARD_UNIT_LEASE if seconds is None else seconds)


def with_db_retry(what: str, fn):
    """Run ``fn(errors)`` (a transaction of its own), retrying on OperationalError or
    InterfaceError (a dropped or terminated connection) on a fresh connection, with
    backoff, up to SHARDYARD_DB_RETRIES times. ``errors`` lists the failures so far, for
    the record. Inside an outer transaction nothing is retried (it is broken already)."""

    errors: list[str] = []
    while True:
        try:
            return fn(errors)
        except DB_DROPPED as exc:
            if len(errors) >= settings.SHARDYARD_DB_RETRIES or connection.in_atomic_block:
                raise
            errors.append(describe(exc).splitlines()[0])
            log.warning("%s: %s; retrying on a new connection", what, errors[-1])
            connection.close()
            time.sleep(min(8.0, 0.25 * 2 ** len(errors)))


def lock_holder_guard() -> None:
    """Inside a transaction that locks the job row: should this worker's host drop off the
    network mid-transaction, Postgres ends the session (and lets go of the lock) once it
    has been idle in the transaction for a lease, instead of keeping the job's other
    completions waiting until TCP gives up on the connection (hours)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
                [f"{int(unit_lease().total_seconds() * 1000)}ms"],
            )


def job_fail(job_id: int, error: str) -> str:
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.state in ACTIVE_JOB_STATES:
            job.state = JobState.FAILED
            job.error = error
            job.finished_at = timezone.now()
            log_line(job, error)
            record(job, None)
            job.save()
    return "failed"


def record(job: Job, manifest: dict | None) -> None:
    """Sum the job's bad input over its units into ``job.bad_input`` and call the job's
    recorder (a catalog service, by its registered name) inside the caller's transaction;
    the caller holds the job row and saves it. The checked local copies of remote artifacts
    the recorder reads (a pool's quality, a schedule's) are released when it returns, so a
    long-lived worker never pins them in its cache.

    A recorder name nobody registered raises ``UnknownRecorder`` on success (finalize then
    fails the job with its message); on failure or cancel it is logged instead, so that the
    job still ends rather than staying active forever."""
    job.bad_input = bad_input_sum(job_id=job.pk)
    if not job.recorder:
        return
    try:
        run = recorder(job.recorder)
    except UnknownRecorder as exc:
        if manifest is not None:
            raise
        log_line(job, f"nothing recorded: {exc}")
        return
    with artifact_cache.artifact_scope():
        run(job=job, manifest=manifest)


def bad_input_sum(*, job_id: int, limit: int | None = None) -> dict:
    """The job's bad input: the reports of its units that refused input, summed (the
    first ``limit`` such units in plan order when given). Reads only those units' rows."""
    qs = (
        JobUnit.objects.filter(job_id=job_id, bad_lines__gt=0)
        .order_by("index")
        .values_list("stats", flat=True)
    )
    if limit is not None:
        qs = qs[:limit]
    total: dict = {}
    for stats in qs.iterator(chunk_size=500):
        if stats and stats.get("bad_input"):
            total = merge_bad_input(total, stats["bad_input"])
    return total

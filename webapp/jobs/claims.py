"""Running units and finalize steps: claim, heartbeat, outcome.

A claim is ``UPDATE ... WHERE state = 'queued'`` that must change exactly one row; the unit
row then carries all the unit needs (its spec; the plan's header is cached per worker
process, see ``dispatch.job_plan``). A success is one statement on Postgres (its own
transaction): the job's counters in place (``units_done = units_done + 1, tokens = tokens +
n, ..., phase_left = phase_left - 1``, returning the units left in the phase) provided the
unit is still ``state = 'running' AND attempts = <claimed attempt>`` (a duplicate or stale
delivery records nothing), and the unit's row. The success that takes the phase to 0 then
starts the next phase (``phase_advance``; the sweep does it should that worker die first).
Nothing reads or rewrites the plan, the job's row is locked for one statement, and no
success counts rows: a unit costs the same in a job of a thousand units or a million.
Claims and successes commit asynchronously: what a crash of the database server loses of
them, the lease heals (see ``claim`` and ``_SUCCEED_SQL``). A failure is rare and ends the
job: it locks the job row like the operator's actions do.
"""

from __future__ import annotations

import json
import logging
import threading
import traceback
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from shardcore import units
from webapp.jobs import dispatch
from webapp.jobs.common import (
    DB_DROPPED,
    TransientUnitError,
    describe,
    job_fail,
    lock_holder_guard,
    log_line,
    record,
    transient_errors,
    with_db_retry,
)
from webapp.jobs.models import ACTIVE_JOB_STATES, Job, JobState, JobUnit, UnitState
from webapp.jobs.recorders import UnknownRecorder

log = logging.getLogger("webapp.jobs.services")


def job_unit_execute(*, unit_id: int, worker: str) -> str:
    """Claim the unit, run it through shardcore and record the outcome. Returns
    "skipped" (not claimable: finished, cancelled, or another delivery owns it; or its claim
    was taken over while it ran, and it published nothing),
    "succeeded" or "failed". Raises TransientUnitError after putting the unit back."""
    unit = with_db_retry(f"claiming unit {unit_id}", lambda _errors: claim(unit_id, worker))
    if unit is None:
        return "skipped"
    plan = with_db_retry(
        f"reading the plan of job {unit.job_id}", lambda _e: dispatch.job_plan(unit.job)
    )
    beat = Heartbeat(
        lambda: JobUnit.objects.filter(
            pk=unit.pk, state=UnitState.RUNNING, attempts=unit.attempts
        ).update(heartbeat_at=timezone.now())
    )

    # Database errors the unit's own queries survived, for the record of its success.
    survived: list[str] = []

    def still_ours() -> bool:
        # Asked before the unit publishes its files: a worker whose claim lapsed (cut off
        # past the lease) and was given to another publishes nothing late.
        def check(errors: list[str]) -> bool:
            owned = JobUnit.objects.filter(
                pk=unit.pk, state=UnitState.RUNNING, attempts=unit.attempts
            ).exists()
            survived.extend(errors)
            return owned

        return with_db_retry(f"checking the claim of unit {unit.unit_id}", check)

    try:
        with beat:
            stats = units.run_unit(plan, unit.unit_id, may_publish=still_ours, unit=unit.spec)
    except units.UnitSuperseded as exc:
        log.info("unit %s of job %s: %s", unit.unit_id, unit.job_id, exc)
        return "skipped"
    except transient_errors() as exc:
        JobUnit.objects.filter(pk=unit.pk, state=UnitState.RUNNING, attempts=unit.attempts).update(
            state=UnitState.QUEUED, error=f"transient, will retry: {describe(exc)}"
        )
        raise TransientUnitError(describe(exc)) from exc
    except Exception as exc:  # any other error is permanent: record it, readable
        log.exception("unit %s of job %s failed", unit.unit_id, unit.job_id)
        error, trace = describe(exc), traceback.format_exc(limit=8)
        with_db_retry(
            f"recording the failure of unit {unit.unit_id}",
            lambda _errors: unit_fail(unit, error, trace),
        )
        return "failed"
    with_db_retry(
        f"recording unit {unit.unit_id}",
        lambda errors: unit_succeed(unit, stats, db_errors=survived + errors),
    )
    return "succeeded"


_CLAIMED = (
    "id",
    "job_id",
    "unit_id",
    "index",
    "phase",
    "spec",
    "state",
    "attempts",
    "bad_lines",
    "error",
    "worker",
    "started_at",
    "finished_at",
    "heartbeat_at",
    "queued_at",
    "last_event",
)
# One statement, its own transaction (a dropped connection cannot leave half a claim):
# the unit if it is queued and its job active, with the job's few fields a worker needs;
# a job's first claim also marks the job running. Committed asynchronously (see claim).
_CLAIM_SQL = (
    "WITH c AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),"
    " claimed AS (UPDATE {unit} AS u SET state = %s, attempts = u.attempts + 1, worker = %s,"
    " started_at = %s, heartbeat_at = %s, finished_at = NULL, error = ''"
    " FROM {job} AS j, c WHERE u.id = %s AND u.state = %s AND j.id = u.job_id"
    " AND j.state = ANY(%s) RETURNING "
    + ", ".join(f"u.{name}" for name in _CLAIMED)
    + ", j.state AS job_state, j.created_at AS job_created_at, j.num_phases),"
    " s AS (UPDATE {job} SET state = %s, started_at = %s WHERE state = %s"
    " AND id IN (SELECT job_id FROM claimed WHERE job_state = %s))"
    " SELECT * FROM claimed"
)


def claim(unit_id: int, worker: str) -> JobUnit | None:
    """Take a queued unit of an active job for ``worker``: its row (spec included) with its
    job (only its state, creation time and number of phases), or None when it is not
    claimable. On Postgres one UPDATE ... RETURNING, committed asynchronously: a claim lost
    in a server crash leaves the unit queued, its next message (the sweep resends it) runs
    it again and the first run's success records nothing (its claim is not there)."""
    now = timezone.now()
    if connection.vendor != "postgresql":
        return _claim_orm(unit_id, worker, now)
    sql = _CLAIM_SQL.format(unit=JobUnit._meta.db_table, job=Job._meta.db_table)
    params: list[Any] = [
        UnitState.RUNNING.value,
        worker,
        now,
        now,
        unit_id,
        UnitState.QUEUED.value,
        [s.value for s in ACTIVE_JOB_STATES],
        JobState.RUNNING.value,
        now,
        JobState.QUEUED.value,
        JobState.QUEUED.value,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    values = dict(zip(_CLAIMED, row, strict=False))
    if isinstance(values["spec"], str):
        values["spec"] = json.loads(values["spec"])
    unit = JobUnit(**values)
    unit._state.adding, unit._state.db = False, connection.alias
    _job_state, created_at, num_phases = row[len(_CLAIMED) :]
    unit.job = Job.from_db(
        connection.alias,
        ["id", "state", "created_at", "num_phases"],
        [unit.job_id, JobState.RUNNING.value, created_at, num_phases],  # running now
    )
    return unit


def _claim_orm(unit_id: int, worker: str, now) -> JobUnit | None:
    with transaction.atomic():
        claimed = JobUnit.objects.filter(
            pk=unit_id, state=UnitState.QUEUED, job__state__in=ACTIVE_JOB_STATES
        ).update(
            state=UnitState.RUNNING,
            attempts=F("attempts") + 1,
            worker=worker,
            started_at=now,
            heartbeat_at=now,
            finished_at=None,
            error="",
        )
        if claimed != 1:
            return None
        unit = (
            JobUnit.objects.select_related("job")
            .only(*_CLAIMED, "job__id", "job__state", "job__created_at", "job__num_phases")
            .get(pk=unit_id)
        )
        if unit.job.state == JobState.QUEUED:
            Job.objects.filter(pk=unit.job_id, state=JobState.QUEUED).update(
                state=JobState.RUNNING, started_at=now
            )
    return unit


class Heartbeat:
    """Renews a claim from a thread while the work runs: calls ``beat()`` (an UPDATE that
    returns the number of rows it changed) every ``SHARDYARD_UNIT_HEARTBEAT`` seconds and
    stops when it changes nothing (the claim was taken over or cancelled) or on exit. A
    database error skips one beat; the thread's connection is closed and reopened."""

    def __init__(self, beat, interval: float | None = None):
        self._beat = beat
        self._interval = interval or settings.SHARDYARD_UNIT_HEARTBEAT
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shardyard-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:

        try:
            while not self._stop.wait(self._interval):
                try:
                    if not self._beat():
                        return
                except DB_DROPPED as exc:
                    log.warning("heartbeat skipped: %s", describe(exc))
                    connection.close()
        finally:
            connection.close()  # this thread's own connection


def job_unit_give_up(*, unit_id: int, reason: str) -> None:
    """A unit exhausted its transient retries (or hit the time limit): fail it."""
    unit = JobUnit.objects.defer("spec", "stats").get(pk=unit_id)
    if unit.state in (UnitState.QUEUED, UnitState.RUNNING):
        JobUnit.objects.filter(pk=unit.pk).update(state=UnitState.RUNNING)
        unit_fail(unit, reason, "")


_COUNT = "{0} = {0} + %s"
_JOB_COUNTS = (
    "units_done = units_done + 1, "
    + ", ".join(_COUNT.format(name) for name in units.COUNT_NAMES)
    + ", phase_left = CASE WHEN phase = %s AND phase_left > 0 THEN phase_left - 1"
    " ELSE phase_left END"
)
# The job's counters in place if the unit is still this claim's, then the unit's row: one
# statement, its own transaction, committed asynchronously (a success lost in a server
# crash leaves its unit running; the lease requeues it, the rerun finds the unit's
# completion marker and records it again, counters included since they commit together).
# The job row is locked for this statement only: no worker can leave it locked.
_SUCCEED_SQL = (
    "WITH c AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),"
    " j AS (UPDATE {job} SET " + _JOB_COUNTS + " FROM c WHERE id = %s AND EXISTS"
    " (SELECT 1 FROM {unit} WHERE id = %s AND state = %s AND attempts = %s)"
    " RETURNING state, phase, phase_left),"
    " u AS (UPDATE {unit} SET state = %s, stats = %s, bad_lines = %s, finished_at = %s,"
    " error = '', last_event = COALESCE(%s, last_event) WHERE id = %s AND EXISTS"
    " (SELECT 1 FROM j) RETURNING 1)"
    " SELECT state, phase, phase_left FROM j"
)
# Elsewhere (SQLite): the same two updates in a transaction.
_COUNTS_SQL = (
    "UPDATE {job} SET " + _JOB_COUNTS + " WHERE id = %s AND EXISTS (SELECT 1 FROM {unit}"
    " WHERE id = %s AND state = %s AND attempts = %s) RETURNING state, phase, phase_left"
)


def unit_succeed(unit: JobUnit, stats: dict[str, Any], *, db_errors: Sequence[str] = ()) -> None:
    """Record a unit's success (see the module docstring): the job's counters in place and
    the unit's row, in one statement on Postgres; the last unit of a phase then starts the
    next one. A duplicate or stale completion changes nothing."""
    now = timezone.now()
    counts = units.counts(stats)
    retried = (
        f"recorded after {len(db_errors)} database error(s) ({db_errors[-1]})" if db_errors else ""
    )
    tables = {"job": Job._meta.db_table, "unit": JobUnit._meta.db_table}
    claimed = [unit.pk, UnitState.RUNNING.value, unit.attempts]
    params: list[Any] = [
        *(counts[name] for name in units.COUNT_NAMES),
        unit.phase,
        unit.job_id,
        *claimed,
    ]
    if connection.vendor == "postgresql":
        params += [
            UnitState.SUCCEEDED.value,
            json.dumps(stats),
            counts["bad_lines"],
            now,
            retried[:300] or None,
            unit.pk,
        ]
        with connection.cursor() as cursor:
            cursor.execute(_SUCCEED_SQL.format(**tables), params)
            row = cursor.fetchone()
    else:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(_COUNTS_SQL.format(**tables), params)
                row = cursor.fetchone()
            if row is not None:
                JobUnit.objects.filter(pk=unit.pk).update(
                    state=UnitState.SUCCEEDED,
                    stats=stats,
                    bad_lines=counts["bad_lines"],
                    finished_at=now,
                    error="",
                    **({"last_event": retried[:300]} if retried else {}),
                )
    if row is None:
        return  # a retry took this unit over; its own run records the outcome
    state, phase, left = row
    if retried:
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=unit.job_id)
            log_line(job, f"unit {unit.unit_id} done on {unit.worker}; {retried}")
            job.save(update_fields=["log_tail"])
    if state == JobState.RUNNING and phase == unit.phase and left == 0:
        phase_advance(job_id=unit.job_id, phase=phase)


def phase_advance(*, job_id: int, phase: int) -> bool:
    """Start the phase after ``phase`` if every unit of ``phase`` succeeded and the job is
    still running in it; True when this call started it. Called by the success that took
    the phase's count to 0, and by the sweep for a job whose advance was lost (its worker
    died, or its connection dropped, between that success and this)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if not (job.state == JobState.RUNNING and job.phase == phase and job.phase_left == 0):
            return False
        log_line(job, f"phase {phase + 1}/{job.num_phases} done")
        dispatch.phase_start(job, phase + 1)
        job.save()
    return True


def unit_fail(unit: JobUnit, error: str, trace: str) -> None:
    now = timezone.now()
    with transaction.atomic():
        lock_holder_guard()
        job = Job.objects.select_for_update().get(pk=unit.job_id)
        # Only the claim's owner records its failure: a worker cut off past its lease
        # whose unit runs again elsewhere (attempts moved on) fails nothing.
        failed = JobUnit.objects.filter(
            pk=unit.pk, state=UnitState.RUNNING, attempts=unit.attempts
        ).update(state=UnitState.FAILED, error=(error + "\n" + trace).strip(), finished_at=now)
        if failed != 1:
            return
        log_line(job, f"unit {unit.unit_id} FAILED on {unit.worker}: {error}")
        if job.state in ACTIVE_JOB_STATES:
            job.state = JobState.FAILED
            job.error = f"unit {unit.unit_id} failed: {error}"
            job.finished_at = now
            record(job, None)
        job.save()


def job_finalize_execute(*, job_id: int) -> str:
    """Write the manifest after every unit finished, then record the artifact."""
    claimed = Job.objects.filter(
        pk=job_id,
        state=JobState.RUNNING,
        phase=F("num_phases"),
        finalize_claimed_at__isnull=True,
    ).update(finalize_claimed_at=timezone.now())
    if claimed != 1:
        return "skipped"
    job = Job.objects.defer("plan", "log_tail", "bad_input").get(pk=job_id)
    plan = dispatch.job_plan(job)
    beat = Heartbeat(
        lambda: Job.objects.filter(
            pk=job_id, state=JobState.RUNNING, finalize_claimed_at__isnull=False
        ).update(finalize_claimed_at=timezone.now())
    )
    try:
        with beat:
            manifest = units.finalize(plan)
    except transient_errors() as exc:
        Job.objects.filter(pk=job_id).update(finalize_claimed_at=None)
        raise TransientUnitError(describe(exc)) from exc
    except Exception as exc:
        log.exception("finalize of job %s failed", job_id)
        return job_fail(job_id, f"finalize failed: {describe(exc)}")
    finally:
        dispatch.job_plan_forget(job_id)  # its units' specs were loaded: let them go

    def record_it(errors: list[str]) -> str:
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job_id)
            if job.state != JobState.RUNNING:
                return "skipped"
            record(job, manifest)
            job.state = JobState.SUCCEEDED
            job.finished_at = timezone.now()
            job.error = ""
            if errors:
                log_line(job, f"recorded after {len(errors)} database error(s) ({errors[-1]})")
            log_line(job, "succeeded: manifest written")
            job.save()
        return "succeeded"

    try:
        return with_db_retry(f"recording job {job_id}", record_it)
    except UnknownRecorder as exc:  # the job's row names it: no traceback tells more
        log.error("recording job %s failed: %s", job_id, exc)
        error = f"recording the result failed: {exc}"
        return with_db_retry(f"failing job {job_id}", lambda _e: job_fail(job_id, error))
    except Exception as exc:
        log.exception("recording job %s failed", job_id)
        error = f"recording the result failed: {describe(exc)}"
        return with_db_retry(f"failing job {job_id}", lambda _e: job_fail(job_id, error))

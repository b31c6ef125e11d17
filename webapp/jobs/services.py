"""Writes for jobs: create, execute units, finalize, cancel, retry.

A job runs a ``shardcore.units.Plan``. Each unit is one Celery task
(``workers.tasks.job_unit_run``) that claims its row by state, runs the unit through
shardcore (idempotent: completion markers), then records its stats. The last unit of a
phase to finish queues the next phase; after the last phase one ``job_finalize`` task writes
the manifest (the artifact's commit point) and calls the job's recorder, a catalog service
that writes the artifact rows in the same transaction as the job's success.

Claims are ``UPDATE ... WHERE state = 'queued'`` that must change exactly one row, and
completions, successes and failures alike, are ``UPDATE ... WHERE state = 'running' AND
attempts = <claimed attempt>``: a duplicate or stale delivery records nothing, and neither
does a worker that comes back after its claim lapsed and the unit ran again elsewhere. Completions lock the job row, so counters and
phase changes are serialized per job.

A claim is a lease: a running unit renews ``heartbeat_at`` every
``settings.SHARDYARD_UNIT_HEARTBEAT`` seconds from a thread beside the work, and one whose
heartbeat is older than ``settings.SHARDYARD_UNIT_LEASE`` lost its worker (SIGKILL, OOM, lost
host). ``job_sweep``, run by every worker's sweeper thread (``workers.sweeper``) and by
``manage.py catalog jobs-reap``, queues such units again, and sends again the queued units
whose task message the broker no longer holds. The broker may redeliver a lost task later
too (acks_late); its claim then finds nothing to do. Database errors while recording an
outcome are retried on a fresh connection (``SHARDYARD_DB_RETRIES``); a launch the broker
refuses fails the job with a readable error, and Retry sends it again.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.module_loading import import_string

from shardcore import storage, units
from webapp.jobs.models import ACTIVE_JOB_STATES, Job, JobState, JobUnit, UnitState

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 200
# A unit whose worker was lost this many times fails instead of being requeued again.
MAX_UNIT_ATTEMPTS = 5
BAD_SAMPLES_PER_REASON = 5


class JobError(Exception):
    """A request the job's state does not allow (e.g. retrying a succeeded job)."""


def _transient_errors() -> tuple[type[BaseException], ...]:
    """Errors worth retrying after a pause: the database or broker went away for a moment.
    Everything else is a permanent failure recorded on the unit and the job."""
    import redis.exceptions
    from django.db import InterfaceError, OperationalError

    return (
        OperationalError,
        InterfaceError,
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        ConnectionError,
        TimeoutError,
    )


class TransientUnitError(Exception):
    """Raised to the task when a unit hit a transient error and was put back in the queue."""


# --- create -----------------------------------------------------------------------------


def job_create(
    *,
    plan: units.Plan,
    title: str = "",
    recorder: str = "",
    created_by=None,
) -> Job:
    """Save the plan next to the output, create the job and its units, and enqueue the
    first phase once the surrounding transaction commits."""
    units.save_plan(plan)
    with transaction.atomic():
        job = Job.objects.create(
            kind=plan.stage,
            title=title or f"{plan.stage} {plan.out}",
            plan=plan.to_json(),
            output_dir=str(plan.out),
            num_phases=len(plan.phases),
            units_total=plan.num_units,
            recorder=recorder,
            created_by=created_by,
        )
        JobUnit.objects.bulk_create(
            [
                JobUnit(job=job, unit_id=unit["id"], phase=index, state=UnitState.PENDING)
                for index, phase in enumerate(plan.phases)
                for unit in phase
            ],
            batch_size=2000,
        )
        _log(job, f"created: {plan.num_units} unit(s) in {len(plan.phases)} phase(s)")
        _phase_start(job, 0)
        job.save()
    return job


def _phase_start(job: Job, phase: int) -> None:
    """Queue the units of ``phase`` (skipping empty phases), or finalize after the last one.
    The caller holds the job row and saves it."""
    while phase < job.num_phases:
        queued = JobUnit.objects.filter(job=job, phase=phase, state=UnitState.PENDING).update(
            state=UnitState.QUEUED
        )
        if queued or JobUnit.objects.filter(job=job, phase=phase).exists():
            job.phase = phase
            _log(job, f"phase {phase + 1}/{job.num_phases} queued")
            _enqueue_units(job.pk, phase)
            return
        phase += 1
    job.phase = job.num_phases
    job.finalize_claimed_at = None
    _log(job, "all units done; finalizing")
    _enqueue_finalize(job.pk)


def _broker_errors() -> tuple[type[BaseException], ...]:
    import kombu.exceptions
    import redis.exceptions

    return (kombu.exceptions.OperationalError, redis.exceptions.ConnectionError, OSError)


def _broker_name() -> str:
    """The broker's address without credentials, for error messages."""
    url = settings.CELERY_BROKER_URL
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}" if rest else url


def _enqueue_units(job_id: int, phase: int, unit_ids: list[int] | None = None) -> None:
    def send() -> None:
        ids = JobUnit.objects.filter(job_id=job_id, phase=phase, state=UnitState.QUEUED)
        if unit_ids is not None:
            ids = ids.filter(pk__in=unit_ids)
        _send_units(job_id, list(ids.order_by("id").values_list("pk", flat=True)))

    transaction.on_commit(send)


def _send_units(job_id: int, pks: list[int]) -> bool:
    """Send one task per unit; on a broker error, fail the job (readable, retryable)."""
    from workers.tasks import job_unit_run

    if not pks:
        return True
    JobUnit.objects.filter(pk__in=pks).update(queued_at=timezone.now())
    try:
        for pk in pks:
            job_unit_run.apply_async(kwargs={"unit_id": pk})
    except _broker_errors() as exc:
        _broker_down(job_id, exc)
        return False
    return True


def _enqueue_finalize(job_id: int) -> None:
    transaction.on_commit(lambda: _send_finalize(job_id))


def _send_finalize(job_id: int) -> bool:
    from workers.tasks import job_finalize

    Job.objects.filter(pk=job_id).update(finalize_queued_at=timezone.now())
    try:
        job_finalize.apply_async(kwargs={"job_id": job_id})
    except _broker_errors() as exc:
        _broker_down(job_id, exc)
        return False
    return True


def _broker_down(job_id: int, exc: BaseException) -> None:
    log.error("job %s: the broker refused its tasks: %s", job_id, exc)
    _job_fail(
        job_id,
        f"could not queue the job's tasks: the broker {_broker_name()} is unreachable "
        f"({_describe(exc)}). Nothing ran; Retry once the broker is back.",
    )


# --- execute ----------------------------------------------------------------------------


def job_unit_execute(*, unit_id: int, worker: str) -> str:
    """Claim the unit, run it through shardcore and record the outcome. Returns
    "skipped" (not claimable: finished, cancelled, or another delivery owns it; or its claim
    was taken over while it ran, and it published nothing),
    "succeeded" or "failed". Raises TransientUnitError after putting the unit back."""
    unit = _with_db_retry(f"claiming unit {unit_id}", lambda _errors: _claim(unit_id, worker))
    if unit is None:
        return "skipped"
    plan = units.Plan.from_json(unit.job.plan)
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

        return _with_db_retry(f"checking the claim of unit {unit.unit_id}", check)

    try:
        with beat:
            stats = units.run_unit(plan, unit.unit_id, may_publish=still_ours)
    except units.UnitSuperseded as exc:
        log.info("unit %s of job %s: %s", unit.unit_id, unit.job_id, exc)
        return "skipped"
    except _transient_errors() as exc:
        JobUnit.objects.filter(pk=unit.pk, state=UnitState.RUNNING, attempts=unit.attempts).update(
            state=UnitState.QUEUED, error=f"transient, will retry: {_describe(exc)}"
        )
        raise TransientUnitError(_describe(exc)) from exc
    except Exception as exc:  # any other error is permanent: record it, readable
        log.exception("unit %s of job %s failed", unit.unit_id, unit.job_id)
        error, trace = _describe(exc), traceback.format_exc(limit=8)
        _with_db_retry(
            f"recording the failure of unit {unit.unit_id}",
            lambda _errors: _unit_fail(unit, error, trace),
        )
        return "failed"
    _with_db_retry(
        f"recording unit {unit.unit_id}",
        lambda errors: _unit_succeed(unit, stats, db_errors=survived + errors),
    )
    return "succeeded"


def _claim(unit_id: int, worker: str) -> JobUnit | None:
    now = timezone.now()
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
        unit = JobUnit.objects.select_related("job").get(pk=unit_id)
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
        from django.db import InterfaceError, OperationalError

        try:
            while not self._stop.wait(self._interval):
                try:
                    if not self._beat():
                        return
                except (OperationalError, InterfaceError) as exc:
                    log.warning("heartbeat skipped: %s", _describe(exc))
                    connection.close()
        finally:
            connection.close()  # this thread's own connection


def _with_db_retry(what: str, fn):
    """Run ``fn(errors)`` (a transaction of its own), retrying on OperationalError or
    InterfaceError (a dropped or terminated connection) on a fresh connection, with
    backoff, up to SHARDYARD_DB_RETRIES times. ``errors`` lists the failures so far, for
    the record. Inside an outer transaction nothing is retried (it is broken already)."""
    from django.db import InterfaceError, OperationalError

    errors: list[str] = []
    while True:
        try:
            return fn(errors)
        except (OperationalError, InterfaceError) as exc:
            if len(errors) >= settings.SHARDYARD_DB_RETRIES or connection.in_atomic_block:
                raise
            errors.append(_describe(exc).splitlines()[0])
            log.warning("%s: %s; retrying on a new connection", what, errors[-1])
            connection.close()
            time.sleep(min(8.0, 0.25 * 2 ** len(errors)))


def job_unit_give_up(*, unit_id: int, reason: str) -> None:
    """A unit exhausted its transient retries (or hit the time limit): fail it."""
    unit = JobUnit.objects.select_related("job").get(pk=unit_id)
    if unit.state in (UnitState.QUEUED, UnitState.RUNNING):
        JobUnit.objects.filter(pk=unit.pk).update(state=UnitState.RUNNING)
        _unit_fail(unit, reason, "")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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


def _unit_succeed(unit: JobUnit, stats: dict[str, Any], *, db_errors: list[str] = ()) -> None:
    now = timezone.now()
    retried = (
        f"recorded after {len(db_errors)} database error(s) ({db_errors[-1]})" if db_errors else ""
    )
    with transaction.atomic():
        lock_holder_guard()
        job = Job.objects.select_for_update().get(pk=unit.job_id)
        done = (
            JobUnit.objects.filter(pk=unit.pk, state=UnitState.RUNNING, attempts=unit.attempts)
            .update(state=UnitState.SUCCEEDED, stats=stats, finished_at=now, error="")
        )  # fmt: skip
        if done != 1:
            return  # a retry took this unit over; its own run records the outcome
        if retried:
            JobUnit.objects.filter(pk=unit.pk).update(last_event=retried[:300])
        counts = units.counts(stats)
        bad = stats.get("bad_input")
        job.units_done += 1
        job.documents += counts["documents"]
        job.tokens += counts["tokens"]
        job.bytes += counts["bytes"]
        job.bad_lines += counts["bad_lines"]
        if bad:
            job.bad_input = merge_bad_input(job.bad_input, bad)
        _log(
            job,
            f"unit {unit.unit_id} done on {unit.worker}: {counts['documents']:,} docs, "
            f"{counts['tokens']:,} tokens, {counts['bytes']:,} bytes"
            + (f", {counts['bad_lines']:,} bad lines" if counts["bad_lines"] else "")
            + (f"; {retried}" if retried else ""),
        )
        if job.state == JobState.RUNNING and job.phase == unit.phase:
            unfinished = (
                JobUnit.objects.filter(job=job, phase=unit.phase)
                .exclude(state=UnitState.SUCCEEDED)
                .exists()
            )
            if not unfinished:
                _phase_start(job, unit.phase + 1)
        job.save()


def _unit_fail(unit: JobUnit, error: str, trace: str) -> None:
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
        _log(job, f"unit {unit.unit_id} FAILED on {unit.worker}: {error}")
        if job.state in ACTIVE_JOB_STATES:
            job.state = JobState.FAILED
            job.error = f"unit {unit.unit_id} failed: {error}"
            job.finished_at = now
            _record(job, None)
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
    job = Job.objects.get(pk=job_id)
    plan = units.Plan.from_json(job.plan)
    beat = Heartbeat(
        lambda: Job.objects.filter(
            pk=job_id, state=JobState.RUNNING, finalize_claimed_at__isnull=False
        ).update(finalize_claimed_at=timezone.now())
    )
    try:
        with beat:
            manifest = units.finalize(plan)
    except _transient_errors() as exc:
        Job.objects.filter(pk=job_id).update(finalize_claimed_at=None)
        raise TransientUnitError(_describe(exc)) from exc
    except Exception as exc:
        log.exception("finalize of job %s failed", job_id)
        return _job_fail(job_id, f"finalize failed: {_describe(exc)}")

    def record(errors: list[str]) -> str:
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job_id)
            if job.state != JobState.RUNNING:
                return "skipped"
            _record(job, manifest)
            job.state = JobState.SUCCEEDED
            job.finished_at = timezone.now()
            job.error = ""
            if errors:
                _log(job, f"recorded after {len(errors)} database error(s) ({errors[-1]})")
            _log(job, "succeeded: manifest written")
            job.save()
        return "succeeded"

    try:
        return _with_db_retry(f"recording job {job_id}", record)
    except Exception as exc:
        log.exception("recording job %s failed", job_id)
        error = f"recording the result failed: {_describe(exc)}"
        return _with_db_retry(f"failing job {job_id}", lambda _e: _job_fail(job_id, error))


def _job_fail(job_id: int, error: str) -> str:
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.state in ACTIVE_JOB_STATES:
            job.state = JobState.FAILED
            job.error = error
            job.finished_at = timezone.now()
            _log(job, error)
            _record(job, None)
            job.save()
    return "failed"


def _record(job: Job, manifest: dict | None) -> None:
    """Call the job's recorder (a catalog service) inside the caller's transaction. The
    checked local copies of remote artifacts it reads (a pool's quality, a schedule's) are
    released when it returns, so a long-lived worker never pins them in its cache."""
    if job.recorder:
        with storage.artifact_scope():
            import_string(job.recorder)(job=job, manifest=manifest)


# --- operator actions -------------------------------------------------------------------


def job_cancel(*, job_id: int) -> Job:
    """Stop the job: queued and pending units are cancelled; units already running finish
    their file (they are idempotent) but start nothing after them."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.state not in ACTIVE_JOB_STATES:
            raise JobError(
                f"job {job.pk} has finished ({job.state}); only a queued or running job can "
                "be cancelled"
            )
        n = JobUnit.objects.filter(job=job, state__in=[UnitState.PENDING, UnitState.QUEUED]).update(
            state=UnitState.CANCELLED
        )
        job.state = JobState.CANCELLED
        job.finished_at = timezone.now()
        _log(job, f"cancelled: {n} unit(s) will not run")
        _record(job, None)
        job.save()
    return job


def unit_lease(seconds: int | None = None) -> timedelta:
    """How long a claim holds without a heartbeat: a running unit whose last heartbeat is
    older than this lost its worker."""
    return timedelta(seconds=settings.SHARDYARD_UNIT_LEASE if seconds is None else seconds)


def lost_units_q(*, lease_seconds: int | None = None) -> Q:
    """Running units whose heartbeat (or, for claims that never beat, whose claim) is older
    than the lease: a live worker renews it every SHARDYARD_UNIT_HEARTBEAT seconds."""
    cutoff = timezone.now() - unit_lease(lease_seconds)
    return Q(state=UnitState.RUNNING) & (
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )


def _finalize_lost(job: Job, lease_seconds: int | None) -> bool:
    return (
        job.state == JobState.RUNNING
        and job.phase >= job.num_phases
        and job.finalize_claimed_at is not None
        and job.finalize_claimed_at < timezone.now() - unit_lease(lease_seconds)
    )


def job_retry(
    *, job_id: int, include_running: bool = False, lease_seconds: int | None = None
) -> Job:
    """Rerun only the units that did not succeed (finished units keep their output and
    their completion markers). Units running longer than the lease
    (``settings.SHARDYARD_UNIT_LEASE``) are lost and always queued again; on a job that is
    still active, only they are. ``include_running`` also requeues units running within
    the lease, for when the worker that held them is known to be gone (SIGKILL, lost
    host); shardcore units are idempotent, so a unit that was in fact still running
    produces the same bytes."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.state == JobState.SUCCEEDED:
            raise JobError(f"job {job.pk} has already succeeded: it has no failed unit to retry")
        lost = list(
            JobUnit.objects.filter(lost_units_q(lease_seconds=lease_seconds), job=job)
            .order_by("id")
            .values_list("pk", "unit_id", "worker", "attempts")
        )
        if lost:
            workers = ", ".join(sorted({w or "?" for _, _, w, _ in lost}))
            _log(job, f"{len(lost)} unit(s) lost: claimed by {workers}, no heartbeat within "
                      f"the lease of {unit_lease(lease_seconds)}")  # fmt: skip
        doomed = [(pk, uid, a) for pk, uid, _, a in lost if a >= MAX_UNIT_ATTEMPTS]
        if doomed and job.state in ACTIVE_JOB_STATES:
            # A unit that takes its worker down every time (out of memory...) is not
            # requeued forever: it fails, readable, and Retry runs it again by hand.
            pk, uid, attempts = doomed[0]
            error = (
                f"lost its worker on each of {attempts} attempts (killed, e.g. out of "
                "memory?); not requeued again"
            )
            JobUnit.objects.filter(pk__in=[d[0] for d in doomed]).update(
                state=UnitState.FAILED, error=error, finished_at=timezone.now()
            )
            job.state = JobState.FAILED
            job.error = f"unit {uid} failed: {error}"
            job.finished_at = timezone.now()
            _log(job, job.error)
            _record(job, None)
            job.save()
            return job
        lost = [(pk, uid, w) for pk, uid, w, _ in lost]
        lost_ids = [pk for pk, _, _ in lost]
        if job.state in ACTIVE_JOB_STATES and not include_running:
            finalize_lost = _finalize_lost(job, lease_seconds)
            if not lost and not finalize_lost:
                raise JobError(
                    f"job {job.pk} is {job.state} and none of its units is lost (running "
                    f"longer than the lease of {unit_lease(lease_seconds)}); retry it when it "
                    "failed or was cancelled, or pass include_running when its worker is gone"
                )
            # The rest of the job goes on as it is: only the lost work is queued again.
            requeued = 0
            for pk, _, worker in lost:
                requeued += JobUnit.objects.filter(pk=pk, state=UnitState.RUNNING).update(
                    state=UnitState.QUEUED,
                    error="lost with its worker; queued again",
                    last_event=f"requeued after worker lost ({worker or '?'}: no heartbeat "
                    f"for {unit_lease(lease_seconds).total_seconds():g} s)"[:300],
                )
            if requeued:
                _log(job, f"retry: {requeued} lost unit(s) requeued")
                _enqueue_units(job.pk, job.phase, unit_ids=lost_ids)
            if finalize_lost:
                job.finalize_claimed_at = None
                _log(job, "retry: finalize lost with its worker; queued again")
                _enqueue_finalize(job.pk)
            job.save()
            return job
        states = [UnitState.FAILED, UnitState.CANCELLED, UnitState.QUEUED]
        if include_running:
            states.append(UnitState.RUNNING)
        JobUnit.objects.filter(pk__in=lost_ids).update(last_event="requeued after worker lost")
        requeued = (
            JobUnit.objects.filter(job=job, phase=job.phase)
            .filter(Q(state__in=states) | Q(pk__in=lost_ids))
            .update(state=UnitState.QUEUED, error="")
        )
        # Later phases were cancelled or never started: they wait for this phase again.
        JobUnit.objects.filter(job=job, phase__gt=job.phase).exclude(
            state=UnitState.SUCCEEDED
        ).update(state=UnitState.PENDING)
        job.state = JobState.RUNNING if job.started_at else JobState.QUEUED
        job.error = ""
        job.finished_at = None
        _log(job, f"retry: {requeued} unit(s) requeued")
        unfinished = (
            JobUnit.objects.filter(job=job, phase=job.phase)
            .exclude(state=UnitState.SUCCEEDED)
            .exists()
        )
        if job.phase >= job.num_phases or not unfinished:
            job.state = JobState.RUNNING
            job.started_at = job.started_at or timezone.now()
            _phase_start(job, job.phase + 1 if job.phase < job.num_phases else job.num_phases)
        else:
            _enqueue_units(job.pk, job.phase)
        job.save()
    return job


def job_reap(*, lease_seconds: int | None = None) -> list[Job]:
    """Queue again the lost work of every active job: units (and finalize steps) claimed
    longer ago than the lease. For cron or an operator after losing a worker host; returns
    the jobs it touched. Idempotent: a second run finds nothing lost."""
    cutoff = timezone.now() - unit_lease(lease_seconds)
    job_ids = set(
        JobUnit.objects.filter(
            lost_units_q(lease_seconds=lease_seconds), job__state__in=ACTIVE_JOB_STATES
        ).values_list("job_id", flat=True)
    ) | set(
        Job.objects.filter(
            state=JobState.RUNNING,
            phase__gte=F("num_phases"),
            finalize_claimed_at__lt=cutoff,
        ).values_list("pk", flat=True)
    )
    reaped = []
    for job_id in sorted(job_ids):
        try:
            reaped.append(job_retry(job_id=job_id, lease_seconds=lease_seconds))
        except JobError:
            continue  # it finished or was cancelled meanwhile, or its work came back
    return reaped


def job_resend_lost(*, queue: str | None = None, lease_seconds: int | None = None) -> list[Job]:
    """Send again the queued units (and finalize steps) of active jobs whose task message
    the broker no longer holds: queued longer ago than the lease, yet neither waiting in
    the queue nor out with a worker (``webapp.jobs.broker``). Returns the jobs touched."""
    from webapp.jobs import broker
    from workers.celery import app

    cutoff = timezone.now() - unit_lease(lease_seconds)
    stale_units = list(
        JobUnit.objects.filter(
            Q(queued_at__lt=cutoff) | Q(queued_at__isnull=True, job__created_at__lt=cutoff),
            state=UnitState.QUEUED,
            job__state__in=ACTIVE_JOB_STATES,
        ).values_list("pk", "job_id")
    )
    stale_finalize = list(
        Job.objects.filter(
            Q(finalize_queued_at__lt=cutoff) | Q(finalize_queued_at__isnull=True),
            state=JobState.RUNNING,
            phase__gte=F("num_phases"),
            finalize_claimed_at__isnull=True,
            started_at__lt=cutoff,
        ).values_list("pk", flat=True)
    )
    if not stale_units and not stale_finalize:
        return []
    pending = broker.pending_messages(
        broker_url=settings.CELERY_BROKER_URL,
        queue=queue or app.conf.task_default_queue,
        unacked_within=unit_lease(lease_seconds).total_seconds(),
    )
    if pending is None:
        return []
    lost: dict[int, list[int]] = {}
    for pk, job_id in stale_units:
        if pk not in pending.units:
            lost.setdefault(job_id, []).append(pk)
    touched = []
    for job_id in sorted(set(lost) | {j for j in stale_finalize if j not in pending.finalizes}):
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job_id)
            if job.state not in ACTIVE_JOB_STATES:
                continue
            pks = list(
                JobUnit.objects.filter(pk__in=lost.get(job_id, []), state=UnitState.QUEUED)
                .values_list("pk", flat=True)
            )  # fmt: skip
            if pks:
                JobUnit.objects.filter(pk__in=pks).update(
                    last_event="broker message lost; sent again"
                )
                _log(job, f"{len(pks)} queued unit(s) had no message in the broker; sent again")
                transaction.on_commit(lambda j=job_id, p=pks: _send_units(j, p))
            elif job_id in stale_finalize and job.finalize_claimed_at is None:
                _log(job, "finalize had no message in the broker; sent again")
                _enqueue_finalize(job_id)
            else:
                continue
            job.save()
            touched.append(job)
    return touched


def job_sweep(*, queue: str | None = None) -> list[str]:
    """What a worker's sweeper does every SHARDYARD_SWEEP_INTERVAL seconds: requeue the
    work of dead workers (``job_reap``), then resend lost messages (``job_resend_lost``).
    Returns one line per job touched."""
    lines = [
        f"job {job.pk}: {job.log_tail.splitlines()[-1].split(' ', 2)[-1]}" for job in job_reap()
    ]
    lines += [
        f"job {job.pk}: {job.log_tail.splitlines()[-1].split(' ', 2)[-1]}"
        for job in job_resend_lost(queue=queue)
    ]
    return lines


# --- helpers shared with selectors ------------------------------------------------------


def merge_bad_input(total: dict, new: dict | list) -> dict:
    """Sum bad-input reports shaped {file: {reason: {"count": n, "samples": [...]}}}
    (a list of {"file", "reason", "count", "samples"} entries is accepted too)."""
    out = {f: {r: dict(v) for r, v in reasons.items()} for f, reasons in (total or {}).items()}
    for file, reason, count, samples in _bad_entries(new):
        slot = out.setdefault(file, {}).setdefault(reason, {"count": 0, "samples": []})
        slot["count"] += count
        room = BAD_SAMPLES_PER_REASON - len(slot["samples"])
        if room > 0:
            slot["samples"] = slot["samples"] + list(samples)[:room]
    return out


def _bad_entries(report: dict | list) -> Iterable[tuple[str, str, int, list]]:
    if isinstance(report, list):
        for e in report:
            yield (
                str(e.get("file", "")),
                str(e.get("reason", "")),
                int(e.get("count", 1)),
                e.get("samples", []),
            )
        return
    for file, reasons in (report or {}).items():
        if not isinstance(reasons, dict):
            continue
        for reason, value in reasons.items():
            if isinstance(value, dict):
                yield str(file), str(reason), int(value.get("count", 0)), value.get("samples", [])
            elif isinstance(value, int):
                yield str(file), str(reason), value, []


def _log(job: Job, message: str) -> None:
    line = f"{timezone.now():%Y-%m-%d %H:%M:%S} {message}"
    lines = (job.log_tail.splitlines() if job.log_tail else []) + [line]
    job.log_tail = "\n".join(lines[-LOG_TAIL_LINES:])

"""Operator actions and healing: cancel, retry, and the sweep that requeues the work of
lost workers and resends lost task messages.

A claim is a lease: a running unit renews ``heartbeat_at`` every
``settings.SHARDYARD_UNIT_HEARTBEAT`` seconds from a thread beside the work, and one whose
heartbeat is older than ``settings.SHARDYARD_UNIT_LEASE`` lost its worker (SIGKILL, OOM, lost
host). ``job_sweep``, run by every worker's sweeper thread (``workers.sweeper``) and by
``manage.py catalog jobs-reap``, queues such units again, and sends again the queued units
whose task message was lost (``job_resend_lost``). The broker may redeliver a lost task
later too (acks_late); its claim then finds nothing to do. Each action locks the job row,
then changes unit rows (the order a success takes them in too). The sweep reads the
running units and the queued units sent before the queue's oldest waiting message through
partial indexes, and one message of the broker's queue: never the whole units table, nor
the queue. Workers take turns (``sweep_turn``): one sweep of a queue at a time, one per
interval, however many workers serve it.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from webapp.jobs import broker, claims, dispatch
from webapp.jobs.common import DB_DROPPED, JobError, log_line, record, unit_lease
from webapp.jobs.models import ACTIVE_JOB_STATES, Job, JobState, JobUnit, SweepTurn, UnitState

# A unit whose worker was lost this many times fails instead of being requeued again.
MAX_UNIT_ATTEMPTS = 5


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
        log_line(job, f"cancelled: {n} unit(s) will not run")
        record(job, None)
        job.save()
    return job


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
            .order_by("index")
            .values_list("pk", "unit_id", "worker", "attempts")
        )
        if lost:
            workers = ", ".join(sorted({w or "?" for _, _, w, _ in lost}))
            log_line(
                job,
                f"{len(lost)} unit(s) lost: claimed by {workers}, no heartbeat within "
                f"the lease of {unit_lease(lease_seconds)}",
            )
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
            log_line(job, job.error)
            record(job, None)
            job.save()
            return job
        lost_ids = [pk for pk, _, _, _ in lost]
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
            for pk, _, worker, _ in lost:
                requeued += JobUnit.objects.filter(pk=pk, state=UnitState.RUNNING).update(
                    state=UnitState.QUEUED,
                    queued_at=timezone.now(),
                    error="lost with its worker; queued again",
                    last_event=f"requeued after worker lost ({worker or '?'}: no heartbeat "
                    f"for {unit_lease(lease_seconds).total_seconds():g} s)"[:300],
                )
            if requeued:
                log_line(job, f"retry: {requeued} lost unit(s) requeued")
                dispatch.enqueue_units(job.pk, job.phase, unit_ids=lost_ids)
            if finalize_lost:
                job.finalize_claimed_at = None
                log_line(job, "retry: finalize lost with its worker; queued again")
                dispatch.enqueue_finalize(job.pk)
            job.save()
            return job
        states = [UnitState.FAILED, UnitState.CANCELLED, UnitState.QUEUED]
        if include_running:
            states.append(UnitState.RUNNING)
        JobUnit.objects.filter(pk__in=lost_ids).update(last_event="requeued after worker lost")
        # Pending again: the phase's start sends them a batch at a time, like a new phase.
        requeued = (
            JobUnit.objects.filter(job=job, phase=job.phase)
            .filter(Q(state__in=states) | Q(pk__in=lost_ids))
            .update(state=UnitState.PENDING, error="")
        )
        # Later phases were cancelled or never started: they wait for this phase again.
        JobUnit.objects.filter(job=job, phase__gt=job.phase).exclude(
            state=UnitState.SUCCEEDED
        ).update(state=UnitState.PENDING)
        job.state = JobState.RUNNING if job.started_at else JobState.QUEUED
        job.error = ""
        job.finished_at = None
        log_line(job, f"retry: {requeued} unit(s) requeued")
        left = (
            JobUnit.objects.filter(job=job, phase=job.phase)
            .exclude(state=UnitState.SUCCEEDED)
            .count()
        )
        if job.phase >= job.num_phases or not left:
            job.state = JobState.RUNNING
            job.started_at = job.started_at or timezone.now()
            dispatch.phase_start(
                job,
                job.phase + 1 if job.phase < job.num_phases else job.num_phases,
                send_first=True,
            )
        else:  # the successes count down from here
            dispatch.phase_start(job, job.phase, send_first=True)
        job.save()
    return job


def job_reap(*, lease_seconds: int | None = None) -> list[Job]:
    """Queue again the lost work of every active job: units (and finalize steps) claimed
    longer ago than the lease, and the start of a phase after a complete one. For cron or an operator after losing a worker host; returns
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
    # A phase whose units all succeeded but whose next phase was never started: the
    # worker of its last success died (or lost its connection) before starting it.
    stalled = Job.objects.filter(
        state=JobState.RUNNING, phase__lt=F("num_phases"), phase_left=0
    ).values_list("pk", "phase")
    for job_id, phase in stalled:
        if claims.phase_advance(job_id=job_id, phase=phase):
            with transaction.atomic():
                job = Job.objects.select_for_update().get(pk=job_id)
                log_line(job, f"phase {phase + 1} was complete; the sweep started what follows")
                job.save(update_fields=["log_tail"])
            reaped.append(job)
    return reaped


def job_resend_lost(*, queue: str | None = None, lease_seconds: int | None = None) -> list[Job]:
    """Send again the queued units, finalize steps and dispatch steps of active jobs whose
    task message was lost. The queue is first in, first out: a message sent a lease before
    the oldest one still waiting in it (or a lease ago, when none waits) and that no worker
    holds was delivered already, or lost; its unit still queued, it was lost
    (``webapp.jobs.broker``). The units are read by their send stamps through an index
    (those sent before that time, a few), never by listing the broker's queue or every
    queued unit. Returns the jobs touched."""
    lease = unit_lease(lease_seconds)
    head = broker.queue_head(
        broker_url=settings.CELERY_BROKER_URL,
        queue=queue or settings.CELERY_TASK_DEFAULT_QUEUE,
        unacked_within=lease.total_seconds(),
    )
    if head is None:
        return []
    now = timezone.now()
    waiting = now
    if head.oldest_sent is not None:
        waiting = min(now, datetime.fromtimestamp(head.oldest_sent, tz=UTC))
    cutoff = waiting - lease
    stale_units = _queued_before(cutoff)
    stale_finalize = (
        set(
            Job.objects.filter(
                Q(finalize_queued_at__lt=cutoff) | Q(finalize_queued_at__isnull=True),
                state=JobState.RUNNING,
                phase__gte=F("num_phases"),
                finalize_claimed_at__isnull=True,
                started_at__lt=cutoff,
            ).values_list("pk", flat=True)
        )
        - head.delivered.finalizes
    )
    # A phase whose dispatcher's message was lost (or whose dispatcher died) while units
    # still wait to be sent: one index probe per such job.
    stale_dispatch = {
        job_id
        for job_id, phase in Job.objects.filter(
            Q(dispatch_queued_at__lt=cutoff)
            | Q(dispatch_queued_at__isnull=True, created_at__lt=cutoff),
            state__in=ACTIVE_JOB_STATES,
            phase__lt=F("num_phases"),
        ).values_list("pk", "phase")
        if job_id not in head.delivered.dispatches
        and JobUnit.objects.filter(job_id=job_id, phase=phase, state=UnitState.PENDING).exists()
    }
    lost: dict[int, list[int]] = {}
    for pk, job_id in stale_units:
        if pk not in head.delivered.units:
            lost.setdefault(job_id, []).append(pk)
    touched = []
    for job_id in sorted(set(lost) | stale_finalize | stale_dispatch):
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job_id)
            if job.state not in ACTIVE_JOB_STATES:
                continue
            pks = list(
                JobUnit.objects.filter(
                    pk__in=lost.get(job_id, []), state=UnitState.QUEUED
                ).values_list("pk", flat=True)
            )
            acted = False
            if pks:
                JobUnit.objects.filter(pk__in=pks).update(
                    last_event="broker message lost; sent again"
                )
                log_line(job, f"{len(pks)} queued unit(s) had no message in the broker; sent again")
                transaction.on_commit(functools.partial(dispatch.send_units, job_id, pks))
                acted = True
            if job_id in stale_dispatch and job.phase < job.num_phases:
                log_line(
                    job,
                    f"phase {job.phase + 1}: the rest of its units were not being "
                    "sent (the dispatcher's message was lost); sent again",
                )
                transaction.on_commit(functools.partial(dispatch.send_dispatch, job_id, job.phase))
                acted = True
            if job_id in stale_finalize and job.finalize_claimed_at is None and not acted:
                log_line(job, "finalize had no message in the broker; sent again")
                dispatch.enqueue_finalize(job_id)
                acted = True
            if not acted:
                continue
            job.save()
            touched.append(job)
    return touched


_PAGE = 5000  # queued units read per statement by _queued_before
_QUEUED_BEFORE = (
    "SELECT u.queued_at, u.id, u.job_id, u.phase FROM {unit} AS u WHERE u.state = %s"
    " AND u.queued_at < %s AND (u.queued_at, u.id) > (%s, %s) ORDER BY u.queued_at, u.id"
    " LIMIT %s"
)


def _queued_before(cutoff) -> list[tuple[int, int]]:
    """(pk, job id) of the queued units of active jobs' current phases whose message was
    sent before ``cutoff``, or never stamped in a job older than it (a sender that died
    before stamping). Read in pages along the partial index on the queued units' send
    stamps, from the oldest: the rows before the cutoff (the lost, the delivered but not
    yet claimed, and the queued units of jobs that failed), never every queued unit."""
    live = dict(Job.objects.filter(state__in=ACTIVE_JOB_STATES).values_list("pk", "phase"))
    found: list[tuple[int, int]] = []
    if not live:
        return found
    sql = _QUEUED_BEFORE.format(unit=JobUnit._meta.db_table)
    after = (datetime.min.replace(tzinfo=UTC), 0)
    with connection.cursor() as cursor:
        while True:
            cursor.execute(sql, [UnitState.QUEUED.value, cutoff, *after, _PAGE])
            rows = cursor.fetchall()
            found += [(pk, job) for _, pk, job, phase in rows if live.get(job) == phase]
            if len(rows) < _PAGE:
                break
            after = (rows[-1][0], rows[-1][1])
    old = Job.objects.filter(pk__in=list(live), created_at__lt=cutoff).values_list("pk", flat=True)
    never = JobUnit.objects.filter(state=UnitState.QUEUED, queued_at__isnull=True, job_id__in=old)
    found += [
        (pk, job)
        for pk, job, phase in never.order_by().values_list("pk", "job_id", "phase")
        if live.get(job) == phase
    ]
    return found


def sweep_turn_key(queue: str) -> tuple[int, int]:
    """The advisory lock of a queue's sweep: a class of Shardyard's own and the queue's
    CRC-32 (as Postgres' signed int4)."""
    crc = zlib.crc32(queue.encode())
    return SWEEP_LOCK_CLASS, crc - (1 << 32) if crc >= 1 << 31 else crc


SWEEP_LOCK_CLASS = 0x53594A42  # "SYJB"
# A worker takes the turn when the last sweep of its queue is older than this share of the
# interval (every worker's timer fires about once an interval, each a little late).
_TURN_SHARE = 0.9

_TURN_SQL = (
    "INSERT INTO {table} (queue, swept_at, worker) VALUES (%s, %s, %s)"
    " ON CONFLICT (queue) DO UPDATE SET swept_at = EXCLUDED.swept_at, worker = EXCLUDED.worker"
    " WHERE {table}.swept_at < %s RETURNING 1"
)


@contextmanager
def sweep_turn(*, queue: str, worker: str, interval: float) -> Iterator[bool]:
    """Whether this worker sweeps ``queue`` now: True for one worker at a time (a Postgres
    advisory lock held for the sweep, released with its connection should the worker die)
    and for one sweep per ``interval`` (the queue's ``SweepTurn`` row, taken by one
    statement when the last sweep is older than most of the interval). So a queue served
    by a hundred workers is swept as often as one served by one."""
    now = timezone.now()
    since = now - timedelta(seconds=interval * _TURN_SHARE)
    if connection.vendor != "postgresql":
        with transaction.atomic():
            turn, created = SweepTurn.objects.select_for_update().get_or_create(
                queue=queue, defaults={"swept_at": now, "worker": worker}
            )
            mine = created or turn.swept_at < since
            if mine and not created:
                SweepTurn.objects.filter(pk=turn.pk).update(swept_at=now, worker=worker)
        yield mine
        return
    key = sweep_turn_key(queue)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", key)
        if not cursor.fetchone()[0]:
            yield False
            return
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                _TURN_SQL.format(table=SweepTurn._meta.db_table), [queue, now, worker, since]
            )
            mine = cursor.fetchone() is not None
        yield mine
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", key)
        except DB_DROPPED:
            pass  # the connection went: its lock with it


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

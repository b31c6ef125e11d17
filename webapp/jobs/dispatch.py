"""Creating a job and sending its work: the job row and one unit row per unit of its plan,
the phases in order, one task message per unit and one for finalize.

A phase is sent in batches (``SHARDYARD_DISPATCH_BATCH`` units) by a dispatcher: the
success that ends the phase before sends one message (``workers.job_dispatch``), whose
step (``job_dispatch_execute``) queues and sends a batch and, while units wait, the next
step's message halfway through it (a launch or a retry sends the first batch itself). No task updates or sends a whole phase, and the broker holds about one batch
of a job's units at a time; units of a phase not sent yet wait as PENDING.

The plan is split when the job is created: its header (stage, output, params, meta) goes in
the Job row, each unit's spec in its own ``JobUnit`` row (written with COPY on Postgres: a
million units take seconds). ``job_plan`` puts a plan back together for a worker: the header,
cached per process for the job's life, and ``UnitSpecs`` as its phases, which reads the
units' specs from the database only if a stage asks for them (finalize does; most units
never do). So a unit's claim reads its own row and no more, whatever the job's size.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import kombu.exceptions
import redis.exceptions
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from shardcore import units
from webapp.jobs import recorders
from webapp.jobs.common import describe, job_fail, log_line, unit_lease, with_db_retry
from webapp.jobs.models import ACTIVE_JOB_STATES, Job, JobUnit, UnitState
from webapp.tasks import task, task_send

log = logging.getLogger("webapp.jobs.services")

SEND_CHUNK = 5000  # unit rows stamped as sent per UPDATE


def job_create(
    *,
    plan: units.Plan,
    title: str = "",
    recorder: str = "",
    created_by=None,
) -> Job:
    """Save the plan next to the output, create the job and its units, and send the first
    phase's first batch once the surrounding transaction commits (the dispatcher sends the
    rest, ``job_dispatch_execute``). ``recorder`` is a registered recorder's name
    (``webapp.jobs.recorders``): an unknown one raises ``UnknownRecorder`` here rather than
    when the job ends."""
    if recorder:
        recorders.recorder(recorder)
    units.save_plan(plan)
    with transaction.atomic():
        job = Job.objects.create(
            kind=plan.stage,
            title=title or f"{plan.stage} {plan.out}",
            plan=plan.header(),
            output_dir=str(plan.out),
            num_phases=len(plan.phases),
            phase_units=[len(phase) for phase in plan.phases],
            units_total=plan.num_units,
            recorder=recorder,
            created_by=created_by,
        )
        units_insert(job_id=job.pk, phases=plan.phases)
        log_line(job, f"created: {plan.num_units} unit(s) in {len(plan.phases)} phase(s)")
        phase_start(job, 0, send_first=True)
        job.save()
    return job


_UNIT_COLUMNS = (
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
    "last_event",
)


def units_insert(*, job_id: int, phases: Sequence[Sequence[dict[str, Any]]]) -> int:
    """Write one row per unit of ``phases`` (in plan order) for the job, PENDING (a phase's
    start queues them batch by batch); returns the number written. Postgres takes them through COPY (a
    million rows in seconds), other databases in batches."""
    rows = (
        (job_id, str(spec["id"]), index, phase, spec)
        for index, (phase, spec) in enumerate(
            (p, s) for p, specs in enumerate(phases) for s in specs
        )
    )
    n = 0
    if connection.vendor == "postgresql":
        table = JobUnit._meta.db_table
        sql = f"COPY {table} ({', '.join(_UNIT_COLUMNS)}) FROM STDIN"
        with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
            for job, uid, index, phase, spec in rows:
                copy.write_row(
                    (job, uid, index, phase, json.dumps(spec), UnitState.PENDING, 0, 0, "", "", "")
                )
                n += 1
        return n
    batch: list[JobUnit] = []
    for job, uid, index, phase, spec in rows:
        batch.append(
            JobUnit(
                job_id=job,
                unit_id=uid,
                index=index,
                phase=phase,
                spec=spec,
                state=UnitState.PENDING,
            )
        )
        n += 1
        if len(batch) >= 2000:
            JobUnit.objects.bulk_create(batch)
            batch = []
    JobUnit.objects.bulk_create(batch)
    return n


def phase_start(job: Job, phase: int, *, send_first: bool = False) -> None:
    """Start ``phase`` (skipping phases with nothing left to do), or finalize after the last
    one: the job's count of the phase's units left, for the successes to count down (from
    the plan's units per phase less the phase's succeeded units, a few rows of an index,
    not the phase's rows), and once the caller commits, the dispatcher's first step
    (``job_dispatch_execute``), which queues and sends the units a batch at a time. So the
    success that ends a phase costs the same whatever the size of the next one.
    ``send_first``: queue the first batch here and send it at commit (a launch, a retry:
    their units wait in the broker when the request returns). The caller holds the job row
    and saves it."""
    while phase < job.num_phases:
        left = _phase_left(job, phase)
        if left:
            job.phase = phase
            job.phase_left = left
            log_line(job, f"phase {phase + 1}/{job.num_phases} queued")
            if not send_first:
                job.dispatch_queued_at = timezone.now()
                transaction.on_commit(functools.partial(send_dispatch, job.pk, phase))
                return
            pks = take_batch(job.pk, phase)
            more = len(pks) >= dispatch_batch()
            job.dispatch_queued_at = timezone.now() if more else None
            transaction.on_commit(
                functools.partial(_send, job.pk, pks, dispatch=phase if more else None, fresh=True)
            )
            return
        phase += 1
    job.phase = job.num_phases
    job.phase_left = 0
    job.finalize_claimed_at = None
    job.dispatch_queued_at = None
    log_line(job, "all units done; finalizing")
    enqueue_finalize(job.pk)


def _phase_left(job: Job, phase: int) -> int:
    in_phase = JobUnit.objects.filter(job_id=job.pk, phase=phase)
    if len(job.phase_units or ()) != job.num_phases:  # a job from before they were kept
        return in_phase.exclude(state=UnitState.SUCCEEDED).count()
    return job.phase_units[phase] - in_phase.filter(state=UnitState.SUCCEEDED).count()


def dispatch_batch() -> int:
    return settings.SHARDYARD_DISPATCH_BATCH


# The next pending units of a phase in plan order (the (job, phase, state, index) index),
# queued and stamped as sent in one statement; rows another dispatcher holds are skipped.
# (A materialized batch: a subquery under IN may be scanned again, each scan taking more.)
_TAKE_SQL = (
    "WITH batch AS MATERIALIZED (SELECT id FROM {unit} WHERE job_id = %s AND phase = %s"
    " AND state = %s ORDER BY index LIMIT %s FOR UPDATE SKIP LOCKED)"
    " UPDATE {unit} AS u SET state = %s, queued_at = %s FROM batch"
    " WHERE u.id = batch.id AND u.state = %s RETURNING u.id, u.index"
)


def take_batch(job_id: int, phase: int) -> list[int]:
    """Queue the next ``SHARDYARD_DISPATCH_BATCH`` pending units of the job's phase, in
    plan order; returns their pks (the caller sends their messages)."""
    now, limit = timezone.now(), dispatch_batch()
    queued, pending = UnitState.QUEUED.value, UnitState.PENDING.value
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                _TAKE_SQL.format(unit=JobUnit._meta.db_table),
                [job_id, phase, pending, limit, queued, now, pending],
            )
            rows = cursor.fetchall()
        return [pk for pk, _ in sorted(rows, key=lambda row: row[1])]
    with transaction.atomic():
        pks = list(
            JobUnit.objects.filter(job_id=job_id, phase=phase, state=UnitState.PENDING)
            .order_by("index")
            .values_list("pk", flat=True)[:limit]
        )
        JobUnit.objects.filter(pk__in=pks).update(state=UnitState.QUEUED, queued_at=now)
    return pks


def job_dispatch_execute(*, job_id: int, phase: int) -> str:
    """The dispatcher's step (``workers.job_dispatch``): queue and send the next batch of
    the phase's pending units; while more wait, the next step's message goes out halfway
    through the batch, so the queue holds between a half and one and a half batches of the
    job's units and workers never wait for a dispatch. Returns "sent", "done" (nothing
    left to send) or "skipped" (the job ended or moved on)."""
    if not Job.objects.filter(pk=job_id, phase=phase, state__in=ACTIVE_JOB_STATES).exists():
        return "skipped"
    pks = take_batch(job_id, phase)
    if len(pks) < dispatch_batch():
        # The phase's last batch: no step is due after it (the sweep checks pending units
        # when a stamp is left behind by a dispatcher that died).
        Job.objects.filter(pk=job_id, phase=phase).update(dispatch_queued_at=None)
    if not pks:
        return "done"
    _send(job_id, pks, dispatch=phase if len(pks) >= dispatch_batch() else None, fresh=True)
    return "sent"


def send_dispatch(job_id: int, phase: int) -> bool:
    """Send the dispatcher's next step for the job's phase (stamped on the job row)."""
    Job.objects.filter(pk=job_id).update(dispatch_queued_at=timezone.now())
    try:
        task_send("workers.job_dispatch", job_id=job_id, phase=phase)
    except _broker_errors() as exc:
        _broker_down(job_id, exc)
        return False
    return True


# --- the plan, put back together for a worker -------------------------------------------


class UnitSpecs(Sequence):
    """A job's phases (lists of unit specs in plan order), read from its unit rows on first
    use: ``Plan.phases`` for a stage that reads them (finalize, or a unit that reads an
    earlier phase's results); a unit that reads only its own spec never loads them."""

    def __init__(self, job_id: int, num_phases: int):
        self._job_id, self._num_phases = job_id, num_phases
        self._phases: list[list[dict[str, Any]]] | None = None

    def _load(self) -> list[list[dict[str, Any]]]:
        if self._phases is None:
            # Read while the unit runs: a dropped connection is retried, not a unit failure.
            self._phases = with_db_retry(f"reading the units of job {self._job_id}", self._read)
        return self._phases

    def _read(self, _errors: list[str]) -> list[list[dict[str, Any]]]:
        phases: list[list[dict[str, Any]]] = [[] for _ in range(self._num_phases)]
        specs = (
            JobUnit.objects.filter(job_id=self._job_id)
            .order_by("index")
            .values_list("phase", "spec")
        )
        for phase, spec in specs.iterator(chunk_size=5000):
            phases[phase].append(spec)
        return phases

    def __len__(self) -> int:
        return self._num_phases

    def __getitem__(self, i):
        return self._load()[i]

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        return iter(self._load())


_PLANS: OrderedDict[tuple[int, Any], units.Plan] = OrderedDict()
_PLANS_KEPT = 4  # jobs whose plan header a worker process keeps


def job_plan(job: Job) -> units.Plan:
    """The job's plan: its header (read once per process for the job; ``created_at`` tells
    a new job that reuses an id apart) with ``UnitSpecs`` as its phases."""
    key = (job.pk, job.created_at)
    plan = _PLANS.get(key)
    if plan is None:
        header, num_phases = Job.objects.filter(pk=job.pk).values_list("plan", "num_phases").get()
        plan = units.Plan.from_json({**header, "phases": UnitSpecs(job.pk, num_phases)})
        _PLANS[key] = plan
        while len(_PLANS) > _PLANS_KEPT:
            _PLANS.popitem(last=False)
    else:
        _PLANS.move_to_end(key)
    return plan


def job_plan_forget(job_id: int) -> None:
    """Drop a job's cached plan (its units' specs, when loaded, can be large)."""
    for key in [k for k in _PLANS if k[0] == job_id]:
        del _PLANS[key]


# --- task messages ----------------------------------------------------------------------


def _broker_errors() -> tuple[type[BaseException], ...]:
    return (kombu.exceptions.OperationalError, redis.exceptions.ConnectionError, OSError)


def _broker_name() -> str:
    """The broker's address without credentials, for error messages."""
    url = settings.CELERY_BROKER_URL
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}" if rest else url


def enqueue_units(job_id: int, phase: int, unit_ids: list[int] | None = None) -> None:
    """Once the transaction commits, send a message for each queued unit of the phase (or of
    ``unit_ids`` among them)."""

    def send() -> None:
        ids = JobUnit.objects.filter(job_id=job_id, phase=phase, state=UnitState.QUEUED)
        if unit_ids is not None:
            ids = ids.filter(pk__in=unit_ids)
        _send(job_id, list(ids.order_by("index").values_list("pk", flat=True)))

    transaction.on_commit(send)


def send_units(job_id: int, pks: list[int]) -> bool:
    """Send one task per unit; on a broker error, fail the job (readable, retryable)."""
    if not pks:
        return True
    return _send(job_id, pks)


def _stamp(pks: Sequence[int]) -> None:
    now = timezone.now()
    for i in range(0, len(pks), SEND_CHUNK):
        JobUnit.objects.filter(pk__in=pks[i : i + SEND_CHUNK]).update(queued_at=now)


def _send(job_id: int, pks: list[int], *, dispatch: int | None = None, fresh: bool = False) -> bool:
    """Publish one message per unit. ``queued_at`` tells the sweeper when a unit's message
    was sent (``recovery.job_resend_lost`` sends again only units sent a lease before the
    oldest message still waiting in the queue, and not held by a worker), so it is kept
    fresh for every unit not yet published: stamped before the first message, then again
    whenever a third of the lease has passed while publishing (ten thousand messages can
    take longer than a lease). A sender that dies stops stamping, and its unpublished units
    are sent again a lease later. ``dispatch``: the phase whose next dispatch step is sent
    halfway through (``job_dispatch_execute``); ``fresh``: the units were stamped as they
    were queued, just now."""
    job_unit_run = task("workers.job_unit_run")
    renew = unit_lease().total_seconds() / 3
    stamped = time.monotonic() if fresh else -math.inf
    halfway = len(pks) // 2
    try:
        for i, pk in enumerate(pks):
            if dispatch is not None and i == halfway and not send_dispatch(job_id, dispatch):
                return False
            if time.monotonic() - stamped > renew:
                stamped = time.monotonic()
                _stamp(pks[i:])
            job_unit_run.apply_async(kwargs={"unit_id": pk})
    except _broker_errors() as exc:
        _broker_down(job_id, exc)
        return False
    return True


def enqueue_finalize(job_id: int) -> None:
    transaction.on_commit(lambda: send_finalize(job_id))


def send_finalize(job_id: int) -> bool:
    Job.objects.filter(pk=job_id).update(finalize_queued_at=timezone.now())
    try:
        task_send("workers.job_finalize", job_id=job_id)
    except _broker_errors() as exc:
        _broker_down(job_id, exc)
        return False
    return True


def _broker_down(job_id: int, exc: BaseException) -> None:
    log.error("job %s: the broker refused its tasks: %s", job_id, exc)
    job_fail(
        job_id,
        f"could not queue the job's tasks: the broker {_broker_name()} is unreachable "
        f"({describe(exc)}). Nothing ran; Retry once the broker is back.",
    )

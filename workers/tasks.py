"""Celery tasks. Each takes primary keys or plain values (keyword-only), never model
instances, and records its outcome in the database."""

from __future__ import annotations

import socket

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from shardcore import storage
from webapp.catalog.services import facts
from webapp.catalog.services.flags import flag_reads_compute, flag_taint_compute
from webapp.jobs.services import (
    TransientUnitError,
    job_dispatch_execute,
    job_finalize_execute,
    job_unit_execute,
    job_unit_give_up,
    transient_errors,
)
from webapp.ops.services import heartbeat_record
from webapp.ops.storage import storage_measure as storage_measure_execute


@shared_task(name="workers.heartbeat", acks_late=True, reject_on_worker_lost=True)
def heartbeat(*, nonce: str) -> int:
    """Prove a worker is alive and can write to the catalog. Idempotent on ``nonce``."""
    broker = settings.CELERY_BROKER_URL.split("://", 1)[0]
    worker = heartbeat.request.hostname or socket.gethostname()
    return heartbeat_record(worker=worker, broker=broker, nonce=nonce).pk


# Jobs: one task per unit of a shardcore plan, then one finalize task (webapp.jobs.services).
# Units are idempotent (completion markers), so acks_late + reject_on_worker_lost are safe:
# a redelivered unit either finds its row finished (skipped) or reruns to the same bytes.
_TRANSIENT_RETRIES = 5


@shared_task(
    name="workers.job_unit_run",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=_TRANSIENT_RETRIES,
)
def job_unit_run(self, *, unit_id: int) -> str:
    """Run one unit of a job. Transient errors (database or broker blips) retry with
    backoff; any other error is recorded on the unit and fails the job."""
    worker = self.request.hostname or socket.gethostname()
    try:
        return job_unit_execute(unit_id=unit_id, worker=worker)
    except TransientUnitError as exc:
        if self.request.retries >= _TRANSIENT_RETRIES:
            job_unit_give_up(unit_id=unit_id, reason=f"gave up after retries: {exc}")
            return "failed"
        raise self.retry(exc=exc, countdown=min(60, 2 ** (self.request.retries + 1))) from exc
    except SoftTimeLimitExceeded:
        job_unit_give_up(unit_id=unit_id, reason="exceeded the task soft time limit")
        return "failed"


@shared_task(
    name="workers.job_finalize",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=_TRANSIENT_RETRIES,
)
def job_finalize(self, *, job_id: int) -> str:
    """Write a job's manifest and record its artifact, after every unit finished."""
    try:
        return job_finalize_execute(job_id=job_id)
    except TransientUnitError as exc:
        raise self.retry(exc=exc, countdown=min(60, 2 ** (self.request.retries + 1))) from exc


@shared_task(
    name="workers.job_dispatch",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=_TRANSIENT_RETRIES,
)
def job_dispatch(self, *, job_id: int, phase: int) -> str:
    """Send the next batch of a phase's units (and, while more wait, the next dispatch):
    a phase of a million units is sent a bounded batch at a time, never by one task."""
    try:
        return job_dispatch_execute(job_id=job_id, phase=phase)
    except transient_errors() as exc:
        if self.request.retries >= _TRANSIENT_RETRIES:
            raise  # the sweep sends the dispatch again a lease later
        raise self.retry(exc=exc, countdown=min(60, 2 ** (self.request.retries + 1))) from exc


# Facts pages show, measured from an artifact's files (webapp.catalog.services.facts): idempotent,
# a redelivered message measures again and stores the same value.
@shared_task(
    name="workers.fact_compute",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=_TRANSIENT_RETRIES,
)
def fact_compute(self, *, kind: str, object_id: int, key: str = "") -> str:
    """Measure one fact (a pool's quality by a property, a source's statistics...) and
    store it; an object store that does not answer is retried with backoff."""
    try:
        return facts.fact_compute(kind=kind, object_id=object_id, key=key)
    except Exception as exc:
        if not storage.is_store_error(exc) or self.request.retries >= _TRANSIENT_RETRIES:
            raise
        raise self.retry(exc=exc, countdown=min(60, 2 ** (self.request.retries + 1))) from exc


@shared_task(
    name="workers.flag_taint",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=_TRANSIENT_RETRIES,
)
def flag_taint(self, *, flag_id: int) -> str:
    """Compute and store what a flag taints (then ask for its runs' first reads); a rerun
    stores the same rows. An object store that does not answer is retried with backoff."""
    try:
        return flag_taint_compute(flag_id=flag_id)
    except Exception as exc:
        if not storage.is_store_error(exc) or self.request.retries >= _TRANSIENT_RETRIES:
            raise
        raise self.retry(exc=exc, countdown=min(60, 2 ** (self.request.retries + 1))) from exc


@shared_task(name="workers.flag_reads", acks_late=True, reject_on_worker_lost=True)
def flag_reads(*, flag_id: int) -> int:
    """Store when each run a flag taints first reads a flagged document (the sample);
    a rerun computes only what is missing."""
    return flag_reads_compute(flag_id=flag_id)


# The storage report (webapp.ops.storage): measured here, never on a request. Idempotent: a
# redelivered message finds its row claimed or done.
@shared_task(
    name="workers.storage_measure",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=3000,
    time_limit=3300,
)
def storage_measure(*, report_id: int) -> str:
    """Measure what the data root holds and store it as the report's row."""
    return storage_measure_execute(report_id=report_id)

"""The sweeper: a thread in every worker's main process that keeps jobs moving without an
operator. Every ``SHARDYARD_SWEEP_INTERVAL`` seconds it

* queues again the units of dead workers (heartbeat older than ``SHARDYARD_UNIT_LEASE``)
  and sends again the queued units whose broker message was lost
  (``webapp.jobs.services.job_sweep``);
* starts a scrub job when the last one is older than ``SHARDYARD_SCRUB_INTERVAL``
  (``webapp.catalog.scrub.scrub_due_start``);
* queues a storage measurement when the newest is older than
  ``SHARDYARD_STORAGE_INTERVAL`` (``webapp.ops.storage.storage_measure_due``).

Every worker runs one, so the sweep survives the loss of any worker; they take turns
(``webapp.jobs.recovery.sweep_turn``: a Postgres advisory lock per queue, and the queue's
last sweep time), so a queue is swept once an interval by one of its workers, however
many serve it. The work is idempotent anyway (row locks and claims by state).
"""

from __future__ import annotations

import logging
import os
import socket
import threading

from django.conf import settings

from webapp.catalog.scrub import scrub_due_start
from webapp.jobs.services import job_sweep, sweep_turn
from webapp.ops.storage import storage_measure_due

log = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None


def sweep_once(*, queue: str | None = None) -> list[str]:

    lines = job_sweep(queue=queue)
    scrub = scrub_due_start()
    if scrub is not None:
        lines.append(f"job {scrub.pk}: scrub started (the last one is older than the interval)")
    measure = storage_measure_due(interval=settings.SHARDYARD_STORAGE_INTERVAL)
    if measure is not None:
        lines.append(f"storage measurement {measure.pk} queued (the last one is too old)")
    return lines


def sweep_if_due(*, queue: str, interval: float) -> list[str] | None:
    """Sweep when it is this worker's turn (None when it is another's)."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    with sweep_turn(queue=queue, worker=worker, interval=interval) as mine:
        return sweep_once(queue=queue) if mine else None


def _loop(interval: float, queue: str) -> None:
    from django.db import connection

    while not _stop.wait(interval):
        try:
            for line in sweep_if_due(queue=queue, interval=interval) or ():
                log.info("sweeper: %s", line)
        except Exception:  # the next sweep tries again; a worker never dies of its sweeper
            log.exception("sweeper: sweep failed")
        finally:
            connection.close()  # a fresh connection each sweep: survives a dropped one


def start(*, queue: str) -> None:
    global _thread
    from django.conf import settings

    interval = settings.SHARDYARD_SWEEP_INTERVAL
    if not interval or (_thread is not None and _thread.is_alive()):
        return
    _stop.clear()
    _thread = threading.Thread(
        target=_loop, args=(interval, queue), name="shardyard-sweeper", daemon=True
    )
    _thread.start()
    log.info("sweeper: every %s s on queue %s", interval, queue)


def stop() -> None:
    _stop.set()

"""The worker's beat: a thread in every worker's main process that writes the worker's own
row (name, host, queue, pid, last seen) every ``SHARDYARD_WORKER_BEAT`` seconds, so the
overview lists the live workers without pinging them. A database error skips a beat; the
next one tries again with a fresh connection."""

from __future__ import annotations

import logging
import os
import socket
import threading

from webapp.ops.services import worker_beat_record

log = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None


def beat_once(*, worker: str, queue: str, started_at) -> None:

    worker_beat_record(
        worker=worker or f"celery@{socket.gethostname()}",
        host=socket.gethostname(),
        queue=queue,
        pid=os.getpid(),
        started_at=started_at,
    )


def _loop(interval: float, worker: str, queue: str, started_at) -> None:
    from django.db import connection

    while True:
        try:
            beat_once(worker=worker, queue=queue, started_at=started_at)
        except Exception as exc:  # a worker never dies of its beat
            log.warning("beat skipped: %s", exc)
        finally:
            connection.close()
        if _stop.wait(interval):
            return


def start(*, worker: str, queue: str) -> None:
    global _thread
    from django.conf import settings
    from django.utils import timezone

    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    _thread = threading.Thread(
        target=_loop,
        args=(settings.SHARDYARD_WORKER_BEAT, worker, queue, timezone.now()),
        name="shardyard-beat",
        daemon=True,
    )
    _thread.start()


def stop() -> None:
    _stop.set()

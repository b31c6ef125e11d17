"""The worker's webhook thread: every SHARDYARD_WEBHOOK_POLL seconds, records the new
events' deliveries and sends the due ones (``webapp.ops.webhooks.webhooks_tick``). It runs
beside the work in the worker's main process, never in a task slot, so a receiver that
hangs costs this thread at most SHARDYARD_WEBHOOK_TIMEOUT per attempt and no job waits
for it. An error skips a round; the next one tries again."""

from __future__ import annotations

import logging
import threading

from webapp.ops.webhooks import webhooks_tick

log = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None


def _loop(interval: float) -> None:
    from django.db import connection

    while not _stop.is_set():
        try:
            webhooks_tick()
        except Exception as exc:  # a worker never dies of its webhooks
            log.warning("webhook round skipped: %s", exc)
        finally:
            connection.close()
        if _stop.wait(interval):
            return


def start() -> None:
    global _thread
    from django.conf import settings

    if settings.SHARDYARD_WEBHOOK_POLL <= 0:
        return
    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    _thread = threading.Thread(
        target=_loop, args=(settings.SHARDYARD_WEBHOOK_POLL,), name="shardyard-webhooks",
        daemon=True,
    )  # fmt: skip
    _thread.start()


def stop() -> None:
    _stop.set()

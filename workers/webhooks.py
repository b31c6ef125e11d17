"""The worker's webhook thread: every SHARDYARD_WEBHOOK_POLL seconds, records the new
events' deliveries and starts sending the due ones (``webapp.ops.webhooks``), each
endpoint's in a sender thread of its own, without waiting for them. It runs beside the
work in the worker's main process, never in a task slot, so no job waits for a receiver;
a slow receiver holds its own sender thread for at most SHARDYARD_WEBHOOK_TIMEOUT per
attempt and no other receiver waits for it. An error skips a round; the next one tries
again."""

from __future__ import annotations

import logging
import threading

from webapp.ops.webhooks import WebhookSender, events_collect

log = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None


def _loop(interval: float) -> None:
    from django.db import connection

    sender = WebhookSender()
    try:
        while not _stop.is_set():
            try:
                events_collect()
                sender.round()
            except Exception as exc:  # a worker never dies of its webhooks
                log.warning("webhook round skipped: %s", exc)
            finally:
                connection.close()
            # Sooner while sends are in flight, so that their outcomes are recorded soon.
            if _stop.wait(min(interval, 1.0) if sender.busy else interval):
                return
    finally:
        sender.close()


def start() -> None:
    global _thread
    from django.conf import settings

    if settings.SHARDYARD_WEBHOOK_POLL <= 0:
        return
    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    _thread = threading.Thread(
        target=_loop,
        args=(settings.SHARDYARD_WEBHOOK_POLL,),
        name="shardyard-webhooks",
        daemon=True,
    )
    _thread.start()


def stop() -> None:
    _stop.set()

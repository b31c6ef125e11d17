"""Celery tasks. Each takes primary keys or plain values (keyword-only), never model
instances, and records its outcome in the database."""

from __future__ import annotations

import socket

from celery import shared_task


@shared_task(name="workers.heartbeat", acks_late=True, reject_on_worker_lost=True)
def heartbeat(*, nonce: str) -> int:
    """Prove a worker is alive and can write to the catalog. Idempotent on ``nonce``."""
    from django.conf import settings

    from webapp.ops.services import heartbeat_record

    broker = settings.CELERY_BROKER_URL.split("://", 1)[0]
    worker = heartbeat.request.hostname or socket.gethostname()
    return heartbeat_record(worker=worker, broker=broker, nonce=nonce).pk

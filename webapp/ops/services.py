"""Writes for the ops app: recording heartbeats and creating the first admin."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from webapp.ops.models import Heartbeat, WorkerBeat


def heartbeat_record(*, worker: str, broker: str, nonce: str) -> Heartbeat:
    """Idempotent: a redelivered task with the same nonce records nothing new."""
    try:
        with transaction.atomic():
            return Heartbeat.objects.create(worker=worker, broker=broker, nonce=nonce)
    except IntegrityError:
        return Heartbeat.objects.get(nonce=nonce)


def admin_ensure(*, username: str, password: str | None, email: str = "") -> tuple[str, str | None]:
    """Create the admin user if it does not exist. Returns (username, password if created)."""
    User = get_user_model()
    if User.objects.filter(username=username).exists():
        return username, None
    password = password or secrets.token_urlsafe(12)
    User.objects.create_superuser(username=username, email=email, password=password)
    return username, password


def worker_beat_record(*, worker: str, host: str, queue: str, pid: int, started_at) -> None:
    """Upsert the worker's row with ``last_seen`` = now (one statement, no read)."""

    WorkerBeat.objects.update_or_create(
        worker=worker,
        defaults={
            "host": host,
            "queue": queue,
            "pid": pid,
            "started_at": started_at,
            "last_seen": timezone.now(),
        },
    )

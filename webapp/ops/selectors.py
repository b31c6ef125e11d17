"""Reads for the ops app."""

from datetime import timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from webapp.catalog.selectors.common import get_or_not_found
from webapp.jobs.models import JobUnit, UnitState
from webapp.ops.models import ExternalIdentity, Heartbeat, WorkerBeat


def heartbeat_recent(*, limit: int = 10) -> QuerySet[Heartbeat]:
    return Heartbeat.objects.order_by("-created_at")[:limit]


def identity_row(*, identity_id: int) -> ExternalIdentity:
    """A single sign-on identity with its account, or NotFound (a 404 page)."""
    return get_or_not_found(
        ExternalIdentity.objects.select_related("user"), "identity", pk=identity_id
    )


def workers_live(*, within_seconds: int | None = None) -> list[dict]:
    """The workers that signed in lately, newest first, each with the units it is running
    now (``JobUnit.worker`` is the same name@host) and whether it is still beating."""
    interval = max(float(getattr(settings, "SHARDYARD_WORKER_BEAT", 10)), 1.0)
    now = timezone.now()
    horizon = now - timedelta(seconds=within_seconds or 24 * 3600)
    beats = list(WorkerBeat.objects.filter(last_seen__gte=horizon).order_by("-last_seen")[:50])
    running: dict[str, list] = {}
    for u in (
        JobUnit.objects.filter(state=UnitState.RUNNING, worker__in=[b.worker for b in beats])
        .select_related("job")
        .only("id", "unit_id", "worker", "started_at", "job__id", "job__title")
    ):
        running.setdefault(u.worker, []).append(u)
    return [
        {
            "worker": b.worker,
            "host": b.host,
            "queue": b.queue,
            "pid": b.pid,
            "started_at": b.started_at,
            "last_seen": b.last_seen,
            # Three missed beats: the worker is gone (or its host is cut off).
            "alive": (now - b.last_seen).total_seconds() <= 3 * interval,
            "units": running.get(b.worker, []),
        }
        for b in beats
    ]

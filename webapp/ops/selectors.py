"""Reads for the ops app."""

from django.db.models import QuerySet

from webapp.ops.models import Heartbeat


def heartbeat_recent(*, limit: int = 10) -> QuerySet[Heartbeat]:
    return Heartbeat.objects.order_by("-created_at")[:limit]

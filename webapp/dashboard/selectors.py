"""Reads of the dashboard's own (users and roles), and page reads the catalog and jobs
selectors do not offer. Each runs a bounded number of queries."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Prefetch

from webapp.dashboard.permissions import _RANK, ROLES


def user_list() -> list[dict]:
    """Every user with their role and token, in two queries."""
    from django.contrib.auth.models import Group

    User = get_user_model()
    users = (
        User.objects.order_by("username")
        .select_related("auth_token")
        .prefetch_related(
            Prefetch("groups", queryset=Group.objects.filter(name__in=ROLES), to_attr="roles")
        )
    )
    out = []
    for u in users:
        if u.is_superuser:
            role = "admin"
        else:
            role = max([g.name for g in u.roles] or ["viewer"], key=_RANK.__getitem__)
        token = getattr(u, "auth_token", None)
        out.append({"user": u, "role": role, "token_created": token.created if token else None})
    return out


def overview() -> dict:
    """Everything the overview page shows."""
    from webapp.ops.selectors import heartbeat_recent

    return {"heartbeats": list(heartbeat_recent(limit=10))}

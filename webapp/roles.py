"""The one permission helper. Roles are ordered: admin can do what an editor can, an editor
what a trainer can, a trainer what a viewer can. Any signed-in user is at least a viewer
(login is required everywhere, so looking needs no group); superusers are admins.

A trainer is the least privilege a training job's token needs: it reads like a viewer and
may register runs and report their progress, nothing else (no sources, pools, flags or
jobs). Which runs a user may write is ``may_write_run``: its owner's, its team's (a group
the user belongs to), or any for an admin. ``user_roles`` lists every user with their
role (the users page)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch

ROLES = ("viewer", "trainer", "editor", "admin")
_RANK = {name: i for i, name in enumerate(ROLES)}


def role_from_groups(group_names, *, is_superuser: bool = False) -> str:
    """The highest role among a user's group names (other groups are ignored)."""
    if is_superuser:
        return "admin"
    return max([n for n in group_names if n in _RANK] or ["viewer"], key=_RANK.__getitem__)


def user_role(user) -> str | None:
    """The highest role of ``user``; None for anonymous users. API token authentication
    reads the role with the token (``webapp.api.authentication``) and sets
    ``_shardyard_role``; pages read it here, once per request."""
    if not getattr(user, "is_authenticated", False):
        return None
    if user.is_superuser:
        return "admin"
    cached = getattr(user, "_shardyard_role", None)
    if cached is None:
        names = user.groups.filter(name__in=ROLES).values_list("name", flat=True)
        cached = role_from_groups(names)
        user._shardyard_role = cached  # one query per request, however many checks
    return cached


def has_role(user, role: str) -> bool:
    if role not in _RANK:
        raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    current = user_role(user)
    return current is not None and _RANK[current] >= _RANK[role]


def may_write_run(user, run) -> bool:
    """Whether ``user`` may report progress to (or re-register) ``run``: its owner, a member
    of its team, or an admin. A run nobody owns (registered by an operator's command) is
    written by admins only."""
    if user_role(user) == "admin":
        return True
    if not has_role(user, "trainer"):
        return False
    if run.created_by_id is not None and run.created_by_id == user.pk:
        return True
    return run.team_id is not None and user.groups.filter(pk=run.team_id).exists()


def require_role(user, role: str) -> None:
    """Raise PermissionDenied (403 in pages and in the API) unless ``user`` has ``role``."""
    if not has_role(user, role):
        raise PermissionDenied(f"this needs the {role} role")


def user_roles() -> list[dict]:
    """Every user with their role and when their API token was issued (None: no token),
    and their single sign-on identities, by user name, in three queries."""
    users = (
        get_user_model()
        .objects.order_by("username")
        .select_related("auth_token")
        .prefetch_related(
            Prefetch("groups", queryset=Group.objects.filter(name__in=ROLES), to_attr="roles"),
            "identities",
        )
    )
    out = []
    for u in users:
        role = role_from_groups([g.name for g in u.roles], is_superuser=u.is_superuser)
        token = getattr(u, "auth_token", None)
        out.append({"user": u, "role": role, "token_created": token.created if token else None})
    return out

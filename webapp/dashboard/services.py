"""Writes of the dashboard's own: users, roles and API tokens. Catalog and job writes are
the services of webapp.catalog and webapp.jobs; the views call those directly."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework.authtoken.models import Token

from webapp.roles import ROLES


def _role_group(role: str) -> Group:
    if role not in ROLES:
        raise ValidationError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    return Group.objects.get_or_create(name=role)[0]


@transaction.atomic
def user_create(*, username: str, password: str, role: str, email: str = ""):
    """A new user holding exactly one role."""
    User = get_user_model()
    group = _role_group(role)
    if User.objects.filter(username=username).exists():
        raise ValidationError(f"a user named {username!r} exists already")
    user = User.objects.create_user(username=username, password=password, email=email)
    user.groups.add(group)
    return user


@transaction.atomic
def user_role_set(*, user, role: str) -> None:
    """Replace the user's role; other (non-role) groups stay."""
    group = _role_group(role)
    user.groups.remove(*Group.objects.filter(name__in=ROLES).exclude(pk=group.pk))
    user.groups.add(group)
    user.__dict__.pop("_shardyard_role", None)


@transaction.atomic
def token_issue(*, user) -> Token:
    """A fresh API token for ``user``; any previous token stops working."""
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user)


def token_revoke(*, user) -> bool:
    """Delete the user's token. Returns whether there was one."""
    deleted, _ = Token.objects.filter(user=user).delete()
    return deleted > 0

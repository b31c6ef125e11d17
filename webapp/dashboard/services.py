"""Writes of the dashboard's own: users, roles, API tokens and single sign-on links. Catalog and job writes are
the services of webapp.catalog and webapp.jobs; the views call those directly."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework.authtoken.models import Token

from webapp.ops.models import ExternalIdentity
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


def identity_link(*, user, issuer: str, subject: str, linked_by: str = "admin") -> ExternalIdentity:
    """Link an identity provider's user (issuer, subject) to an existing local account, so its
    single sign-on reaches that account. Refuses superusers and an identity linked already."""
    issuer, subject = issuer.strip(), subject.strip()
    if not issuer or not subject:
        raise ValidationError("an identity needs both the provider's issuer and subject")
    if user.is_superuser:
        raise ValidationError(
            f"{user.username} is a superuser: superusers sign in with their local password only"
        )
    taken = ExternalIdentity.objects.filter(issuer=issuer, subject=subject).first()
    if taken is not None:
        raise ValidationError(
            f"the identity {subject!r} of {issuer} is linked to {taken.user.username} already"
        )
    return ExternalIdentity.objects.create(
        issuer=issuer, subject=subject, user=user, linked_by=linked_by
    )


def identity_unlink(*, identity: ExternalIdentity) -> None:
    """Remove a link: the identity's next sign-in makes a new account instead."""
    identity.delete()

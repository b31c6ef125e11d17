"""Writes of the dashboard's own: users, roles and API tokens. Catalog and job writes are
the services of webapp.catalog and webapp.jobs; the views call those directly."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework.authtoken.models import Token

from webapp.dashboard.permissions import ROLES


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


# --- training runs ----------------------------------------------------------------------
# Written here because the catalog services do not offer them yet (see the final report of
# the dashboard work); the API and the pages call only these.


class RunError(ValidationError):
    """A run request the catalog state does not allow."""


def run_register(*, name: str, mixture_version_id: int, external_id: str = "", created_by=None):
    """Register a training run against a built mixture version. Idempotent by name: a
    trainer retrying after a lost answer gets the same run back."""
    from webapp.catalog.models import ArtifactStatus, MixtureVersion, TrainingRun

    version = MixtureVersion.objects.filter(pk=mixture_version_id).first()
    if version is None:
        raise RunError(f"no mixture version {mixture_version_id}")
    if version.status != ArtifactStatus.READY:
        raise RunError(f"mixture version {version} is {version.status}; train on a ready one")
    with transaction.atomic():
        run, created = TrainingRun.objects.get_or_create(
            name=name,
            defaults={
                "mixture_version": version,
                "external_id": external_id,
                "created_by": created_by,
            },
        )
    if not created and run.mixture_version_id != version.pk:
        raise RunError(f"run {name!r} exists already, on mixture version {run.mixture_version_id}")
    if created:
        # A run on a tainted version is tainted from its first step.
        from webapp.catalog.models import Taint

        flags = Taint.objects.filter(mixture_version=version).values_list("flag_id", "documents")
        Taint.objects.bulk_create(
            [Taint(flag_id=f, run=run, documents=n) for f, n in flags], ignore_conflicts=True
        )
    return run


def run_progress_record(
    *,
    run_id: int,
    step: int,
    consumed_samples: int | None = None,
    consumed_tokens: int | None = None,
    seq_len: int | None = None,
):
    """Record that the run consumed this much by ``step``. Samples and tokens are related by
    the pools' sequence length (one sample = one record of ``seq_len`` training tokens), so
    either may be given. Idempotent per (run, step): a retried report changes nothing."""
    from django.utils import timezone

    from webapp.catalog.models import RunProgress, TrainingRun

    if consumed_samples is None and consumed_tokens is None:
        raise RunError("give consumed_samples or consumed_tokens")
    with transaction.atomic():
        run = TrainingRun.objects.select_for_update().get(pk=run_id)
        if seq_len is None:
            seq_len = _version_seq_len(run.mixture_version_id)
        if consumed_samples is None:
            consumed_samples = consumed_tokens // seq_len if seq_len else 0
        if consumed_tokens is None:
            consumed_tokens = consumed_samples * seq_len
        if RunProgress.objects.filter(run=run, step=step).exists():
            return run
        RunProgress.objects.create(
            run=run, step=step, consumed_samples=consumed_samples, consumed_tokens=consumed_tokens
        )
        if step >= run.last_step:
            run.last_step = step
            run.consumed_samples = consumed_samples
            run.consumed_tokens = consumed_tokens
            run.last_reported_at = timezone.now()
            if run.state == TrainingRun.State.REGISTERED:
                run.state = TrainingRun.State.RUNNING
            run.save(
                update_fields=[
                    "last_step",
                    "consumed_samples",
                    "consumed_tokens",
                    "last_reported_at",
                    "state",
                ]
            )
    return run


def _version_seq_len(version_id: int) -> int:
    from webapp.catalog.models import MixtureComponent

    lens = (
        MixtureComponent.objects.filter(version_id=version_id)
        .values_list("pool__seq_len", flat=True)
        .distinct()
    )
    return max(lens, default=0)

"""Login throttling by client: after ``settings.LOGIN_ATTEMPTS`` failed logins for one user
name from one client address, or ``settings.LOGIN_ADDRESS_ATTEMPTS`` from one client address
over any user names, within ``settings.LOGIN_WINDOW`` seconds, further attempts from that
client (for that name) are refused without checking the password (429 on the login page;
the admin's login, which goes through the same authentication backend, simply fails).
Failures never lock a user name out from everywhere: whoever guesses a name's password
from one address slows down that address only, and the real user signs in from theirs.
Failures are rows in the database, so every web process (gunicorn workers, hosts) counts
the same attempts. A successful login clears its user name's failures from its address.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.utils import timezone

from webapp.dashboard.models import LoginFailure


def client_address(request) -> str:
    """The client's address: REMOTE_ADDR (a proxy in front must set it, e.g. gunicorn's
    --forwarded-allow-ips with a trusted proxy); never a header the client chooses."""
    if request is None:
        return ""
    return (request.META.get("REMOTE_ADDR") or "")[:64]


def login_throttled(*, username: str, address: str) -> bool:
    """Whether this address used up its failed attempts for this user name, or for all
    user names together."""

    since = timezone.now() - timedelta(seconds=settings.LOGIN_WINDOW)
    recent = LoginFailure.objects.filter(at__gte=since, address=address)
    if recent.count() >= settings.LOGIN_ADDRESS_ATTEMPTS:
        return True
    return recent.filter(username=username[:150]).count() >= settings.LOGIN_ATTEMPTS


def login_failure_record(*, username: str, address: str) -> None:

    LoginFailure.objects.create(username=(username or "")[:150], address=address)
    # Keep the table small: failures older than the window count for nothing.
    LoginFailure.objects.filter(
        at__lt=timezone.now() - timedelta(seconds=settings.LOGIN_WINDOW)
    ).delete()


class ThrottledModelBackend(ModelBackend):
    """Django's model backend behind the throttle (every login form uses it)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        name = username or kwargs.get("username") or ""
        if login_throttled(username=name, address=client_address(request)):
            raise PermissionDenied("too many failed logins")
        return super().authenticate(request, username=username, password=password, **kwargs)


@receiver(user_login_failed)
def _on_failure(sender, credentials, request=None, **kwargs):
    login_failure_record(
        username=str((credentials or {}).get("username") or ""), address=client_address(request)
    )


@receiver(user_logged_in)
def _on_success(sender, request, user, **kwargs):

    LoginFailure.objects.filter(
        username=user.get_username(), address=client_address(request)
    ).delete()

"""Single sign-on through OpenID Connect (mozilla-django-oidc), on when
SHARDYARD_OIDC_CLIENT_ID is set; local accounts stay (``make run`` uses only them).

Who a provider's user is: the ID token's issuer and subject (``iss``, ``sub``), which the
provider signs and never reassigns, never a name or an e-mail address, which its users can
often choose. An identity reaches a local user only through an ``ExternalIdentity`` row:
- the provider's user's first sign-in makes a new local user and links it (a name already
  taken locally gets a suffix: an identity-provider user called ``admin`` is not the local
  ``admin``);
- an admin links an existing account to an identity on the users page;
- with SHARDYARD_OIDC_LINK_VERIFIED_EMAIL=1, an identity whose e-mail claim the provider
  marks verified (``email_verified``) links to the one local user with that address.
A superuser is never linked, and a linked user who became one can no longer sign in through
the provider (superusers sign in with their local password).

The identity provider's groups claim (SHARDYARD_OIDC_GROUPS_CLAIM, ``groups`` by default)
decides the user's Shardyard role at every sign-in: a group named like a role (viewer,
trainer, editor, admin) is that role, and SHARDYARD_OIDC_ROLE_MAP maps the provider's own
names (``data-eng=editor,ml-research=trainer``). The user is put in exactly the role groups
the claim maps to (removed from the others), so a change at the provider takes effect at the
next sign-in.

Every call to the provider has a deadline (SHARDYARD_OIDC_TIMEOUT seconds), and a provider
that fails, hangs or answers with an error sends the user back to the login page with the
reason, never a server error."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import re
import socket
import ssl
import threading
import time
from urllib.parse import urlencode, urlsplit

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import Group
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.http import Http404
from django.utils.encoding import smart_str
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView
from requests.structures import CaseInsensitiveDict

from webapp.ops.models import ExternalIdentity
from webapp.ops.oidc_map import parse_role_map  # noqa: F401 - re-exported
from webapp.roles import ROLES

log = logging.getLogger(__name__)

_NAME_UNSAFE = re.compile(r"[^\w.@+-]")
# An answer from the provider larger than this is refused (keys, tokens and claims are KBs).
MAX_ANSWER_BYTES = 1 << 20


def provider_call(
    method: str, url: str, *, seconds: float, body: bytes | None = None, headers=None
) -> requests.Response:
    """One HTTP call to the identity provider that ends within ``seconds`` in all: a socket
    timeout alone bounds each read, so a provider trickling a byte at a time could hold the
    web thread for hours; here a timer shuts the socket down at the deadline. Raises
    requests.Timeout at the deadline, requests.ConnectionError when unreachable, and returns
    a requests.Response (``raise_for_status`` works as usual)."""
    parts = urlsplit(url)
    start = time.monotonic()
    if parts.scheme == "https":
        context = ssl.create_default_context()
        if not getattr(settings, "OIDC_VERIFY_SSL", True):
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname or "", parts.port, timeout=seconds, context=context
        )
    elif parts.scheme == "http":
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=seconds)
    else:
        raise requests.ConnectionError(f"{url}: not an http(s) address")
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(seconds, cut)
    timer.daemon = True
    timer.start()
    try:
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        conn.request(method, path, body=body, headers=dict(headers or {}))
        answer = conn.getresponse()
        content = answer.read(MAX_ANSWER_BYTES + 1)
        if expired.is_set():  # the cut socket read as an early end of the answer
            raise OSError("cut at the deadline")
        if len(content) > MAX_ANSWER_BYTES:
            raise requests.ConnectionError(f"{url}: answer over {MAX_ANSWER_BYTES} bytes")
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set() or time.monotonic() - start >= seconds:
            raise requests.Timeout(f"{url}: no whole answer within {seconds} s") from None
        raise requests.ConnectionError(f"{url}: {exc}") from None
    finally:
        timer.cancel()
        conn.close()
    response = requests.Response()
    response.status_code = answer.status
    response.headers = CaseInsensitiveDict(answer.getheaders())
    response._content = content
    response.url = url
    response.encoding = "utf-8"
    return response


class SignInRefused(SuspiciousOperation):
    """The provider's answer does not let this identity in; the message is shown to the user."""


def roles_from_claims(claims: dict) -> set[str]:
    names = claims.get(settings.SHARDYARD_OIDC_GROUPS_CLAIM) or []
    if isinstance(names, str):
        names = [names]
    mapping = settings.SHARDYARD_OIDC_ROLE_MAP
    return {mapping.get(n, n) for n in names if mapping.get(n, n) in ROLES}


def email_verified(claims: dict) -> bool:
    """Whether the provider vouches for the e-mail claim (some send the string "true")."""
    flag = claims.get("email_verified")
    return flag is True or (isinstance(flag, str) and flag.lower() == "true")


def identity_of(payload: dict, claims: dict) -> tuple[str, str]:
    """(issuer, subject) from the signed ID token, checked against the user-info claims and
    the configured issuer; SignInRefused when they are missing or disagree."""
    issuer, subject = payload.get("iss"), payload.get("sub")
    if not isinstance(issuer, str) or not issuer or not isinstance(subject, str) or not subject:
        raise SignInRefused("the identity provider's token names no issuer or subject")
    expected = settings.SHARDYARD_OIDC_ISSUER
    if expected and issuer.rstrip("/") != expected.rstrip("/"):
        raise SignInRefused(f"the token's issuer {issuer!r} is not the configured {expected!r}")
    if claims.get("sub") != subject:
        # OpenID Connect Core 5.3.2: user info for another subject must not be used.
        raise SignInRefused("the identity provider's user info is for another subject")
    if len(issuer) > 255 or len(subject) > 255:
        raise SignInRefused("the identity provider's issuer or subject is over 255 characters")
    return issuer, subject


class RoleMappingBackend(OIDCAuthenticationBackend):
    """Finds the local user linked to the provider's identity (or makes one), then sets its
    roles from the provider's groups."""

    def authenticate(self, request, **kwargs):
        try:
            return super().authenticate(request, **kwargs)
        except requests.Timeout:
            reason = f"did not answer within {settings.OIDC_TIMEOUT} seconds"
        except requests.HTTPError as exc:
            status = exc.response.status_code if exc.response is not None else "no"
            reason = f"refused the sign-in (HTTP {status})"
        except requests.RequestException as exc:
            reason = f"could not be reached ({type(exc).__name__})"
        except (SuspiciousOperation, ValueError) as exc:
            # A token that fails verification, or an answer that is not JSON.
            reason = f"sent an answer that does not verify ({exc})"
        log.warning("single sign-on failed: the identity provider %s", reason)
        if request is not None:
            messages.error(request, f"Single sign-on failed: the identity provider {reason}.")
        return None

    # The provider's three calls, each with a deadline for the whole answer (provider_call).
    def get_token(self, payload):
        response = provider_call(
            "POST",
            self.OIDC_OP_TOKEN_ENDPOINT,
            seconds=settings.OIDC_TIMEOUT,
            body=urlencode(payload).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        self.raise_token_response_error(response)
        return response.json()

    def get_userinfo(self, access_token, id_token, payload):
        response = provider_call(
            "GET",
            self.OIDC_OP_USER_ENDPOINT,
            seconds=settings.OIDC_TIMEOUT,
            headers={"Authorization": f"Bearer {access_token}"},
        )
        response.raise_for_status()
        if response.headers.get("content-type", "").lower().startswith("application/jwt"):
            return self.verify_token(response.text)
        return response.json()

    def retrieve_matching_jwk(self, token):
        response = provider_call("GET", self.OIDC_OP_JWKS_ENDPOINT, seconds=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        header = jwt.get_unverified_header(token)
        kid, alg = smart_str(header.get("kid", "")), smart_str(header.get("alg", ""))
        for key in response.json().get("keys", []):
            if key.get("kid") == kid and key.get("alg", alg) == alg:
                return jwt.PyJWK(key)
        raise SuspiciousOperation("the provider's keys hold none matching the token's")

    def get_or_create_user(self, access_token, id_token, payload):
        claims = self.get_userinfo(access_token, id_token, payload)
        try:
            issuer, subject = identity_of(payload, claims)
            with transaction.atomic():
                user = self._linked_user(issuer, subject, claims)
                if user.is_superuser:
                    raise SignInRefused(
                        f"{user.username} is a superuser, who signs in with a local password"
                    )
                if not user.is_active:
                    raise SignInRefused(f"the account {user.username} is deactivated")
                return self.update_user(user, claims)
        except SignInRefused as exc:
            messages.error(self.request, f"Single sign-on refused: {exc}.")
            raise

    def _linked_user(self, issuer: str, subject: str, claims: dict):
        link = (
            ExternalIdentity.objects.select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if link is not None:
            return link.user
        user = self._user_by_verified_email(claims)
        how = "verified-email"
        if user is None:
            user, how = self._new_user(issuer, subject, claims), "sign-in"
        try:
            with transaction.atomic():
                ExternalIdentity.objects.create(
                    issuer=issuer, subject=subject, user=user, linked_by=how
                )
        except IntegrityError:
            # The same identity's concurrent first sign-in linked it first: use that link.
            return ExternalIdentity.objects.get(issuer=issuer, subject=subject).user
        return user

    def _user_by_verified_email(self, claims: dict):
        email = claims.get("email")
        if not settings.SHARDYARD_OIDC_LINK_VERIFIED_EMAIL or not email_verified(claims):
            return None
        if not isinstance(email, str) or "@" not in email:
            return None
        users = list(self.UserModel.objects.filter(email__iexact=email)[:2])
        if len(users) != 1 or users[0].is_superuser:
            return None  # none, ambiguous, or a superuser: a new account instead
        return users[0]

    def _new_user(self, issuer: str, subject: str, claims: dict):
        email = claims.get("email") if email_verified(claims) else ""
        base = claims.get("preferred_username") or (claims.get("email") or "").split("@")[0]
        base = _NAME_UNSAFE.sub("-", str(base or "user"))[:120] or "user"
        name = base
        if self.UserModel.objects.filter(username=name).exists():
            # A name taken locally is somebody else's account: suffix the identity's hash.
            digest = hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()[:8]
            name = f"{base}-sso-{digest}"
        user = self.UserModel.objects.create_user(name, email=email or "")
        user.set_unusable_password()  # signs in through the provider only
        user.save(update_fields=["password"])
        return user

    def update_user(self, user, claims):
        roles = roles_from_claims(claims)
        current = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        for name in current - roles:
            user.groups.remove(Group.objects.get(name=name))
        for name in roles - current:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
        email = claims.get("email")
        if email_verified(claims) and isinstance(email, str) and user.email != email:
            user.email = email
            user.save(update_fields=["email"])
        return user


def _only_when_on(view):
    def wrapped(request, *args, **kwargs):
        if not settings.SHARDYARD_OIDC_ENABLED:
            raise Http404("single sign-on is not configured")
        return view(request, *args, **kwargs)

    return login_not_required(wrapped)


authenticate = _only_when_on(OIDCAuthenticationRequestView.as_view())
callback = _only_when_on(OIDCAuthenticationCallbackView.as_view())


def sso(request) -> dict:
    """Template context: whether the login page offers single sign-on."""
    return {"sso_enabled": settings.SHARDYARD_OIDC_ENABLED}

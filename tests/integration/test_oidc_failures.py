"""Single sign-on when the identity provider misbehaves: one that accepts the connection and
never answers (or trickles), and one that answers the token request with an error. Each
sign-in returns to the login page with the reason within the configured deadline; none is a
server error or a web thread held for good. Also: the users page refuses to link a superuser."""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import parse_qs, urlparse

import pytest

pytestmark = pytest.mark.django_db


class Provider:
    """A TCP server on loopback that answers every request with ``mode``: "hang" (reads the
    request, sends nothing), "trickle" (one byte of a never-ending header every 0.3 s) or
    "error" (HTTP 400 with an OAuth error body)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.requests += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            if self.mode == "error":
                body = b'{"error": "invalid_grant"}'
                conn.sendall(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
                )
                return
            if self.mode == "trickle":
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                while not self.stop.is_set():
                    try:
                        conn.sendall(b"X")
                    except OSError:
                        return
                    time.sleep(0.3)
            self.stop.wait(60)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def sso(settings):
    def configure(provider: Provider) -> None:
        settings.SHARDYARD_OIDC_ENABLED = True
        settings.OIDC_RP_CLIENT_ID = "shardyard"
        settings.OIDC_RP_CLIENT_SECRET = "secret"
        settings.OIDC_OP_AUTHORIZATION_ENDPOINT = provider.url + "/authorize"
        settings.OIDC_OP_TOKEN_ENDPOINT = provider.url + "/token"
        settings.OIDC_OP_USER_ENDPOINT = provider.url + "/userinfo"
        settings.OIDC_OP_JWKS_ENDPOINT = provider.url + "/jwks"
        settings.OIDC_RP_SIGN_ALGO = "RS256"
        settings.OIDC_TIMEOUT = 1
        settings.AUTHENTICATION_BACKENDS = [
            *settings.AUTHENTICATION_BACKENDS,
            "webapp.ops.oidc.RoleMappingBackend",
        ]

    return configure


def callback_after_authorize(client) -> object:
    """Start a sign-in as the browser would, then come back from the provider with a code."""
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302
    state = parse_qs(urlparse(start["Location"]).query)["state"][0]
    return client.get("/oidc/callback/", {"code": "a-code", "state": state}, follow=True)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("hang", "did not answer within 1 seconds"),
        ("trickle", "did not answer within 1 seconds"),
        ("error", "refused the sign-in (HTTP 400)"),
    ],
)
def test_it_returns_to_the_login_page_with_the_reason(client, sso, mode, reason):
    provider = Provider(mode)
    try:
        sso(provider)
        response = callback_after_authorize(client)
    finally:
        provider.close()
    assert response.status_code == 200
    assert response.redirect_chain[-1][0].startswith("/accounts/login/")
    assert f"Single sign-on failed: the identity provider {reason}." in response.text
    assert provider.requests == 1
    assert not response.wsgi_request.user.is_authenticated


def test_it_refuses_to_link_a_superuser(client, django_user_model, settings):
    settings.SHARDYARD_OIDC_ENABLED = True
    admin = django_user_model.objects.create_superuser("root", "", "root-password-123")
    client.force_login(admin)
    response = client.post(
        f"/users/{admin.pk}/identity/",
        {"issuer": "https://idp.example.org", "subject": "42"},
        follow=True,
    )
    assert "root is a superuser: superusers sign in with their local password only" in (
        response.text
    )
    assert not admin.identities.exists()

"""A real OpenID Connect provider (django-oidc-provider in its own Django project,
tests/support/oidc_provider) run as a server process on a free loopback port, with a
client for Shardyard and users with groups."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class OidcProvider:
    url: str  # the issuer: http://127.0.0.1:<port>/openid
    client_id: str
    client_secret: str
    proc: subprocess.Popen
    log_path: Path

    @classmethod
    def start(cls, *, tmp: Path, redirect_uri: str, users: list[dict]) -> OidcProvider:
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.support.oidc_provider.settings",
               "OIDC_TEST_DB": str(tmp / "idp.sqlite3"), "PYTHONPATH": str(ROOT)}  # fmt: skip
        spec = {"client_id": "shardyard-test", "client_secret": "idp-client-secret-123",
                "redirect_uri": redirect_uri, "users": users}  # fmt: skip
        subprocess.run([sys.executable, "-m", "tests.support.oidc_provider.bootstrap",
                        json.dumps(spec)], env=env, cwd=ROOT, check=True,
                       capture_output=True)  # fmt: skip
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log_path = tmp / "idp.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{port}", "--noreload"],
            env=env, cwd=ROOT, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}/openid"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/.well-known/openid-configuration") as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    log = log_path.read_text()
                    raise RuntimeError(f"the OIDC provider did not start: {log}") from None
                time.sleep(0.2)
        return cls(url, spec["client_id"], spec["client_secret"], proc, log_path)

    def configure(self, settings, *, role_map: dict[str, str]) -> None:
        """Point Shardyard's single sign-on (pytest-django's ``settings``) at this provider,
        as SHARDYARD_OIDC_* would: its endpoints and issuer from its discovery document."""
        info = self.discovery()
        settings.SHARDYARD_OIDC_ENABLED = True
        settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = (
            self.client_id,
            self.client_secret,
        )
        settings.OIDC_OP_AUTHORIZATION_ENDPOINT = info["authorization_endpoint"]
        settings.OIDC_OP_TOKEN_ENDPOINT = info["token_endpoint"]
        settings.OIDC_OP_USER_ENDPOINT = info["userinfo_endpoint"]
        settings.OIDC_OP_JWKS_ENDPOINT = info["jwks_uri"]
        settings.OIDC_RP_SIGN_ALGO = "RS256"
        settings.OIDC_RP_SCOPES = "openid email profile groups"
        settings.SHARDYARD_OIDC_ISSUER = info["issuer"]
        settings.AUTHENTICATION_BACKENDS = [
            *settings.AUTHENTICATION_BACKENDS,
            "webapp.ops.oidc.RoleMappingBackend",
        ]
        settings.SHARDYARD_OIDC_ROLE_MAP = role_map

    def discovery(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/.well-known/openid-configuration") as r:
            return json.loads(r.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

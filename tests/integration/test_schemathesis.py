# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Schemathesis drives every operation of /api/schema/ against a live server, as an editor
(so writes run too): no generated request may cause a server error."""

import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from tests.integration.dashboard_fixtures import catalog, users  # noqa: F401
from workers.celery import ensure_broker_dirs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


def test_it_answers_every_generated_request_without_a_server_error(
    live_server, users, catalog, celery_queue, settings
):
    # Job retries enqueue units into this session's own queue (Redis in CI, the filesystem
    # broker locally, whose folders must exist).
    ensure_broker_dirs()
    token = Token.objects.get_or_create(user=users["editor"])[0].key
    out = subprocess.run(
        [
            str(SCHEMATHESIS), "run", f"{live_server.url}/api/schema/",
            "--url", live_server.url,
            "-H", f"Authorization: Token {token}",
            "--checks", "not_a_server_error",
            "--max-examples", "15",
            "--seed", "7",
            "--generation-deterministic",
            "--workers", "1",
            "--phases", "examples,fuzzing",
            "--request-timeout", "30",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    print(out.stdout[-3000:])
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "passed" in out.stdout

"""Health and readiness probes: public, and /readyz answers 503 when something is down (a
broker port nobody listens on, a database server that refuses the connection). Anonymous
callers get the status alone; a signed-in admin gets what is down and why (the errors name
internal hosts and ports); the log always says it."""

from __future__ import annotations

import socket

import pytest
from django.db import connections

pytestmark = pytest.mark.services


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nobody listens


def test_healthz_answers_without_login(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.fixture
def admin(django_user_model):
    return django_user_model.objects.create_superuser("root", password="pw-123456789")


def test_readyz_is_ready_when_database_and_broker_answer(client, postgres, redis_url, admin):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ready"}
    client.force_login(admin)
    response = client.get("/readyz")
    assert response.json() == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}


def test_readyz_tells_only_an_admin_which_broker_is_down(
    client, postgres, redis_url, settings, admin, django_user_model, caplog
):
    port = closed_port()
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable"}  # no host, no port, no error
    assert str(port).encode() not in response.content
    assert "readyz: broker is down: ConnectionError" in caplog.text and str(port) in caplog.text
    viewer = django_user_model.objects.create_user("someone", password="pw-123456789")
    client.force_login(viewer)
    assert client.get("/readyz").json() == {"status": "unavailable"}
    client.force_login(admin)
    body = client.get("/readyz").json()
    assert body["down"] == ["broker"] and body["checks"]["database"] == "ok"
    assert "ConnectionError" in body["checks"]["broker"], body


def test_readyz_logs_the_database_when_it_is_down(client, transactional_db, redis_url, caplog):
    conn = connections["default"]
    if conn.vendor != "postgresql":
        pytest.skip("the database is not a server here")
    saved = dict(conn.settings_dict)
    conn.close()
    conn.settings_dict["PORT"] = closed_port()
    try:
        response = client.get("/readyz")
    finally:
        conn.close()
        conn.settings_dict.clear()
        conn.settings_dict.update(saved)
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable"}
    assert "readyz: database is down: OperationalError" in caplog.text
    assert client.get("/readyz").status_code == 200  # back once the database answers

"""Health and readiness probes: public, and /readyz answers 503 naming what is down (a
broker port nobody listens on, a database server that refuses the connection)."""

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


def test_readyz_is_ready_when_database_and_broker_answer(client, postgres, redis_url):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}


def test_readyz_names_the_broker_when_it_is_down(client, postgres, redis_url, settings):
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["down"] == ["broker"] and body["checks"]["database"] == "ok"
    assert "ConnectionError" in body["checks"]["broker"], body


def test_readyz_names_the_database_when_it_is_down(client, transactional_db, redis_url):
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
    body = response.json()
    assert body["down"] == ["database"] and body["checks"]["broker"] == "ok"
    assert "OperationalError" in body["checks"]["database"], body
    assert client.get("/readyz").status_code == 200  # back once the database answers

# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""An object store that accepts connections and never answers (a frozen S3 endpoint): a
version page hung until gunicorn killed the worker (botocore's 60 s timeouts, 8 attempts).
Every S3 request is bounded (SHARDYARD_S3_CONNECT_TIMEOUT, SHARDYARD_S3_READ_TIMEOUT,
SHARDYARD_S3_ATTEMPTS): the pages and the API that read an artifact answer 503 naming the
endpoint, and the pages that read only the catalog still answer. The frozen server is a
real listening socket that accepts every connection and never writes a byte."""

from __future__ import annotations

import socket
import threading

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from shardcore import config, storage
from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from webapp.catalog.models import (
    ArtifactStatus,
    Mixture,
    MixtureComponent,
    MixtureVersion,
    Pool,
    TrainingRun,
)

# The requests run in a thread of their own (to notice a hang): it sees committed rows only.
pytestmark = pytest.mark.django_db(transaction=True)


class FrozenServer:
    """Listens on a free local port, accepts, reads nothing and answers nothing."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.endpoint = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self.accepted = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            self.accepted += 1

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def frozen(monkeypatch, settings):
    server = FrozenServer()
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    # Short bounds so that the test is quick; the defaults are checked below.
    monkeypatch.setenv("SHARDYARD_S3_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("SHARDYARD_S3_READ_TIMEOUT", "1")
    monkeypatch.setenv("SHARDYARD_S3_ATTEMPTS", "2")
    settings.DATA_ROOT = "s3://frozen/data"
    yield server
    server.close()


@pytest.fixture
def remote_catalog(users):
    pool = Pool.objects.create(name="remote", status=ArtifactStatus.READY, seq_len=32,
                               path="s3://frozen/data/pools/remote-0123456789",
                               num_records=100, num_tokens=3300, fingerprint="f" * 16)  # fmt: skip
    version = MixtureVersion.objects.create(
        mixture=Mixture.objects.create(name="remote-mix"), number=1, token_budget=3200,
        status=ArtifactStatus.READY, path="s3://frozen/data/mixtures/remote-mix/v1",
        num_samples=100,
    )  # fmt: skip
    MixtureComponent.objects.create(version=version, pool=pool, weight=1.0, stage="main")
    run = TrainingRun.objects.create(name="remote-run", mixture_version=version,
                                     created_by=users["editor"], consumed_samples=10)  # fmt: skip
    return {"pool": pool, "version": version, "run": run}


def _bounded(fn, seconds: float = 60):
    """``fn()``'s answer, or a failure when it has not answered within ``seconds`` (a hang:
    before the bounds, each request waited 60 s per attempt, 8 attempts)."""
    from django.db import connection

    out: list = []

    def call():
        try:
            out.append(fn())
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"no answer within {seconds} s: the frozen store hangs the request"
    return out[0]


def test_a_version_page_on_a_frozen_store_answers_503_naming_the_endpoint(
    frozen, remote_catalog, login
):
    client = login("viewer")
    page = _bounded(lambda: client.get(f"/mixtures/versions/{remote_catalog['version'].pk}/"))
    assert page.status_code == 503, page.status_code  # it reads the schedule's manifest
    text = page.content.decode().replace("&#x27;", "'")
    assert f"The object store ({frozen.endpoint}) did not answer" in text
    assert "timeout" in text.lower()
    assert frozen.accepted >= 1  # it was reached, and froze
    # The pool page reads rows only (its quality and properties are stored by tasks):
    # it answers while the store is frozen, and says what is not measured yet.
    page = _bounded(lambda: client.get(f"/pools/{remote_catalog['pool'].pk}/"))
    assert page.status_code == 200
    assert remote_catalog["pool"].name in page.content.decode()
    assert _bounded(lambda: client.get("/pools/")).status_code == 200  # the catalog answers


def test_the_api_on_a_frozen_store_answers_503_naming_the_endpoint(frozen, remote_catalog, users):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=users['editor']).key}")
    resp = _bounded(lambda: api.get(f"/api/runs/{remote_catalog['run'].pk}/resume/"))
    assert resp.status_code == 503, resp.content
    assert frozen.endpoint in resp.json()["detail"]


def test_the_bounds_have_defaults_and_refuse_bad_values(monkeypatch):
    for name in ("SHARDYARD_S3_CONNECT_TIMEOUT", "SHARDYARD_S3_READ_TIMEOUT",
                 "SHARDYARD_S3_ATTEMPTS"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    assert config.s3_limits() == {"connect_timeout": 5.0, "read_timeout": 10.0,
                                   "max_attempts": 2}  # fmt: skip
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    bounds = storage._shared_client().meta.config
    assert (bounds.connect_timeout, bounds.read_timeout) == (5.0, 10.0)
    assert bounds.retries["total_max_attempts"] == 2  # the first try and one retry
    for name, bad in (("SHARDYARD_S3_READ_TIMEOUT", "soon"), ("SHARDYARD_S3_READ_TIMEOUT", "0"),
                      ("SHARDYARD_S3_ATTEMPTS", "0")):  # fmt: skip
        monkeypatch.setenv(name, bad)
        with pytest.raises(storage.InputError, match=name):
            config.s3_limits()
        monkeypatch.delenv(name)


def test_registering_a_source_on_a_frozen_store_answers_in_bounded_time(frozen, users, settings):
    """Sources are listed through s3fs, which retries in a loop of its own: bounded too."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    settings.SOURCE_ROOTS = ["s3://frozen"]
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=users['editor']).key}")
    resp = _bounded(lambda: api.post("/api/sources/", {"name": "cold", "uri": "s3://frozen/src"},
                                     format="json"))  # fmt: skip
    assert resp.status_code in (400, 503), resp.content
    assert frozen.accepted >= 1
    s3fs.S3FileSystem.clear_instance_cache()

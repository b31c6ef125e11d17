"""Shared fixtures. Services (Postgres, Redis, Celery workers) are real: a test that needs
one skips when it is unreachable, and fails instead when SHARDYARD_REQUIRE_SERVICES=1 (CI)."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.support import services


@pytest.fixture(scope="session")
def require_services() -> bool:
    return services.required()


@pytest.fixture
def postgres(db):
    """The test database, which must be Postgres for this test."""
    from django.db import connection

    if connection.vendor != "postgresql":
        services.unavailable(
            "Postgres", f"DATABASE_URL points at {connection.vendor}, not postgresql"
        )
    return connection


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = os.environ.get("CELERY_BROKER_URL", "")
    if not url.startswith("redis"):
        services.unavailable("Redis", "CELERY_BROKER_URL is not a redis:// URL")
    services.check_redis(url)
    return url


@pytest.fixture(scope="session")
def celery_queue() -> str:
    """A queue of this test session's own, so that tests never feed a running stack."""
    from workers.celery import app

    queue = f"test-{uuid.uuid4().hex[:8]}"
    app.conf.task_default_queue = queue
    return queue


@pytest.fixture
def celery_workers(transactional_db, celery_queue, tmp_path):
    """Start real ``celery worker`` subprocesses against the test database:
    ``start(name)`` returns a handle; all are stopped at teardown."""
    started: list[services.WorkerProcess] = []

    def start(name: str = "w1", *, concurrency: int = 1) -> services.WorkerProcess:
        proc = services.WorkerProcess.start(
            name=name, queue=celery_queue, concurrency=concurrency, log_dir=tmp_path
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture(scope="session")
def moto_server():
    """moto's S3 server in its own process (tests/support/s3.py), one per session."""
    from tests.support.s3 import MotoServer

    server = MotoServer()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(moto_server, monkeypatch) -> str:
    """A fresh bucket on the moto server, with AWS_ENDPOINT_URL and fake credentials in the
    environment (spawned processes inherit them); returns ``s3://bucket``."""
    from tests.support.s3 import apply_env

    apply_env(moto_server, monkeypatch)
    try:
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
    except ImportError:
        pass
    return f"s3://{moto_server.new_bucket()}"


@pytest.fixture
def s3_data_root(s3_bucket, settings, monkeypatch, tmp_path) -> str:
    """The catalog's data root on a fresh bucket of the moto server (``s3://bucket/data``),
    for this process (Django settings) and the workers it starts (their environment), with
    a local SHARDYARD_HOME and SHARDYARD_CACHE of the test's own; returns the root URL."""
    root = f"{s3_bucket}/data"
    settings.DATA_ROOT = root
    monkeypatch.setenv("SHARDYARD_DATA", root)
    monkeypatch.setenv("SHARDYARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    return root


@pytest.fixture
def jobs_inline(django_capture_on_commit_callbacks):
    """``with jobs_inline(): ...``: the jobs queued inside the block (a mixture version's
    build, a materialization) run in this process as their transaction commits, through
    the real engine (Celery's eager mode). The worker path is covered by
    test_flow_pipeline and test_jobs_*."""
    from workers.celery import app

    app.conf.task_always_eager = True
    try:
        yield lambda: django_capture_on_commit_callbacks(execute=True)
    finally:
        app.conf.task_always_eager = False

"""Helpers to reach real services and to run real Celery workers from tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from workers.celery import worker_command

ROOT = Path(__file__).resolve().parents[2]


def required() -> bool:
    return os.environ.get("SHARDYARD_REQUIRE_SERVICES", "").strip().lower() in {
        "1",
        "true",
        "yes",
        "on",
    }


def unavailable(service: str, why: str) -> None:
    """Skip locally; fail in CI (SHARDYARD_REQUIRE_SERVICES=1)."""
    msg = f"{service} is not available: {why}"
    if required():
        pytest.fail(msg + " (SHARDYARD_REQUIRE_SERVICES=1, so this fails instead of skipping)")
    pytest.skip(msg)


def check_redis(url: str) -> None:
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except Exception as exc:  # any connection failure means the service is not there
        unavailable("Redis", f"{url}: {exc}")


def database_url() -> str:
    """The URL of the database the tests run against, for worker subprocesses."""
    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    user = s.get("USER") or ""
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    host = s.get("HOST") or "127.0.0.1"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgresql://{auth}{host}{port}/{s['NAME']}"


def worker_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url()
    env.setdefault("SECRET_KEY", "shardyard-test-key")
    env.update(extra)
    return env


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``manage.py args`` run as an operator runs it: a subprocess with the workers'
    environment (plus ``env``), its output captured as text."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=worker_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def flush_database() -> None:
    """Empty the test database after a world built outside a test's transaction (a
    module-scoped fixture), and put back the rows the migrations made (the role groups), so
    that later tests see the database a migration leaves."""
    from django.contrib.auth.models import Group
    from django.core.management import call_command

    from webapp.roles import ROLES

    call_command("flush", interactive=False, verbosity=0)
    for name in ROLES:
        Group.objects.get_or_create(name=name)
    # The flush starts primary keys over: answers this process keeps per (flag, version)
    # key would be read for the next module's rows of the same keys.
    from webapp.catalog.selectors import flags

    for kept in (flags._FLAGGED_RECORDS, flags._FIRST_FLAGGED, flags._FLAGGED_COUNTS):
        kept.clear()


def catalog_roots(tmp_path: Path, settings, monkeypatch) -> tuple[Path, Path]:
    """A fresh source root and data root under ``tmp_path``, set for this process (Django
    settings) and for the worker subprocesses it starts (their environment)."""
    root, data = tmp_path / "sources", tmp_path / "data"
    root.mkdir()
    data.mkdir()
    settings.SOURCE_ROOTS = [root]
    settings.DATA_ROOT = data
    monkeypatch.setenv("SHARDYARD_SOURCE_ROOTS", str(root))
    monkeypatch.setenv("SHARDYARD_DATA", str(data))
    return root, data


@dataclass
class WorkerProcess:
    name: str
    proc: subprocess.Popen
    log_path: Path

    @classmethod
    def start(cls, *, name: str, queue: str, concurrency: int = 1, log_dir: Path) -> WorkerProcess:
        log_path = log_dir / f"worker-{name}.log"
        log = open(log_path, "wb")
        proc = subprocess.Popen(
            worker_command(
                hostname=f"{name}@%h",
                concurrency=concurrency,
                options=(
                    "-Q",
                    queue,
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                ),
            ),
            cwd=ROOT,
            env=worker_env(SHARDYARD_QUEUE=queue),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return cls(name=name, proc=proc, log_path=log_path)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the whole worker process group, as an OOM killer or a lost host would."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()


def wait_for(predicate, *, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")

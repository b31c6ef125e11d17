"""``make run``'s stack, for real: ``manage.py runstack`` in a fresh data directory with no
DATABASE_URL or CELERY_BROKER_URL (so SQLite and the filesystem broker), its web server
answering, its worker running a task and the whole demo pipeline, and Ctrl-C stopping
everything."""

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.services import wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _get(url: str):
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), ""


@pytest.fixture
def embedded_env(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY"}
    }
    env.update(
        DEBUG="1",
        SHARDYARD_DATA=str(tmp_path / "data"),
        SHARDYARD_QUEUE="embedded-test",
        SHARDYARD_ADMIN_USER="admin",
        SHARDYARD_ADMIN_PASSWORD="correct-horse-battery",
        SHARDYARD_DEMO_BYTES="60000",  # a small demo: the pipeline, not the volume, is tested
    )
    return env


def test_it_serves_pages_and_runs_tasks_with_sqlite_and_the_filesystem_broker(
    embedded_env, tmp_path
):
    port = _free_port()
    log = open(tmp_path / "runstack.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runstack", "--port", str(port)],
        cwd=ROOT,
        env=embedded_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        status, _, body = wait_for(
            lambda: _safe_get(base + "/accounts/login/"),
            timeout=120,
            interval=0.5,
            what="login page",
        )
        assert status == 200 and "Log in" in body

        status, headers, _ = _get(base + "/")
        assert status == 302 and headers["Location"].startswith("/accounts/login/")

        ping = subprocess.run(
            [sys.executable, "manage.py", "ping_workers", "--wait", "90"],
            cwd=ROOT,
            env=embedded_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ping.returncode == 0, ping.stderr + (tmp_path / "runstack.log").read_text()
        assert "answered via filesystem" in ping.stdout
        # kombu's exchange tables live with the broker's folders, not in the working directory.
        control = tmp_path / "data" / "broker" / "control"
        assert {p.name for p in control.iterdir()} >= {"embedded-test.exchange"}
        assert (tmp_path / "data" / "shardyard.sqlite3").exists()

        # The demo loads in the background through the same worker: sources, pools, mixture.
        wait_for(
            lambda: "[demo] demo ready" in (tmp_path / "runstack.log").read_text(),
            timeout=300,
            interval=1,
            what="the demo to load",
        )
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        proc.wait(timeout=60)
    output = (tmp_path / "runstack.log").read_text()
    assert "Shardyard is running at" in output
    assert "Stopped." in output


def _safe_get(url):
    try:
        return _get(url)
    except OSError:
        return None


def test_it_stops_its_web_server_and_worker_on_sigterm(embedded_env, tmp_path):
    """What a service manager sends (systemd, ``docker stop``, ``kill``): only runstack gets
    the signal, and it must take its children down with it."""
    port = _free_port()
    log = open(tmp_path / "runstack.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runstack", "--port", str(port), "--no-demo"],
        cwd=ROOT, env=embedded_env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _safe_get(base + "/accounts/login/"), timeout=120, interval=0.5,
                 what="login page")  # fmt: skip
        children = _children(proc.pid)
        assert len(children) >= 2  # the web server and the worker
    finally:
        proc.send_signal(signal.SIGTERM)  # to runstack alone, not its process group
        proc.wait(timeout=60)
    wait_for(lambda: not any(_alive(c) for c in children), timeout=30, interval=0.5,
             what="runstack's children to exit")  # fmt: skip
    assert _safe_get(base + "/accounts/login/") is None
    assert "Stopped." in (tmp_path / "runstack.log").read_text()


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False

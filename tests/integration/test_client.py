# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""shardcore.client against a live server: a training loop registers, reports and resumes;
transient failures are retried, refusals are not."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from rest_framework.authtoken.models import Token

from shardcore.client import ShardyardClient, ShardyardHTTPError, ShardyardUnavailable
from tests.integration.dashboard_fixtures import catalog, users  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def _client(url, user, **kw):
    token = Token.objects.get_or_create(user=user)[0].key
    return ShardyardClient(url, token, sleep=lambda s: None, **kw)


def test_it_registers_reports_and_resumes_like_a_training_loop(live_server, users, catalog):
    client = _client(live_server.url, users["editor"])
    run = client.register_run(mixture_version=catalog["version"].pk, name="loop-run")
    assert run["state"] == "registered"
    for step in (1, 2, 3):
        client.report_progress(run["id"], step=step, consumed_samples=step * 4)
    position = client.resume_position(run["id"])
    assert (position["step"], position["sample"], position["shard"]) == (3, 12, 1)
    assert position["record_in_shard"] == 2
    # Registering again after a crash returns the same run.
    assert (
        client.register_run(mixture_version=catalog["version"].pk, name="loop-run")["id"]
        == run["id"]
    )


def test_it_raises_at_once_on_a_refusal(live_server, users, catalog):
    client = _client(live_server.url, users["viewer"])
    with pytest.raises(ShardyardHTTPError) as e:
        client.register_run(mixture_version=catalog["version"].pk, name="nope")
    assert e.value.status == 403


def test_it_reports_a_bad_request_with_the_server_message(live_server, users, catalog):
    client = _client(live_server.url, users["editor"])
    with pytest.raises(ShardyardHTTPError, match="no mixture version 999"):
        client.register_run(mixture_version=999, name="ghost")


class _Flaky(BaseHTTPRequestHandler):
    """Answers 503 to the first ``failures`` requests, then 200 with a JSON body."""

    failures = 2
    seen: list[str] = []

    def do_GET(self):
        _Flaky.seen.append(self.headers.get("Authorization", ""))
        if len(_Flaky.seen) <= _Flaky.failures:
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"busy")
            return
        body = json.dumps({"run": 7, "shard": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky_server():
    _Flaky.seen = []
    server = HTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", _Flaky
    server.shutdown()
    server.server_close()


@pytest.mark.django_db(transaction=False)
def test_it_retries_5xx_answers_with_backoff(flaky_server):
    url, handler = flaky_server
    delays = []
    client = ShardyardClient(url, "t0k", retries=3, backoff=0.5, sleep=delays.append)
    assert client.resume_position(7) == {"run": 7, "shard": 0}
    assert handler.seen == ["Token t0k"] * 3
    assert len(delays) == 2
    assert 0 <= delays[0] <= 0.5 and 0 <= delays[1] <= 1.0


@pytest.mark.django_db(transaction=False)
def test_it_gives_up_after_the_last_retry(flaky_server):
    url, handler = flaky_server
    handler.failures = 10
    client = ShardyardClient(url, "t0k", retries=2, sleep=lambda s: None)
    with pytest.raises(ShardyardUnavailable, match="failed 3 times; last: status 503"):
        client.resume_position(7)
    assert len(handler.seen) == 3
    handler.failures = 2


@pytest.mark.django_db(transaction=False)
def test_it_retries_connection_errors():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    delays = []
    client = ShardyardClient(f"http://127.0.0.1:{port}", "t", retries=4, sleep=delays.append)
    with pytest.raises(ShardyardUnavailable, match="failed 5 times"):
        client.report_progress(1, step=1, consumed_tokens=10)
    assert len(delays) == 4


@pytest.mark.django_db(transaction=False)
def test_it_refuses_a_report_without_samples_or_tokens():
    with pytest.raises(ValueError, match="consumed_samples or consumed_tokens"):
        ShardyardClient("http://127.0.0.1:1", "t").report_progress(1, step=1)

# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Webhooks against a real receiver (an HTTP server in this test) and a real Celery worker:
one signed delivery per event, tried again after the receiver answered 500; a receiver that
never answers holds no job back (deliveries run in the workers' webhook thread, with a
bounded timeout, never in a job's task)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import transaction

from tests.integration.dashboard_fixtures import catalog, users  # noqa: F401
from tests.integration.test_jobs_workers import stdlib_docs, wait_job, write_jsonl
from tests.support.services import catalog_roots, wait_for
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import Job, JobState
from webapp.ops.models import WebhookDelivery
from webapp.ops.webhooks import endpoint_create

pytestmark = pytest.mark.services

SECRET = "shared-secret-of-the-receiver"


class Receiver:
    """``/flaky`` answers 500 to the first request of each delivery, then 200; ``/hang``
    answers nothing until the test lets it go."""

    def __init__(self):
        self.requests: list[dict] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    seen = [r for r in receiver.requests if r["path"] == self.path
                            and r["delivery"] == self.headers["X-Shardyard-Delivery"]]  # fmt: skip
                    status = 500 if self.path == "/flaky" and not seen else 200
                    receiver.requests.append({
                        "path": self.path, "body": body, "status": status,
                        "delivery": self.headers["X-Shardyard-Delivery"],
                        "event": self.headers["X-Shardyard-Event"],
                        "signature": self.headers["X-Shardyard-Signature"],
                    })  # fmt: skip
                if self.path == "/hang":
                    receiver.release.wait(120)
                try:
                    self.send_response(status)
                    self.end_headers()
                    self.wfile.write(b"ok" if status == 200 else b"try later")
                except OSError:
                    pass  # the sender gave up waiting

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def on(self, path: str) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if r["path"] == path]

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.stop()


def test_each_event_arrives_signed_once_after_a_500_and_a_hung_receiver_holds_no_job(
    postgres, redis_url, celery_workers, tmp_path, settings, monkeypatch, receiver
):
    for name, value in (("POLL", 1), ("TIMEOUT", 2), ("BACKOFF", 1), ("ATTEMPTS", 50)):
        monkeypatch.setenv(f"SHARDYARD_WEBHOOK_{name}", str(value))  # the worker's
    root, _ = catalog_roots(tmp_path, settings, monkeypatch)
    flaky = endpoint_create(url=f"{receiver.url}/flaky", secret=SECRET,
                            events=["job.succeeded", "job.failed"])  # fmt: skip
    hang = endpoint_create(url=f"{receiver.url}/hang", secret="other", events=["job.succeeded"])
    write_jsonl(root / "good" / "a.jsonl", stdlib_docs(10))
    good = source_register(name="good", uri=str(root / "good"))
    write_jsonl(root / "bad" / "a.jsonl", stdlib_docs(3))
    bad = source_register(name="bad", uri=str(root / "bad"))
    worker = celery_workers("notifier")

    first = wait_job(tokenized_source_build(source_id=good.pk).job_id)
    assert first.state == JobState.SUCCEEDED, first.log_tail
    # The hung receiver has the job's event and will not answer while the next job runs.
    wait_for(lambda: receiver.on("/hang"), timeout=60, what="the hung receiver's request")
    with transaction.atomic():  # its units are sent when this commits
        ts = tokenized_source_build(source_id=bad.pk)
        # The stored plan names a tokenizer that does not exist: a permanent unit failure.
        Job.objects.filter(pk=ts.job_id).update(
            plan={**ts.job.plan, "params": {**ts.job.plan["params"], "tokenizer": "tiktoken:nope"}}
        )
    second = wait_job(ts.job_id)
    assert second.state == JobState.FAILED, second.log_tail + worker.log()
    assert not receiver.release.is_set() and all(r["status"] for r in receiver.on("/hang"))
    hung = WebhookDelivery.objects.get(endpoint=hang)
    wait_for(lambda: WebhookDelivery.objects.get(pk=hung.pk).attempts >= 1, timeout=30,
             what="the hung delivery's attempt to time out")  # fmt: skip
    hung.refresh_from_db()
    assert hung.state == WebhookDelivery.State.PENDING and "Timeout" in hung.last_error, hung

    def delivered():
        rows = WebhookDelivery.objects.filter(endpoint=flaky)
        return len(rows) == 2 and all(d.state == "delivered" for d in rows)

    wait_for(delivered, timeout=60, what="both events delivered to the flaky receiver")
    time.sleep(3)  # three more rounds of the worker's webhook thread: nothing is sent again
    got = receiver.on("/flaky")
    by_event = {}
    for r in got:
        expected = "sha256=" + hmac.new(SECRET.encode(), r["body"], hashlib.sha256).hexdigest()
        assert hmac.compare_digest(r["signature"], expected), r
        by_event.setdefault(r["event"], []).append(r)
    assert sorted(by_event) == ["job.failed", "job.succeeded"]
    for event, job in (("job.succeeded", first), ("job.failed", second)):
        tries = by_event[event]
        assert [t["status"] for t in tries] == [500, 200], tries  # retried once, then done
        assert tries[0]["body"] == tries[1]["body"] and tries[0]["delivery"] == tries[1]["delivery"]
        payload = json.loads(tries[1]["body"])
        assert payload["event"] == event and payload["data"]["job"] == job.pk
        assert payload["data"]["state"] == job.state and payload["data"]["tokens"] == job.tokens
    assert json.loads(by_event["job.failed"][1]["body"])["data"]["error"] == second.error != ""
    for d in WebhookDelivery.objects.filter(endpoint=flaky):
        assert d.attempts == 2 and d.last_status == 200, d


def test_taints_of_runs_and_scrub_findings_arrive_in_slack_form(db, catalog, receiver, settings):
    """The webhook round in this process (what each worker's thread calls): a run tainted by
    a new flag and a corrupt pool found by the scrub, each one Slack-compatible delivery."""
    from webapp.catalog.models import Corruption, Flag, Taint
    from webapp.ops.webhooks import webhooks_tick

    settings.SHARDYARD_WEBHOOK_TIMEOUT = 2
    endpoint = endpoint_create(url=f"{receiver.url}/chat", secret=SECRET, format="slack",
                               events=["run.tainted", "scrub.corruption"])  # fmt: skip
    flag = Flag.objects.create(target=Flag.Target.SOURCE, source=catalog["source"],
                               reason="contains a leaked benchmark")  # fmt: skip
    Taint.objects.create(flag=flag, run=catalog["run"], documents=3)
    Corruption.objects.create(pool=catalog["pool"], problem="pool-00001.bin: byte 4096 differs")

    assert webhooks_tick() == (2, 2)
    assert webhooks_tick() == (0, 0)  # seen again, recorded and sent once
    got = {r["event"]: json.loads(r["body"]) for r in receiver.on("/chat")}
    assert len(receiver.on("/chat")) == 2
    assert got["run.tainted"] == {"text": "Shardyard run olmo-tiny-a is tainted by flag "
                                          f"{flag.pk}: contains a leaked benchmark"}  # fmt: skip
    assert "pool-00001.bin: byte 4096 differs" in got["scrub.corruption"]["text"]
    assert "wiki-2048" in got["scrub.corruption"]["text"]
    assert set(
        WebhookDelivery.objects.filter(endpoint=endpoint).values_list("state", flat=True)
    ) == {"delivered"}


def test_an_endpoint_names_the_events_it_does_not_know(db):
    with pytest.raises(ValueError, match="job.exploded; choose from job.succeeded"):
        endpoint_create(url="http://127.0.0.1:9/", secret="s", events=["job.exploded"])

# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Webhooks against a real receiver (an HTTP server in this test) and a real Celery worker:
one signed delivery per event, tried again after the receiver answered 500; a receiver that
never answers holds no job back (deliveries run in the workers' webhook thread, with a
bounded timeout, never in a job's task). The receivers listen on 127.0.0.1, which webhooks
may reach only because these tests allow it (SHARDYARD_WEBHOOK_ALLOW_NETWORKS); without that,
internal addresses are refused when a webhook is saved and again when it is sent."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import transaction
from django.utils import timezone

from tests.integration.dashboard_fixtures import catalog, users  # noqa: F401
from tests.integration.test_jobs_workers import stdlib_docs, wait_job, write_jsonl
from tests.support.services import catalog_roots, wait_for
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import Job, JobState
from webapp.ops.models import WebhookDelivery, WebhookEndpoint
from webapp.ops.netguard import parse_networks
from webapp.ops.webhooks import deliveries_drain, endpoint_create

pytestmark = pytest.mark.services

SECRET = "shared-secret-of-the-receiver"
LOOPBACK = "127.0.0.0/8"


@pytest.fixture
def allow_loopback(settings, monkeypatch):
    """The receivers here are on 127.0.0.1: allowed for this process and the workers it
    starts, for this test only."""
    monkeypatch.setenv("SHARDYARD_WEBHOOK_ALLOW_NETWORKS", LOOPBACK)
    settings.SHARDYARD_WEBHOOK_ALLOW_NETWORKS = parse_networks(LOOPBACK)


class Receiver:
    """``/flaky`` answers 500 to the first request of each delivery, then 200; ``/hang``
    answers nothing until the test lets it go; ``/moved`` redirects to ``/landing``."""

    def __init__(self, tls: ssl.SSLContext | None = None):
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
                    status = 307 if self.path == "/moved" else status
                    receiver.requests.append({
                        "path": self.path, "body": body, "status": status,
                        "delivery": self.headers["X-Shardyard-Delivery"],
                        "host": self.headers["Host"],
                        "event": self.headers["X-Shardyard-Event"],
                        "signature": self.headers["X-Shardyard-Signature"],
                    })  # fmt: skip
                if self.path == "/hang":
                    receiver.release.wait(120)
                try:
                    self.send_response(status)
                    if status == 307:
                        self.send_header("Location", "/landing")
                    self.end_headers()
                    self.wfile.write(b"ok" if status == 200 else b"try later")
                except OSError:
                    pass  # the sender gave up waiting

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
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
    postgres, redis_url, celery_workers, tmp_path, settings, monkeypatch, receiver, allow_loopback
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
    assert hung.state == WebhookDelivery.State.PENDING and "deadline" in hung.last_error, hung

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


def test_taints_of_runs_and_scrub_findings_arrive_in_slack_form(
    db, catalog, receiver, settings, allow_loopback
):
    """The webhook round in this process (what each worker's thread calls): a run tainted by
    a new flag and a corrupt pool found by the scrub, each one Slack-compatible delivery."""
    from webapp.catalog.models import Corruption, Flag, Taint
    from webapp.ops.webhooks import events_collect

    def webhooks_tick():  # one round of a worker's webhook thread, waiting for its sends
        return events_collect(), deliveries_drain()

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


def test_internal_targets_are_refused_when_saved_unless_allowed(db, settings):
    settings.SHARDYARD_WEBHOOK_ALLOW_NETWORKS = ()
    refused = {
        "http://127.0.0.1:8000/hook": "127.0.0.1 is loopback",
        "http://localhost:6379/": "host 'localhost' resolves to 127.0.0.1: 127.0.0.1 is loopback",
        # Spellings of 127.0.0.1 that are not an address literal but resolve to it.
        "http://2130706433:5432/": "host '2130706433' resolves to 127.0.0.1: 127.0.0.1 is loopback",
        "http://0x7f.1/": "host '0x7f.1' resolves to 127.0.0.1: 127.0.0.1 is loopback",
        "http://169.254.169.254/latest/meta-data/": "169.254.169.254 is link-local",
        "http://[::1]:8000/": "::1 is loopback",
        "http://[::ffff:127.0.0.1]/": "loopback (it carries 127.0.0.1)",
        "https://10.1.2.3/hook": "10.1.2.3 is private",
        "http://192.168.0.7/": "192.168.0.7 is private",
        "http://[fd00::5]/": "fd00::5 is private",
        "http://0.0.0.0:5432/": "0.0.0.0 is unspecified",
        "http://224.0.0.1/": "224.0.0.1 is multicast",
        "ftp://8.8.8.8/hook": "scheme 'ftp': only http and https",
    }
    for url, why in refused.items():
        with pytest.raises(ValueError, match="^url: .*" + re.escape(why)):
            endpoint_create(url=url, secret="s", events=["job.failed"])
    assert not WebhookEndpoint.objects.exists()
    # A public address is fine; so is a name that does not resolve yet (each delivery checks).
    endpoint_create(url="https://8.8.8.8/hook", secret="s", events=["job.failed"])
    endpoint_create(url="https://hooks.invalid/x", secret="s", events=["job.failed"])

    settings.SHARDYARD_WEBHOOK_ALLOW_NETWORKS = parse_networks("127.0.0.0/8, 10.0.0.0/8")
    for url in ("http://127.0.0.1:8000/hook", "http://localhost:6379/", "https://10.1.2.3/hook",
                "http://[::ffff:127.0.0.1]/"):  # fmt: skip
        endpoint_create(url=url, secret="s", events=["job.failed"])
    with pytest.raises(ValueError, match="169.254.169.254 is link-local"):  # still not allowed
        endpoint_create(url="http://169.254.169.254/", secret="s", events=["job.failed"])
    assert WebhookEndpoint.objects.count() == 6


def test_a_target_refused_at_send_time_is_not_contacted_and_the_refusal_is_recorded(
    db, settings, receiver, allow_loopback
):
    """Saved while its host was allowed; by the time it is sent the host resolves to an
    address that is not (here the allow-list changed; a DNS answer that changed is the same
    case): nothing is sent, the delivery says why, and it is tried again later."""
    endpoint = endpoint_create(url=f"http://localhost:{receiver.port}/late", secret=SECRET,
                               events=["job.failed"])  # fmt: skip
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event="job.failed", key="job:1:failed",
        payload={"event": "job.failed", "key": "job:1:failed", "data": {}},
        next_attempt_at=timezone.now(),
    )  # fmt: skip
    settings.SHARDYARD_WEBHOOK_ALLOW_NETWORKS = ()
    assert deliveries_drain() == 1
    delivery.refresh_from_db()
    assert receiver.requests == []
    assert (delivery.state, delivery.attempts, delivery.last_status) == ("pending", 1, None)
    assert delivery.last_error.startswith(
        "refused: host 'localhost' resolves to 127.0.0.1: 127.0.0.1 is loopback"
    ), delivery.last_error

    settings.SHARDYARD_WEBHOOK_ALLOW_NETWORKS = parse_networks(LOOPBACK)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=delivery.created_at)
    assert deliveries_drain() == 1
    delivery.refresh_from_db()
    assert delivery.state == "delivered", delivery.last_error
    # Sent to the address checked, naming the host the URL gave.
    assert [r["host"] for r in receiver.on("/late")] == [f"localhost:{receiver.port}"]


def test_a_redirect_is_not_followed(db, receiver, allow_loopback):
    endpoint = endpoint_create(url=f"{receiver.url}/moved", secret=SECRET, events=["job.failed"])
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event="job.failed", key="job:1:failed",
        payload={"event": "job.failed", "key": "job:1:failed", "data": {}},
        next_attempt_at=timezone.now(),
    )  # fmt: skip
    assert deliveries_drain() == 1
    delivery.refresh_from_db()
    assert (delivery.state, delivery.last_status) == ("pending", 307), delivery.last_error
    assert delivery.last_error.startswith("answered 307")
    assert len(receiver.on("/moved")) == 1 and receiver.on("/landing") == []


def test_a_name_that_does_not_resolve_at_send_time_says_so(db, settings):
    endpoint = endpoint_create(url="https://hooks.invalid/x", secret=SECRET, events=["job.failed"])
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event="job.failed", key="job:1:failed",
        payload={"event": "job.failed", "key": "job:1:failed", "data": {}},
        next_attempt_at=timezone.now(),
    )  # fmt: skip
    assert deliveries_drain() == 1
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("pending", 1)
    assert delivery.last_error.startswith("host 'hooks.invalid' does not resolve"), delivery


def test_https_goes_to_the_checked_address_with_the_name_in_tls(
    db, settings, tmp_path, monkeypatch, allow_loopback
):
    """An https receiver whose certificate names "localhost" only: the request connects to
    the address checked, sends the name in SNI and verifies the certificate against it."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ))  # fmt: skip
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    sni = []
    tls.sni_callback = lambda sock, server_name, ctx: sni.append(server_name)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "cert.pem"))
    r = Receiver(tls=tls)
    try:
        by_name = endpoint_create(url=f"https://localhost:{r.port}/tls", secret=SECRET,
                                  events=["job.failed"])  # fmt: skip
        by_address = endpoint_create(url=f"https://127.0.0.1:{r.port}/tls", secret=SECRET,
                                     events=["job.failed"])  # fmt: skip
        for endpoint in (by_name, by_address):
            WebhookDelivery.objects.create(
                endpoint=endpoint, event="job.failed", key="job:1:failed",
                payload={"event": "job.failed", "key": "job:1:failed", "data": {}},
                next_attempt_at=timezone.now(),
            )  # fmt: skip
        assert deliveries_drain() == 2
        ok = WebhookDelivery.objects.get(endpoint=by_name)
        assert (ok.state, ok.last_status) == ("delivered", 200), ok.last_error
        # One request each, in either order (each endpoint has a sender of its own): the
        # name went in SNI, an address in the URL sent no name.
        assert sorted(sni, key=lambda name: name or "") == [None, "localhost"]
        assert [x["host"] for x in r.on("/tls")] == [f"localhost:{r.port}"]
        # The certificate does not name 127.0.0.1: that one is not trusted.
        bad = WebhookDelivery.objects.get(endpoint=by_address)
        assert bad.state == "pending" and "doesn't match 'localhost'" in bad.last_error, bad
        assert len(r.on("/tls")) == 1  # nothing reached the receiver from it
    finally:
        r.stop()

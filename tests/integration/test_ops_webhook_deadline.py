"""Webhook receivers that answer slowly, one byte at a time, each byte well within the
socket timeout: a delivery is cut at its total deadline (SHARDYARD_WEBHOOK_TIMEOUT),
other receivers are sent to meanwhile, and two workers sending at once never send one
delivery twice. Real HTTP servers on 127.0.0.1 (allowed for these tests only)."""

from __future__ import annotations

import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection
from django.utils import timezone

from tests.support.services import wait_for
from webapp.ops.models import WebhookDelivery
from webapp.ops.netguard import parse_networks
from webapp.ops.webhooks import deliveries_drain, endpoint_create, events_collect

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


class Receiver:
    """``/slow`` answers its first request for each delivery one byte every ``gap``
    seconds; every other request (and every other path) gets the answer at once. Each
    request is recorded with what the slow answer was doing when it came in."""

    def __init__(self, gap: float):
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.trickling = 0  # slow answers in progress
        self.cut = 0  # slow answers the sender hung up on
        self.finished = 0  # slow answers sent whole
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                delivery = self.headers["X-Shardyard-Delivery"]
                with receiver.lock:
                    seen = any(r["delivery"] == delivery for r in receiver.requests)
                    slow = self.path == "/slow" and not seen
                    receiver.requests.append({
                        "path": self.path, "delivery": delivery,
                        "slow_ended": receiver.cut + receiver.finished,
                    })  # fmt: skip
                    if slow:
                        receiver.trickling += 1
                if not slow:
                    self.wfile.write(ANSWER)
                    return
                gone = threading.Event()
                try:
                    for i in range(len(ANSWER)):
                        self.wfile.write(ANSWER[i : i + 1])
                        self.wfile.flush()
                        if gone.wait(gap):
                            break
                    outcome = "finished"
                except OSError:
                    outcome = "cut"  # the sender closed the connection
                with receiver.lock:
                    receiver.trickling -= 1
                    setattr(receiver, outcome, getattr(receiver, outcome) + 1)
                self.close_connection = True

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
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def allow_loopback(settings, monkeypatch):
    monkeypatch.setenv("SHARDYARD_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8")
    settings.SHARDYARD_WEBHOOK_ALLOW_NETWORKS = parse_networks("127.0.0.0/8")


def _pending(endpoint, key: str, when=None) -> WebhookDelivery:
    return WebhookDelivery.objects.create(
        endpoint=endpoint, event="job.failed", key=key,
        payload={"event": "job.failed", "key": key, "data": {}},
        next_attempt_at=when or timezone.now(),
    )  # fmt: skip


def test_a_trickling_receiver_is_cut_at_the_deadline_and_delays_no_other_receiver(
    db, settings, allow_loopback
):
    """One byte every 0.5 s never trips a 1 s socket timeout; the whole answer would take
    half a minute. The delivery is cut at its 1 s total, and the other receiver's delivery,
    due after it, is sent before the slow answer ends (each receiver has a sender of its
    own, so the fast one may even go first)."""
    settings.SHARDYARD_WEBHOOK_TIMEOUT = 1
    receiver = Receiver(gap=0.5)
    try:
        slow = endpoint_create(url=f"{receiver.url}/slow", secret="s", events=["job.failed"])
        fast = endpoint_create(url=f"{receiver.url}/fast", secret="s", events=["job.failed"])
        first = _pending(slow, "job:1:failed", when=timezone.now() - timedelta(seconds=5))
        second = _pending(fast, "job:1:failed")

        assert deliveries_drain() == 2
        first.refresh_from_db()
        second.refresh_from_db()
        assert (second.state, second.last_status) == ("delivered", 200), second.last_error
        assert first.state == "pending" and first.attempts == 1, first
        assert "answer not complete within the 1 s deadline" in first.last_error, first.last_error
        wait_for(lambda: receiver.cut + receiver.finished, timeout=60, what="the slow answer")
        assert (receiver.cut, receiver.finished) == (1, 0)
        # The fast receiver was not kept waiting behind the slow one.
        assert [r["slow_ended"] for r in receiver.on("/fast")] == [0]
    finally:
        receiver.stop()


def test_two_workers_sending_at_once_send_a_slow_delivery_once(
    transactional_db, settings, allow_loopback
):
    """Two workers' webhook rounds side by side (each round records and sends as a worker's
    webhook thread does). The receiver answers one byte every 0.9 s, 37 bytes: longer than any
    claim a round holds on a delivery whose request takes at most the 1 s deadline. The
    first attempt is cut; the next is due only after the backoff; nobody sends it twice."""
    settings.SHARDYARD_WEBHOOK_TIMEOUT = 1
    settings.SHARDYARD_WEBHOOK_BACKOFF = 3600
    receiver = Receiver(gap=0.9)
    stop = threading.Event()
    rounds = [0, 0]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            while not stop.is_set():
                events_collect()  # one round of a worker's webhook thread, sends awaited
                deliveries_drain()
                rounds[i] += 1
                stop.wait(0.2)
        except BaseException as exc:  # reported by the test below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    try:
        slow = endpoint_create(url=f"{receiver.url}/slow", secret="s", events=["job.failed"])
        delivery = _pending(slow, "job:7:failed")
        for t in threads:
            t.start()
        wait_for(lambda: WebhookDelivery.objects.get(pk=delivery.pk).attempts >= 1,
                 timeout=120, what="the first attempt to end")  # fmt: skip
        after = list(rounds)
        wait_for(lambda: min(r - a for r, a in zip(rounds, after, strict=True)) >= 3, timeout=60,
                 what="three more rounds of each worker")  # fmt: skip
    finally:
        stop.set()
        for t in threads:
            t.join(120)
        receiver.stop()
    assert not errors, errors
    delivery.refresh_from_db()
    assert len(receiver.on("/slow")) == 1, receiver.on("/slow")
    assert (delivery.state, delivery.attempts) == ("pending", 1), delivery
    assert "deadline" in delivery.last_error, delivery.last_error

"""Webhooks: events (a job succeeded or failed, a run was tainted, the scrub found a
corrupt artifact) delivered as signed JSON to the URLs users and teams configured.

Nothing here runs inside a job. Every worker runs a thread (``workers.webhooks``) that, every
SHARDYARD_WEBHOOK_POLL seconds, records new events' deliveries and sends the due ones:

1. ``events_collect`` reads the rows that say an event happened (terminal jobs, taints of
   runs, scrub findings) since the oldest active endpoint was made, and records one
   ``WebhookDelivery`` per (endpoint, event): a unique key makes this idempotent, so any
   number of workers may collect the same events.
2. ``WebhookSender`` claims due deliveries (a conditional UPDATE: one sender each, held
   longer than the sending can take, so a delivery is never sent by two workers at once)
   and POSTs each endpoint's in a thread of its own (SHARDYARD_WEBHOOK_SENDERS per
   worker), so a slow receiver delays only its own deliveries. Each attempt ends within
   SHARDYARD_WEBHOOK_TIMEOUT seconds in total, however slowly the receiver answers. It
   goes to an address the URL's host resolved to and ``netguard`` let through (never
   loopback, private, link-local and the like unless SHARDYARD_WEBHOOK_ALLOW_NETWORKS
   permits it): a refused target is not contacted, and the refusal is the attempt's
   error. A receiver that answers anything but 2xx, or not in time, is tried again after
   SHARDYARD_WEBHOOK_BACKOFF seconds, doubling, up to SHARDYARD_WEBHOOK_ATTEMPTS attempts.

Each request carries ``X-Shardyard-Signature: sha256=<hex>``, the HMAC-SHA256 of the exact
body with the endpoint's secret, ``X-Shardyard-Event`` and ``X-Shardyard-Delivery`` (the
same on every retry of one delivery, so a receiver can drop duplicates)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Min, Q
from django.utils import timezone

from webapp.catalog.models import Corruption, Taint
from webapp.jobs.models import Job, JobState
from webapp.ops.models import WEBHOOK_EVENTS, WebhookDelivery, WebhookEndpoint
from webapp.ops.netguard import TargetRefused, TargetUnresolved, target_check

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Shardyard-Signature"
# A new endpoint hears of events after its creation only; a worker that was down for a
# while catches up on this much history at most.
LOOKBACK = timedelta(days=1)


def sign(secret: str, body: bytes) -> str:
    """The signature header's value for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


# An event: its name, its key (one delivery per endpoint and key), when it happened, its data.
Event = tuple[str, str, datetime, dict[str, Any]]


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def _job_events(since: datetime) -> list[Event]:

    out = []
    for job in Job.objects.filter(
        state__in=(JobState.SUCCEEDED, JobState.FAILED), finished_at__gte=since
    ).order_by("finished_at"):
        event = f"job.{job.state}"
        data = {
            "job": job.pk,
            "kind": job.kind,
            "title": job.title,
            "state": job.state,
            "error": job.error[:2000],
            "units_total": job.units_total,
            "units_done": job.units_done,
            "documents": job.documents,
            "tokens": job.tokens,
            "bytes": job.bytes,
            "created_at": _iso(job.created_at),
            "finished_at": _iso(job.finished_at),
            "page": f"/jobs/{job.pk}/",
        }
        # finished_at is set: the query reads jobs finished since ``since``.
        out.append((event, f"job:{job.pk}:{job.state}", job.finished_at or since, data))
    return out


def _taint_events(since: datetime) -> list[Event]:

    out = []
    for taint in (
        Taint.objects.filter(run__isnull=False, created_at__gte=since)
        .select_related("run", "flag")
        .order_by("created_at")
    ):
        data = {
            "run": taint.run_id,
            "run_name": taint.run.name,
            "flag": taint.flag_id,
            "reason": taint.flag.reason[:2000],
            "tainted_at": _iso(taint.created_at),
            "page": f"/runs/{taint.run_id}/",
        }
        out.append(
            ("run.tainted", f"run:{taint.run_id}:flag:{taint.flag_id}", taint.created_at, data)
        )
    return out


def _corruption_events(since: datetime) -> list[Event]:

    out = []
    for c in Corruption.objects.filter(cause__isnull=True, found_at__gte=since).order_by(
        "found_at"
    ):
        target = c.target
        data = {
            "corruption": c.pk,
            "target": type(target).__name__ if target else None,
            "target_id": getattr(target, "pk", None),
            "target_name": str(target),
            "problem": c.problem[:2000],
            "scrub_job": c.job_id,
            "found_at": _iso(c.found_at),
        }
        out.append(("scrub.corruption", f"corruption:{c.pk}", c.found_at, data))
    return out


def _text(event: str, data: dict) -> str:
    """The one-line summary of a Slack-compatible payload."""
    if event.startswith("job."):
        line = f"Shardyard job {data['job']} ({data['kind']}) {data['state']}"
        if data.get("title"):
            line += f": {data['title']}"
        if data.get("error"):
            line += f"\n{data['error'].splitlines()[0][:300]}"
        return line
    if event == "run.tainted":
        return f"Shardyard run {data['run_name']} is tainted by flag {data['flag']}: {data['reason'][:300]}"
    return f"Shardyard scrub found {data['target_name']} corrupt: {data['problem'][:300]}"


def payload_for(endpoint: WebhookEndpoint, event: str, key: str, data: dict) -> dict:
    if endpoint.format == WebhookEndpoint.Format.SLACK:
        return {"text": _text(event, data)}
    return {"event": event, "key": key, "data": data}


def events_collect(*, now=None) -> int:
    """Record a pending delivery for every event an active endpoint wants and has not got
    yet. Returns how many new deliveries were recorded."""
    now = now or timezone.now()
    endpoints = list(WebhookEndpoint.objects.filter(active=True))
    if not endpoints:
        return 0
    oldest = WebhookEndpoint.objects.filter(active=True).aggregate(t=Min("created_at"))["t"]
    since = max(oldest, now - LOOKBACK)
    wanted = {e for ep in endpoints for e in ep.events}
    events = []
    if wanted & {"job.succeeded", "job.failed"}:
        events += _job_events(since)
    if "run.tainted" in wanted:
        events += _taint_events(since)
    if "scrub.corruption" in wanted:
        events += _corruption_events(since)
    seen = set(
        WebhookDelivery.objects.filter(endpoint__in=endpoints, created_at__gte=since).values_list(
            "endpoint_id", "key"
        )
    )
    rows = [
        WebhookDelivery(
            endpoint=ep,
            event=event,
            key=key,
            payload=payload_for(ep, event, key, data),
            next_attempt_at=now,
        )
        for event, key, happened, data in events
        for ep in endpoints
        if event in ep.events and happened >= ep.created_at and (ep.pk, key) not in seen
    ]
    if rows:
        # Another worker may record the same ones meanwhile: the unique key keeps one.
        WebhookDelivery.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def _ca_bundle() -> str:
    """The CA certificates an https receiver's certificate must chain to: the bundle named
    by REQUESTS_CA_BUNDLE or SSL_CERT_FILE (an internal CA), else certifi's."""
    import certifi

    return (
        os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE") or certifi.where()
    )


def _deadline_seconds() -> float:
    return float(settings.SHARDYARD_WEBHOOK_TIMEOUT)


def _connection(target, ip, timeout: float):
    """A urllib3 connection to ``ip`` that remembers its raw socket (``raw``), so that a
    watchdog can shut it down whatever layer (TLS handshake, headers) is reading it."""
    from urllib3.connection import HTTPConnection, HTTPSConnection

    base = HTTPSConnection if target.scheme == "https" else HTTPConnection

    class Connection(base):  # type: ignore[valid-type,misc]
        raw: socket.socket | None = None

        def _new_conn(self):
            self.raw = super()._new_conn()
            return self.raw

    if target.scheme == "https":
        return Connection(
            str(ip),
            target.port,
            timeout=timeout,
            server_hostname=target.host,
            assert_hostname=target.host,
            cert_reqs="CERT_REQUIRED",
            ca_certs=_ca_bundle(),
        )
    return Connection(str(ip), target.port, timeout=timeout)


def _post(endpoint: WebhookEndpoint, delivery: WebhookDelivery) -> tuple[int | None, str]:
    """POST one delivery; (HTTP status or None, error text).

    The URL's host is resolved once and every address checked (``netguard``); the request
    then connects to one of those addresses itself, never resolving the name again, and
    names the host in the Host header and in TLS (SNI and the certificate's check). A
    refused target is reported as an error without connecting; redirects are not followed
    and no proxy is used.

    The whole attempt (connecting, TLS, sending, reading the status and headers) ends by
    its deadline, SHARDYARD_WEBHOOK_TIMEOUT seconds after it began: a socket timeout alone
    bounds each read, not their sum, so a receiver answering a byte every few seconds would
    hold the sender for as long as it likes. A watchdog shuts the socket down at the
    deadline."""
    import urllib3

    body = json.dumps(delivery.payload, sort_keys=True, separators=(",", ":")).encode()
    try:
        target = target_check(endpoint.url, settings.SHARDYARD_WEBHOOK_ALLOW_NETWORKS)
    except TargetUnresolved as exc:
        return None, str(exc)[:500]
    except TargetRefused as exc:
        return None, f"refused: {exc}"[:500]
    total = _deadline_seconds()
    deadline = time.monotonic() + total
    headers = {
        "Host": target.host_header,
        "Content-Type": "application/json",
        "User-Agent": "Shardyard-Webhook/1",
        SIGNATURE_HEADER: sign(endpoint.secret, body),
        "X-Shardyard-Event": delivery.event,
        "X-Shardyard-Delivery": str(delivery.pk),
    }
    if target.userinfo:
        headers.update(urllib3.make_headers(basic_auth=":".join(target.userinfo)))
    late = f"answer not complete within the {total:g} s deadline"
    error = ""
    for ip in target.addresses[:3]:  # the next address only when this one took no connection
        left = deadline - time.monotonic()
        if left <= 0:
            return None, (error + "; " if error else "") + late
        conn = _connection(target, ip, min(left, 3.0))
        expired = threading.Event()

        def cut(conn=conn, expired=expired) -> None:
            expired.set()
            if conn.raw is not None:
                with contextlib.suppress(OSError):
                    # The plain socket's own shutdown: under TLS too, it ends any read.
                    socket.socket.shutdown(conn.raw, socket.SHUT_RDWR)

        watchdog = threading.Timer(left, cut)
        watchdog.daemon = True
        watchdog.start()
        response = None
        connected = False
        try:
            conn.connect()
            connected = True
            conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            conn.request("POST", target.path, body=body, headers=headers)
            response = conn.getresponse()
            status = response.status
            if 200 <= status < 300:
                return status, ""
            # A little of the answer says why; a receiver that sends more is not read on.
            text = response.read(200).decode(errors="replace")
            if expired.is_set():
                return None, late
            return status, f"answered {status}: {text}"
        except Exception as exc:  # whatever broke the exchange is the attempt's error
            if expired.is_set() or time.monotonic() >= deadline:
                return None, late
            no_connection = (
                urllib3.exceptions.NewConnectionError,
                urllib3.exceptions.ConnectTimeoutError,
            )
            if not connected and isinstance(exc, no_connection):
                error = f"{type(exc).__name__}: {ip}: {exc}"[:500]
                continue
            return None, f"{type(exc).__name__}: {exc}"[:500]
        finally:
            watchdog.cancel()
            if response is not None:
                with contextlib.suppress(Exception):
                    response.close()
            with contextlib.suppress(Exception):
                conn.close()
    return None, error


# A round sends at most this many deliveries per endpoint, one after the other (a
# receiver's deliveries in their order); endpoints are sent to side by side.
PER_ENDPOINT = 5


def _claim(*, limit: int, skip: set[int], endpoints: int) -> dict[int, list[WebhookDelivery]]:
    """Claim due deliveries, at most PER_ENDPOINT per endpoint and ``endpoints`` endpoints,
    none of those in ``skip`` (being sent to). A claim is a conditional UPDATE, so one
    delivery has one sender; it holds longer than its sending can take (each delivery's
    deadline, one after the other, plus a margin for recording the outcome), so it never
    lapses while its request is in flight."""
    now = timezone.now()
    free = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    due = (
        WebhookDelivery.objects.filter(
            free, state=WebhookDelivery.State.PENDING, next_attempt_at__lte=now
        )
        .exclude(endpoint_id__in=skip)
        .order_by("next_attempt_at", "id")
        .values_list("pk", "endpoint_id")[:limit]
    )
    wanted: dict[int, list[int]] = {}
    for pk, endpoint_id in due:
        if endpoint_id not in wanted and len(wanted) >= endpoints:
            continue
        pks = wanted.setdefault(endpoint_id, [])
        if len(pks) < PER_ENDPOINT:
            pks.append(pk)
    margin = 30.0 + 2 * float(settings.SHARDYARD_WEBHOOK_POLL)
    claimed: dict[int, list[WebhookDelivery]] = {}
    for endpoint_id, pks in wanted.items():
        hold = timedelta(seconds=len(pks) * _deadline_seconds() + margin)
        now = timezone.now()
        mine = []
        for pk in pks:
            if (
                WebhookDelivery.objects.filter(pk=pk, state=WebhookDelivery.State.PENDING)
                .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
                .update(claimed_until=now + hold)
            ):
                mine.append(pk)
        if mine:  # else another sender has them
            rows = WebhookDelivery.objects.select_related("endpoint").in_bulk(mine)
            claimed[endpoint_id] = [rows[pk] for pk in mine]
    return claimed


def _send_all(deliveries: list[WebhookDelivery]) -> list[tuple[WebhookDelivery, int | None, str]]:
    """One endpoint's deliveries, in order (no database: this runs in a sender thread)."""
    return [(d, *_post(d.endpoint, d)) for d in deliveries]


def _record(delivery: WebhookDelivery, status: int | None, error: str) -> None:
    attempts = delivery.attempts + 1
    done = timezone.now()
    if not error:
        fields = {"state": WebhookDelivery.State.DELIVERED, "delivered_at": done}
    elif attempts >= settings.SHARDYARD_WEBHOOK_ATTEMPTS:
        fields = {"state": WebhookDelivery.State.FAILED}
        log.warning(
            "webhook delivery %s gave up after %d attempts: %s", delivery.pk, attempts, error
        )
    else:
        wait = min(3600.0, settings.SHARDYARD_WEBHOOK_BACKOFF * 2 ** (attempts - 1))
        fields = {"next_attempt_at": done + timedelta(seconds=wait)}
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        attempts=attempts, last_status=status, last_error=error, claimed_until=None, **fields
    )


class WebhookSender:
    """Sends deliveries in threads, one endpoint per thread, so that a slow receiver
    delays only its own deliveries: ``round`` records the outcomes of the sends that
    finished, then claims due deliveries of the endpoints not being sent to and starts
    them, without waiting for any. Only the calling thread touches the database."""

    def __init__(self, *, threads: int | None = None):
        self.threads = threads or int(settings.SHARDYARD_WEBHOOK_SENDERS)
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="shardyard-webhook")
        self._flight: dict[int, Future] = {}

    def _record_finished(self) -> int:
        recorded = 0
        for endpoint_id, future in list(self._flight.items()):
            if not future.done():
                continue
            del self._flight[endpoint_id]
            for delivery, status, error in future.result():
                _record(delivery, status, error)
                recorded += 1
        return recorded

    def round(self, *, limit: int = 20) -> int:
        """Record what finished and start what is due; returns how many were recorded."""
        recorded = self._record_finished()
        free = self.threads - len(self._flight)
        if free > 0:
            for endpoint_id, deliveries in _claim(
                limit=limit, skip=set(self._flight), endpoints=free
            ).items():
                self._flight[endpoint_id] = self._pool.submit(_send_all, deliveries)
        return recorded

    def wait(self) -> int:
        """Wait for every send in flight and record it; returns how many were recorded."""
        futures_wait(list(self._flight.values()))
        return self._record_finished()

    @property
    def busy(self) -> bool:
        return bool(self._flight)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def deliveries_drain(*, limit: int = 20) -> int:
    """Send the due deliveries this drainer can claim, each endpoint's in its own thread,
    and wait for them; returns how many were attempted."""
    sender = WebhookSender()
    try:
        sender.round(limit=limit)
        return sender.wait()
    finally:
        sender.close()


def url_refusal(url: str) -> str | None:
    """Why ``url`` may not be a webhook's target now (None: it may): only http and https,
    and a host that is, or resolves to, public addresses or ones in
    SHARDYARD_WEBHOOK_ALLOW_NETWORKS. A name that does not resolve yet is let through: each
    delivery checks the address it connects to again."""
    try:
        target_check(url, settings.SHARDYARD_WEBHOOK_ALLOW_NETWORKS)
    except TargetUnresolved:
        return None
    except TargetRefused as exc:
        return str(exc)
    return None


def endpoint_create(
    *,
    url: str,
    secret: str,
    events,
    owner=None,
    team=None,
    format: str = WebhookEndpoint.Format.JSON,
) -> WebhookEndpoint:
    """A new endpoint; the events must be among WEBHOOK_EVENTS and the URL may not point at
    an internal address (``url_refusal``)."""
    events = list(dict.fromkeys(events))
    unknown = [e for e in events if e not in WEBHOOK_EVENTS]
    if unknown or not events:
        raise ValueError(
            f"events: {', '.join(unknown) or 'none given'}; choose from {', '.join(WEBHOOK_EVENTS)}"
        )
    if format not in WebhookEndpoint.Format.values:
        raise ValueError(f"format: {format!r}; choose json or slack")
    why = url_refusal(url)
    if why:
        raise ValueError(f"url: {why}")
    return WebhookEndpoint.objects.create(
        url=url, secret=secret, events=events, owner=owner, team=team, format=format
    )

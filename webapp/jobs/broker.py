"""What the sweeper needs to know of a queue to tell a lost task message from one still on
its way, without listing the queue: when the oldest message still waiting in it was sent,
and which messages were delivered to a worker lately and not acknowledged yet.

Every task message carries the time it was sent (the ``shardyard_sent`` header, set just
before it is published: ``workers.celery``), and every unit row the time its message was
last sent (``JobUnit.queued_at``, stamped before publishing and renewed while a batch is
published). A queue is first in, first out: a queued unit whose message was sent well
before the oldest message still waiting (a lease before it) and that no worker holds was
delivered already or lost, and since its unit is still queued, it was lost
(``recovery.job_resend_lost``). So a sweep reads one message per queue list and the few
delivered ones, whatever the number of queued units; a duplicate sent by mistake is
harmless anyway (claims are by state).

Redis (kombu's layout): the queue is a list under the queue's name (and
``<name>\\x06\\x16<n>`` for priorities), published to on the left, consumed from the right;
delivered but unacknowledged messages sit in the ``unacked`` hash, with their delivery time
in the ``unacked_index`` sorted set (as many as the workers hold: their prefetch). The
filesystem transport (``make run``) keeps one file per waiting message, named by the time
it was written. Messages are JSON envelopes whose base64 body is ``[args, kwargs, embed]``.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

UNIT_TASK = "workers.job_unit_run"
FINALIZE_TASK = "workers.job_finalize"
DISPATCH_TASK = "workers.job_dispatch"
SENT_HEADER = "shardyard_sent"  # seconds since the epoch, set when the message was sent
PRIORITY_STEPS = (0, 3, 6, 9)  # kombu's Redis transport: one list per step
PRIORITY_SEP = "\x06\x16"


@dataclass
class Pending:
    units: set[int] = field(default_factory=set)  # JobUnit pks
    finalizes: set[int] = field(default_factory=set)  # Job pks
    dispatches: set[int] = field(default_factory=set)  # Job pks


@dataclass
class QueueHead:
    # When the oldest message still waiting in the queue was sent (seconds since the
    # epoch); None when no message waits. A message without the header (sent by an older
    # version) counts as sent at 0: nothing is taken for lost behind it.
    oldest_sent: float | None
    # Delivered to a worker lately and not acknowledged: prefetched or running.
    delivered: Pending


def _kwargs(envelope: dict) -> dict | None:
    try:
        body = envelope["body"]
        if (envelope.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        kwargs = json.loads(body)[1]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return kwargs if isinstance(kwargs, dict) else None


def _add(pending: Pending, envelope: dict) -> None:
    task = (envelope.get("headers") or {}).get("task")
    if task not in (UNIT_TASK, FINALIZE_TASK, DISPATCH_TASK):
        return
    kwargs = _kwargs(envelope)
    if kwargs is None:
        return
    if task == UNIT_TASK and "unit_id" in kwargs:
        pending.units.add(int(kwargs["unit_id"]))
    elif task == FINALIZE_TASK and "job_id" in kwargs:
        pending.finalizes.add(int(kwargs["job_id"]))
    elif task == DISPATCH_TASK and "job_id" in kwargs:
        pending.dispatches.add(int(kwargs["job_id"]))


def _sent(raw: bytes | str) -> float:
    try:
        value = (json.loads(raw).get("headers") or {}).get(SENT_HEADER)
        return float(value) if value is not None else 0.0
    except (AttributeError, TypeError, ValueError):
        return 0.0


def queue_head(*, broker_url: str, queue: str, unacked_within: float) -> QueueHead | None:
    """The send time of ``queue``'s oldest waiting message and the unit, finalize and
    dispatch messages delivered less than ``unacked_within`` seconds ago and not
    acknowledged (an older delivery belongs to a worker that died: Redis gives it back only
    after its visibility timeout, an hour); None when the transport cannot be inspected."""
    if broker_url.startswith(("redis://", "rediss://")):
        return _redis_head(broker_url, queue, unacked_within)
    if broker_url.startswith("filesystem://"):
        return _filesystem_head(queue)
    return None


def _redis_head(url: str, queue: str, unacked_within: float) -> QueueHead:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
    keys = [queue if not step else f"{queue}{PRIORITY_SEP}{step}" for step in PRIORITY_STEPS]
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.lindex(key, -1)  # the oldest: published on the left, consumed on the right
        heads = [raw for raw in pipe.execute() if raw is not None]
    delivered = Pending()
    recent = time.time() - unacked_within
    tags = client.zrangebyscore("unacked_index", recent, "+inf")
    for raw in client.hmget("unacked", tags) if tags else []:  # type: ignore[arg-type]
        if raw is None:
            continue
        try:
            envelope, _exchange, routing_key = json.loads(raw)
        except ValueError:
            continue
        if routing_key == queue:
            _add(delivered, envelope)
    return QueueHead(
        oldest_sent=min((_sent(raw) for raw in heads), default=None), delivered=delivered
    )


def _filesystem_head(queue: str) -> QueueHead:
    folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
    oldest: float | None = None
    for path in folder.glob(f"*.{queue}.msg"):  # the development transport: a folder
        try:
            sent = _sent(path.read_bytes())
        except OSError:
            continue  # taken by a worker meanwhile
        oldest = sent if oldest is None else min(oldest, sent)
    # The transport removes a message's file when it delivers it: nothing is held.
    return QueueHead(oldest_sent=oldest, delivered=Pending())

"""What the broker still holds for a queue: the units and finalize steps whose task messages
wait in it (queued) or are out with a worker that has not acknowledged them yet.

The jobs sweeper asks this before sending a queued unit again, so that a lost message (a
flushed or deleted queue key, a broker restarted without persistence) is replaced and a
message still on its way is not. A duplicate would be harmless anyway: claims are by state.

Redis (kombu's layout): the queue is a list under the queue's name (and ``<name>\\x06\\x16<n>``
for priorities); delivered but unacknowledged messages sit in the ``unacked`` hash, with
their delivery time in the ``unacked_index`` sorted set. The filesystem transport keeps one
file per waiting message. Messages are JSON envelopes whose base64 body is
``[args, kwargs, embed]``.
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
LIST_PAGE = 1000  # messages read from the queue per LRANGE


@dataclass
class Pending:
    units: set[int] = field(default_factory=set)  # JobUnit pks
    finalizes: set[int] = field(default_factory=set)  # Job pks


def _add(pending: Pending, envelope: dict) -> None:
    headers = envelope.get("headers") or {}
    task = headers.get("task")
    if task not in (UNIT_TASK, FINALIZE_TASK):
        return
    try:
        body = envelope["body"]
        if (envelope.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        kwargs = json.loads(body)[1]
    except (KeyError, IndexError, TypeError, ValueError):
        return
    if task == UNIT_TASK and "unit_id" in kwargs:
        pending.units.add(int(kwargs["unit_id"]))
    elif task == FINALIZE_TASK and "job_id" in kwargs:
        pending.finalizes.add(int(kwargs["job_id"]))


def pending_messages(*, broker_url: str, queue: str, unacked_within: float) -> Pending | None:
    """The unit and finalize messages the broker holds for ``queue``; None when the
    transport cannot be inspected. Unacknowledged messages count only when delivered less
    than ``unacked_within`` seconds ago: an older one belongs to a worker that died (Redis
    gives it back only after its visibility timeout, an hour)."""
    if broker_url.startswith(("redis://", "rediss://")):
        return _redis_pending(broker_url, queue, unacked_within)
    if broker_url.startswith("filesystem://"):
        return _filesystem_pending(queue)
    return None


def _redis_pending(url: str, queue: str, unacked_within: float) -> Pending:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
    pending = Pending()
    keys = [queue] + [k.decode() for k in client.scan_iter(match=f"{queue}\x06\x16*")]
    for key in keys:
        # In pages: a queue of a million messages is never held at once.
        for start in range(0, client.llen(key), LIST_PAGE):
            for raw in client.lrange(key, start, start + LIST_PAGE - 1):
                try:
                    _add(pending, json.loads(raw))
                except ValueError:
                    continue
    recent = time.time() - unacked_within
    tags = client.zrangebyscore("unacked_index", recent, "+inf")
    for raw in client.hmget("unacked", tags) if tags else []:  # type: ignore[arg-type, assignment]
        if raw is None:
            continue
        try:
            envelope, _exchange, routing_key = json.loads(raw)
        except ValueError:
            continue
        if routing_key == queue:
            _add(pending, envelope)
    return pending


def _filesystem_pending(queue: str) -> Pending:

    folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
    pending = Pending()
    for path in folder.glob(f"*.{queue}.msg"):
        try:
            _add(pending, json.loads(path.read_bytes()))
        except (OSError, ValueError):
            continue  # taken by a worker meanwhile
    return pending

"""Sending a phase's messages against the real Redis broker while the sweeper runs: a unit
whose message is still waiting to be published is never taken for lost and sent twice,
however long publishing the phase takes."""

from __future__ import annotations

import base64
import json
import time
from collections import Counter

import pytest
import redis

from tests.integration.test_jobs_engine import _plan
from webapp.jobs import recovery, services
from webapp.jobs.models import JobUnit
from workers import tasks

pytestmark = pytest.mark.services

LEASE = 1  # seconds


def _queued_unit_ids(url: str, queue: str) -> Counter:
    client = redis.Redis.from_url(url)
    ids: Counter = Counter()
    for raw in client.lrange(queue, 0, -1):
        envelope = json.loads(raw)
        body = json.loads(base64.b64decode(envelope["body"]))
        ids[body[1]["unit_id"]] += 1
    return ids


def test_a_phase_published_for_longer_than_the_lease_is_sent_once(
    postgres, transactional_db, redis_url, celery_queue, settings, monkeypatch, tmp_path
):
    settings.SHARDYARD_UNIT_LEASE = LEASE
    redis.Redis.from_url(redis_url).delete(celery_queue)
    publish = tasks.job_unit_run.apply_async
    sent: list[int] = []
    swept: list[str] = []

    def slow_publish(*args, **kwargs):
        # A broker that takes a quarter of a second per message: 12 take three leases.
        publish(*args, **kwargs)
        sent.append(kwargs["kwargs"]["unit_id"])
        time.sleep(LEASE / 4)
        if len(sent) == 8 and not swept:
            # Meanwhile a worker's sweeper runs (two leases after the first message).
            swept.append("done")
            recovery.job_resend_lost(queue=celery_queue, lease_seconds=LEASE)

    monkeypatch.setattr(tasks.job_unit_run, "apply_async", slow_publish)
    job = services.job_create(plan=_plan(tmp_path / "out", n=12))

    assert swept == ["done"]
    pks = set(JobUnit.objects.filter(job=job, phase=0).values_list("pk", flat=True))
    assert len(pks) == 12
    in_broker = _queued_unit_ids(redis_url, celery_queue)
    assert set(in_broker) == pks
    assert set(in_broker.values()) == {1}, in_broker
    assert not JobUnit.objects.filter(job=job).exclude(last_event="").exists()

"""A phase's units are sent in batches by a dispatcher, the sweep finds lost messages from
send stamps and the queue's oldest message (not by listing the queue), and workers take
turns sweeping a queue: against the real Redis broker and Postgres, with real ``celery
worker`` subprocesses where units run."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path

import pytest
import redis
from django.db import connection

from tests.integration.test_jobs_engine import _plan
from tests.integration.test_jobs_heal import fast_leases
from tests.integration.test_jobs_workers import (
    catalog_env,
    killable_build,
    killable_clean_run,
    killable_source,
    shard_bytes,
    wait_job,
)
from webapp.jobs import recovery, services
from webapp.jobs.models import Job, JobState, JobUnit, SweepTurn, UnitState

pytestmark = pytest.mark.services
__all__ = ["catalog_env", "fast_leases"]


def _messages(url: str, queue: str) -> list[tuple[str, dict]]:
    """The queue's messages, oldest first: (task, kwargs)."""
    found = []
    for raw in reversed(redis.Redis.from_url(url).lrange(queue, 0, -1)):
        envelope = json.loads(raw)
        body = json.loads(base64.b64decode(envelope["body"]))
        found.append((envelope["headers"]["task"], body[1]))
    return found


@pytest.fixture
def batch_of_two(monkeypatch, settings):
    monkeypatch.setenv("SHARDYARD_DISPATCH_BATCH", "2")
    settings.SHARDYARD_DISPATCH_BATCH = 2


def test_a_phase_is_sent_in_batches_by_the_dispatcher(
    postgres, redis_url, celery_workers, catalog_env, celery_queue, batch_of_two, tmp_path
):
    redis.Redis.from_url(redis_url).delete(celery_queue)
    source = killable_source(catalog_env, "batches")
    ts = killable_build(source)  # three units in its first phase, two to a batch

    # The launch queued and sent one batch, with the dispatcher's next step halfway.
    units = JobUnit.objects.filter(job_id=ts.job_id, phase=0).order_by("index")
    first, second, third = units
    assert _messages(redis_url, celery_queue) == [
        ("workers.job_unit_run", {"unit_id": first.pk}),
        ("workers.job_dispatch", {"job_id": ts.job_id, "phase": 0}),
        ("workers.job_unit_run", {"unit_id": second.pk}),
    ]
    assert [u.state for u in units] == [UnitState.QUEUED, UnitState.QUEUED, UnitState.PENDING]
    assert Job.objects.get(pk=ts.job_id).dispatch_queued_at is not None

    worker = celery_workers("w1")
    job = wait_job(ts.job_id)

    assert job.state == JobState.SUCCEEDED, job.log_tail + worker.log()
    every = JobUnit.objects.filter(job=job)
    assert set(every.values_list("state", "attempts", "last_event")) == {
        (UnitState.SUCCEEDED, 1, "")
    }
    assert job.dispatch_queued_at is None
    assert shard_bytes(Path(ts.path)) == killable_clean_run(
        catalog_env, "batches", tmp_path / "clean"
    )


def test_the_sweep_sends_again_a_dispatch_whose_message_was_lost(
    postgres, redis_url, celery_workers, catalog_env, celery_queue, batch_of_two,
    fast_leases, tmp_path,
):  # fmt: skip
    client = redis.Redis.from_url(redis_url)
    client.delete(celery_queue)
    source = killable_source(catalog_env, "lostdispatch")
    ts = killable_build(source)
    # The dispatcher's message is lost (the broker dropped it); the units' are not.
    raw = next(
        m for m in client.lrange(celery_queue, 0, -1)
        if json.loads(m)["headers"]["task"] == "workers.job_dispatch"
    )  # fmt: skip
    assert client.lrem(celery_queue, 1, raw) == 1

    worker = celery_workers("w1")
    job = wait_job(ts.job_id)

    assert job.state == JobState.SUCCEEDED, job.log_tail + worker.log()
    assert "the dispatcher's message was lost); sent again" in job.log_tail
    assert set(JobUnit.objects.filter(job=job).values_list("attempts", flat=True)) == {1}
    assert shard_bytes(Path(ts.path)) == killable_clean_run(
        catalog_env, "lostdispatch", tmp_path / "clean"
    )


def test_the_sweep_sends_again_what_was_sent_before_the_oldest_waiting_message(
    postgres, transactional_db, redis_url, celery_queue, settings, tmp_path
):
    lease = 1
    settings.SHARDYARD_UNIT_LEASE = lease
    client = redis.Redis.from_url(redis_url)
    client.delete(celery_queue)
    early = services.job_create(plan=_plan(tmp_path / "early", n=3))
    time.sleep(lease * 1.5)
    late = services.job_create(plan=_plan(tmp_path / "late", n=3))
    time.sleep(lease * 1.5)
    # Every unit was sent longer ago than the lease, all six messages wait: none is lost.
    assert len(_messages(redis_url, celery_queue)) == 6
    assert recovery.job_resend_lost(queue=celery_queue, lease_seconds=lease) == []

    # The broker loses the early job's three messages (the oldest). The late job's wait,
    # sent more than a lease after them: the early units were due before those.
    for _ in range(3):
        client.rpop(celery_queue)
    touched = recovery.job_resend_lost(queue=celery_queue, lease_seconds=lease)

    assert [job.pk for job in touched] == [early.pk]
    resent = JobUnit.objects.filter(job=early, phase=0)
    assert set(resent.values_list("last_event", flat=True)) == {"broker message lost; sent again"}
    assert not JobUnit.objects.filter(job=late).exclude(last_event="").exists()
    waiting = [kwargs["unit_id"] for _, kwargs in _messages(redis_url, celery_queue)]
    assert sorted(waiting[3:]) == sorted(resent.values_list("pk", flat=True))
    # Sent again just now: not lost again at the next sweep.
    assert recovery.job_resend_lost(queue=celery_queue, lease_seconds=lease) == []
    client.delete(celery_queue)  # no worker runs them: nothing is left for the next test


def test_workers_take_turns_sweeping_a_queue(postgres, transactional_db):
    inside, leave = threading.Event(), threading.Event()
    seen: list[bool] = []

    def first_worker() -> None:
        try:
            with recovery.sweep_turn(queue="q-turns", worker="a", interval=0.5) as mine:
                seen.append(mine)
                inside.set()
                leave.wait(30)
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=first_worker)
    thread.start()
    assert inside.wait(30)
    # While a sweep of the queue runs, no other worker sweeps it...
    with recovery.sweep_turn(queue="q-turns", worker="b", interval=0.5) as mine:
        assert not mine
    # ...but another queue is swept.
    with recovery.sweep_turn(queue="q-other", worker="b", interval=0.5) as mine:
        assert mine
    leave.set()
    thread.join()
    assert seen == [True]
    # Swept less than an interval ago: not again yet; then again.
    with recovery.sweep_turn(queue="q-turns", worker="b", interval=0.5) as mine:
        assert not mine
    time.sleep(0.5)
    with recovery.sweep_turn(queue="q-turns", worker="b", interval=0.5) as mine:
        assert mine
    assert SweepTurn.objects.get(queue="q-turns").worker == "b"

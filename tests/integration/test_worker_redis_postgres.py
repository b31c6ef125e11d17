"""A real Celery worker subprocess takes a task from Redis and writes to Postgres."""

import uuid

import pytest

from tests.support.services import wait_for
from webapp.ops.models import Heartbeat
from workers.tasks import heartbeat

pytestmark = pytest.mark.services


def test_it_runs_a_task_on_a_worker_through_redis_into_postgres(
    postgres, redis_url, celery_workers
):
    worker = celery_workers("redis-pg")
    nonce = uuid.uuid4().hex
    heartbeat.apply_async(kwargs={"nonce": nonce})

    hb = wait_for(
        lambda: Heartbeat.objects.filter(nonce=nonce).first(), timeout=60, what="heartbeat row"
    )

    assert hb.broker == "redis"
    assert hb.worker.startswith("redis-pg@"), worker.log()


def test_it_records_a_redelivered_task_once(postgres, redis_url, celery_workers):
    celery_workers("redis-pg-twice")
    nonce = uuid.uuid4().hex
    heartbeat.apply_async(kwargs={"nonce": nonce})
    heartbeat.apply_async(kwargs={"nonce": nonce})
    probe = uuid.uuid4().hex
    heartbeat.apply_async(kwargs={"nonce": probe})  # a single worker runs them in order

    wait_for(lambda: Heartbeat.objects.filter(nonce=probe).exists(), timeout=60, what="probe row")

    assert Heartbeat.objects.filter(nonce=nonce).count() == 1

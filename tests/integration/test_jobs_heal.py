"""Jobs heal themselves, driven the way the faults happen: a real ``celery worker``
subprocess SIGKILLed mid-unit, ``pg_terminate_backend`` on the workers' Postgres
connections, the broker's queue key deleted from Redis, a launch while the broker is down.
No test calls a recovery function: the workers' sweepers and the engine's retries do the
work, and every job ends with the bytes of a clean run. Heartbeat, lease and sweep are
set to seconds through the environment the workers read (SHARDYARD_UNIT_HEARTBEAT,
SHARDYARD_UNIT_LEASE, SHARDYARD_SWEEP_INTERVAL)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from django.db import connection

from shardcore.tokenize import tokenize
from tests.integration.test_jobs_workers import (
    catalog_env,
    kill_mid_unit,
    killable_build,
    killable_clean_run,
    killable_source,
    shard_bytes,
    wait_job,
)
from tests.support.services import manage, wait_for
from webapp.catalog.models import ArtifactStatus, TokenizedSource
from webapp.jobs import services as jobs
from webapp.jobs.models import Job, JobState, JobUnit, UnitState

pytestmark = pytest.mark.services
__all__ = ["catalog_env"]


@pytest.fixture
def fast_leases(monkeypatch, settings):
    """Heartbeat every second, lost after 4 s without one, sweep every second."""
    for name, value in (
        ("SHARDYARD_UNIT_HEARTBEAT", 1),
        ("SHARDYARD_UNIT_LEASE", 4),
        ("SHARDYARD_SWEEP_INTERVAL", 1),
    ):
        monkeypatch.setenv(name, str(value))
        setattr(settings, name, value)


def _job_page(client, django_user_model, job_id: int) -> str:
    user = django_user_model.objects.create_user(username="operator", password="x-12345678")
    client.force_login(user)
    response = client.get(f"/jobs/{job_id}/")
    assert response.status_code == 200
    return response.content.decode()


def test_it_requeues_a_killed_workers_unit_without_an_operator(
    postgres, redis_url, celery_workers, catalog_env, fast_leases, tmp_path, client,
    django_user_model,
):  # fmt: skip
    source = killable_source(catalog_env, "heal")
    ts = killable_build(source)
    stuck = kill_mid_unit(celery_workers, ts.job_id)
    attempts, doomed = stuck.attempts, stuck.worker

    # Nobody calls retry or reap: the surviving worker's sweeper finds the unit's
    # heartbeat older than the lease and queues it again.
    rescuer = celery_workers("rescuer")
    job = wait_job(ts.job_id)

    assert job.state == JobState.SUCCEEDED, job.log_tail + rescuer.log()
    stuck.refresh_from_db()
    assert stuck.state == UnitState.SUCCEEDED
    assert stuck.attempts == attempts + 1
    assert stuck.worker.startswith("rescuer@")
    assert stuck.last_event.startswith(f"requeued after worker lost ({doomed}")
    assert "lost unit(s) requeued" in job.log_tail
    assert Job.objects.get(pk=job.pk).documents == source.num_documents  # none twice
    assert shard_bytes(Path(ts.path)) == killable_clean_run(catalog_env, "heal", tmp_path / "clean")
    page = _job_page(client, django_user_model, job.pk)
    assert "requeued after worker lost" in page and "lost unit(s) requeued" in page


def test_it_retries_recording_after_the_database_drops_the_connection(
    postgres, redis_url, celery_workers, catalog_env, fast_leases, tmp_path
):
    source = killable_source(catalog_env, "dropped")
    ts = killable_build(source)
    worker = celery_workers("w1")
    hit: set[tuple[int, int]] = set()

    def terminate_while_running() -> Job | None:
        # Each time a new claim is running (the worker is inside shardcore, its database
        # connection idle), the server terminates every connection but this test's.
        running = JobUnit.objects.filter(job_id=ts.job_id, state=UnitState.RUNNING)
        for pk, attempts in running.values_list("pk", "attempts"):
            if (pk, attempts) not in hit:
                hit.add((pk, attempts))
                with connection.cursor() as cur:
                    cur.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
        job = Job.objects.get(pk=ts.job_id)
        return job if job.state in (JobState.SUCCEEDED, JobState.FAILED) else None

    job = wait_for(terminate_while_running, timeout=180, interval=0.005, what="the job")

    assert job.state == JobState.SUCCEEDED, job.log_tail + worker.log()
    assert hit, "no unit was caught running"
    retried = JobUnit.objects.filter(job=job, last_event__startswith="recorded after")
    assert retried.exists(), job.log_tail + worker.log()
    # Recorded by the claim that ran it: no rerun was needed, no unit counted twice.
    assert set(retried.values_list("attempts", flat=True)) == {1}
    assert "OperationalError" in retried.first().last_event
    assert "database error(s)" in job.log_tail
    assert job.documents == source.num_documents
    assert shard_bytes(Path(ts.path)) == killable_clean_run(
        catalog_env, "dropped", tmp_path / "clean"
    )


def _unit_messages(broker: redis.Redis, queue: str) -> list[bytes]:
    """The queue's messages that run a job's unit."""
    return [
        raw
        for raw in broker.lrange(queue, 0, -1)
        if json.loads(raw).get("headers", {}).get("task") == "workers.job_unit_run"
    ]


def test_it_sends_again_units_whose_broker_message_was_lost(
    postgres, redis_url, celery_workers, catalog_env, celery_queue, fast_leases, tmp_path
):
    source = killable_source(catalog_env, "lostmsg")
    ts = killable_build(source)  # three units' messages wait in Redis: no worker runs yet
    broker = redis.Redis.from_url(redis_url)
    # (the queue may also hold a fact's computation the source's registration asked for)
    wait_for(
        lambda: len(_unit_messages(broker, celery_queue)) == 3,
        timeout=10,
        what="the three units' messages",
    )
    assert broker.delete(celery_queue) == 1  # the queue key is gone, and the messages
    assert JobUnit.objects.filter(job_id=ts.job_id, state=UnitState.QUEUED).count() == 3

    worker = celery_workers("w1")
    job = wait_job(ts.job_id)

    assert job.state == JobState.SUCCEEDED, job.log_tail + worker.log()
    # The three units of phase 1 lost their messages; later phases were sent normally.
    units = JobUnit.objects.filter(job=job)
    lost = units.filter(phase=0)
    assert set(lost.values_list("last_event", flat=True)) == {"broker message lost; sent again"}
    assert not units.filter(phase__gt=0).exclude(last_event="").exists()
    assert set(units.values_list("attempts", flat=True)) == {1}
    assert "3 queued unit(s) had no message in the broker; sent again" in job.log_tail
    assert shard_bytes(Path(ts.path)) == killable_clean_run(
        catalog_env, "lostmsg", tmp_path / "clean"
    )


def test_it_fails_a_launch_clearly_while_the_broker_is_down_and_retries_it(
    postgres, redis_url, celery_workers, catalog_env, celery_queue, tmp_path
):
    source = killable_source(catalog_env, "nobroker")
    # The command line launches with a broker nobody listens on (port 9 discards).
    done = manage(
        "catalog", "tokenize", str(source.pk),
        SHARDYARD_QUEUE=celery_queue, CELERY_BROKER_URL="redis://127.0.0.1:9/0",
    )  # fmt: skip
    assert done.returncode != 0
    assert (
        "failed at launch" in done.stderr and "redis://127.0.0.1:9/0 is unreachable" in done.stderr
    )
    ts = TokenizedSource.objects.get(source=source)
    job = Job.objects.get(pk=ts.job_id)
    assert job.state == JobState.FAILED and "Retry once the broker is back" in job.error
    assert ts.status == ArtifactStatus.FAILED
    assert not JobUnit.objects.filter(job=job, state=UnitState.RUNNING).exists()

    jobs.job_retry(job_id=job.pk)  # the broker is back (this process uses the real one)
    worker = celery_workers("w1")
    job = wait_job(job.pk)

    assert job.state == JobState.SUCCEEDED, job.log_tail + worker.log()
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY
    files = sorted(str(p) for p in (catalog_env / "nobroker").iterdir())
    tokenize(files, str(tmp_path / "clean"), shard_size=256 << 20, unit_bytes=64 << 20)
    assert shard_bytes(Path(ts.path)) == shard_bytes(tmp_path / "clean")


def test_it_fails_a_unit_that_loses_its_worker_every_time_instead_of_looping(
    postgres, redis_url, celery_workers, catalog_env, fast_leases
):
    source = killable_source(catalog_env, "doomed")
    ts = killable_build(source)
    unit = kill_mid_unit(celery_workers, ts.job_id)
    # Its earlier attempts were lost the same way (each one a worker killed under it).
    JobUnit.objects.filter(pk=unit.pk).update(attempts=jobs.MAX_UNIT_ATTEMPTS)

    watcher = celery_workers("watcher")
    job = wait_job(ts.job_id)

    assert job.state == JobState.FAILED, job.log_tail + watcher.log()
    unit.refresh_from_db()
    assert unit.state == UnitState.FAILED and unit.attempts == jobs.MAX_UNIT_ATTEMPTS
    assert f"lost its worker on each of {jobs.MAX_UNIT_ATTEMPTS} attempts" in job.error
    assert TokenizedSource.objects.get(pk=ts.pk).status == ArtifactStatus.FAILED

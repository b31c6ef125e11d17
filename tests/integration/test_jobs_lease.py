"""A claim is a lease: a unit left "running" by a SIGKILLed worker is lost once its claim is
older than SHARDYARD_UNIT_LEASE (the workers here beat every 15 s), and ``job_retry`` (without include_running) or
``manage.py catalog jobs-reap`` queue it again; the job then finishes with the bytes of a
clean run. Real ``celery worker`` subprocesses, Redis and Postgres; the lease is set short
(1 s) only where the test waits for it to pass."""

from __future__ import annotations

from pathlib import Path

import pytest

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
from webapp.jobs import services as jobs
from webapp.jobs.models import Job, JobState, JobUnit, UnitState

pytestmark = pytest.mark.services
__all__ = ["catalog_env"]


def _lost(unit: JobUnit, lease: int = 1):
    return JobUnit.objects.filter(jobs.lost_units_q(lease_seconds=lease), pk=unit.pk).exists()


def test_it_requeues_a_lost_unit_on_retry_without_the_flag(
    postgres, redis_url, celery_workers, catalog_env, settings, tmp_path
):
    source = killable_source(catalog_env, "lease")
    ts = killable_build(source)
    unit = kill_mid_unit(celery_workers, ts.job_id)

    # Within the lease (a minute by default) the unit may still be running somewhere.
    with pytest.raises(jobs.JobError, match="none of its units is lost"):
        jobs.job_retry(job_id=ts.job_id)
    settings.SHARDYARD_UNIT_LEASE = 1
    wait_for(lambda: _lost(unit), timeout=30, what="the claim to outlive a 1 s lease")
    jobs.job_retry(job_id=ts.job_id)
    rescuer = celery_workers("rescuer")
    job = wait_job(ts.job_id)

    assert job.state == JobState.SUCCEEDED, job.log_tail + rescuer.log()
    unit.refresh_from_db()
    assert unit.state == UnitState.SUCCEEDED and unit.attempts == 2
    assert unit.worker.startswith("rescuer@")
    assert "1 unit(s) lost: claimed by doomed" in job.log_tail
    assert shard_bytes(Path(ts.path)) == killable_clean_run(
        catalog_env, "lease", tmp_path / "clean"
    )


def test_it_reaps_lost_units_from_the_command_line(
    postgres, redis_url, celery_workers, catalog_env, celery_queue, tmp_path
):
    source = killable_source(catalog_env, "lease")
    ts = killable_build(source)
    unit = kill_mid_unit(celery_workers, ts.job_id)

    def reap(lease: str) -> str:
        done = manage("catalog", "jobs-reap", "--lease", lease, SHARDYARD_QUEUE=celery_queue)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert reap("86400") == "no lost units"
    assert JobUnit.objects.get(pk=unit.pk).state == UnitState.RUNNING
    wait_for(lambda: _lost(unit), timeout=30, what="the claim to outlive a 1 s lease")
    assert reap("1") == f"job {ts.job_id}: retry: 1 lost unit(s) requeued"
    assert JobUnit.objects.get(pk=unit.pk).state == UnitState.QUEUED
    assert reap("1") == "no lost units"  # nothing runs now: nothing is lost
    celery_workers("rescuer")
    job = wait_job(ts.job_id)

    assert job.state == JobState.SUCCEEDED, job.log_tail
    assert not JobUnit.objects.filter(job=job).exclude(state=UnitState.SUCCEEDED).exists()
    assert Job.objects.get(pk=job.pk).documents == source.num_documents  # none twice
    assert shard_bytes(Path(ts.path)) == killable_clean_run(
        catalog_env, "lease", tmp_path / "clean"
    )

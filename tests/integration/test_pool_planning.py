"""A pool over more documents than a request plans (``SHARDYARD_PLAN_INLINE_DOCUMENTS``) is
planned by workers: the launch records the pool and a planning job and returns; the
planning job's units read the sidecars through the filter, a group of inputs each, and its
last unit saves the plan; its recorder starts the pool's own job. Real Celery workers,
Redis and Postgres; the pool built this way is the pool a request-planned launch builds,
byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardcore.manifest import file_entries, read_manifest
from shardcore.planning import DIR as PLANNING_DIR
from shardcore.pool import PoolReader
from tests.integration.dashboard_fixtures import users
from tests.integration.test_jobs_workers import catalog_env, stdlib_docs, wait_job, write_jsonl
from webapp.catalog.models import ArtifactStatus, Pool
from webapp.catalog.services.pools import pool_build
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import Job, JobState

pytestmark = pytest.mark.services
__all__ = ["catalog_env", "users"]

FILTER = "n_tokens > 200"


def _tokenized(root: Path):
    write_jsonl(root / "code" / "a.jsonl", stdlib_docs(40))
    write_jsonl(root / "code" / "b.jsonl", stdlib_docs(40, offset=40))
    source = source_register(name="code", uri=str(root / "code"))
    ts = tokenized_source_build(source_id=source.pk, shard_size=64 << 10, unit_bytes=96 << 10)
    assert wait_job(ts.job_id).state == JobState.SUCCEEDED
    ts.refresh_from_db()
    return ts


def _build(name: str, ts, **kw) -> Pool:
    return pool_build(
        name=name, tokenized_ids=[ts.pk], seq_len=128, filter=FILTER, seed=3,
        val_fraction=0.1, memory=1 << 20, shard_size=16 << 10, **kw,
    )  # fmt: skip


def test_a_large_pool_is_planned_by_a_worker_and_builds_the_same_bytes(
    postgres, redis_url, celery_workers, catalog_env, settings, client, users
):
    celery_workers("alpha")
    ts = _tokenized(catalog_env)

    settings.PLAN_INLINE_DOCUMENTS = ts.num_documents  # at the limit: planned in the request
    inline = _build("inline", ts)
    assert inline.job.kind == "pool" and inline.params["filter"] == FILTER

    settings.PLAN_INLINE_DOCUMENTS = ts.num_documents - 1  # one more: a worker's
    later = _build("later", ts)
    planning = later.job
    assert planning.kind == "planning" and planning.title == "plan pool later"
    # Its units: the properties' type of the one group of inputs, their union, the group
    # read through the filter (shardcore.pool.select), then the plan.
    assert planning.num_phases == 4 and planning.units_total == 4
    assert later.status == ArtifactStatus.BUILDING
    # What the request knows is on the row at once (a double click answers this pool).
    assert later.params == {"shuffle": "exact", "seed": 3, "val_fraction": 0.1}
    assert _build("later", ts).pk == later.pk
    assert wait_job(planning.pk).state == JobState.SUCCEEDED

    later.refresh_from_db()
    assert later.job_id != planning.pk and later.job.kind == "pool"
    assert later.job.title == "pool later"
    # The planning job's page (where the launch form leads) goes on to the pool and its job.
    client.force_login(users["viewer"])
    page = client.get(f"/jobs/{planning.pk}/").content.decode()
    assert f'id="job-planned" href="/pools/{later.pk}/">pool later</a>' in page
    assert f'id="job-planned-job" href="/jobs/{later.job_id}/">job {later.job_id}</a>' in page
    assert wait_job(later.job_id).state == JobState.SUCCEEDED, later.job.log_tail
    assert wait_job(inline.job_id).state == JobState.SUCCEEDED
    later.refresh_from_db()
    inline.refresh_from_db()
    assert later.status == inline.status == ArtifactStatus.READY
    assert later.params["filter"] == FILTER and later.params["seed"] == 3
    # The same plan, so the same pool: fingerprint, records and every shard's bytes.
    assert later.fingerprint == inline.fingerprint
    assert later.num_documents == inline.num_documents < ts.num_documents
    assert later.num_records == inline.num_records == PoolReader(later.path).num_records
    a, b = read_manifest(later.path), read_manifest(inline.path)
    assert [f["xxh3"] for f in file_entries(a)] == [f["xxh3"] for f in file_entries(b)]
    assert Pool.objects.get(train_pool=later).num_documents == (
        Pool.objects.get(train_pool=inline).num_documents
    )
    # The planning's scratch went with the pool's.
    assert not (Path(later.path) / PLANNING_DIR).exists()


def test_a_filter_that_selects_nothing_fails_the_planning_job_and_the_pool(
    postgres, redis_url, celery_workers, catalog_env, settings
):
    celery_workers("alpha")
    ts = _tokenized(catalog_env)
    settings.PLAN_INLINE_DOCUMENTS = 0
    pool = pool_build(name="none", tokenized_ids=[ts.pk], seq_len=128, filter="lang = 'klingon'")
    job = wait_job(pool.job_id)
    assert job.state == JobState.FAILED
    assert "planning pool 'none'" in job.error
    assert f"selects none of the {ts.num_documents:,} documents" in job.error
    pool.refresh_from_db()
    assert pool.status == ArtifactStatus.FAILED and pool.job_id == job.pk
    assert Job.objects.filter(kind="pool").count() == 0  # no pool job was started

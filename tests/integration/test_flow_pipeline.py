"""The whole flow on real workers: a registered real-text source, tokenized, pooled (with a
validation slice), mixed into a version, a registered run reporting progress, and its
resume position computed by shardcore from the catalog."""

from __future__ import annotations

import pytest

from shardcore.pool import Pool as PoolReader
from tests.integration.test_jobs_workers import catalog_env, stdlib_docs, wait_job, write_jsonl
from webapp.catalog import selectors, services
from webapp.catalog.models import ArtifactStatus, Pool, Shard
from webapp.jobs.models import JobState

pytestmark = pytest.mark.services
__all__ = ["catalog_env"]


def test_it_goes_from_a_source_to_a_run_with_a_resume_position(
    postgres, redis_url, celery_workers, catalog_env
):
    write_jsonl(catalog_env / "prose" / "a.jsonl", stdlib_docs(25))
    write_jsonl(catalog_env / "code" / "b.jsonl", stdlib_docs(20, offset=40))
    prose = services.source_register(name="prose", uri=str(catalog_env / "prose"))
    code = services.source_register(name="code", uri=str(catalog_env / "code"))
    celery_workers("left"), celery_workers("right")

    built = []
    for source in (prose, code):
        ts = services.tokenized_source_build(source_id=source.pk, shard_size=32 << 10)
        assert wait_job(ts.job_id).state == JobState.SUCCEEDED
        built.append(ts)
    pools = [
        services.pool_build(name=f"p-{ts.source.name}", tokenized_ids=[ts.pk], seq_len=128,
                            val_fraction=0.1, memory=1 << 20, shard_size=16 << 10)
        for ts in built
    ]  # fmt: skip
    for pool in pools:
        job = wait_job(pool.job_id)
        assert job.state == JobState.SUCCEEDED, job.log_tail
        pool.refresh_from_db()
        assert pool.status == ArtifactStatus.READY
        assert pool.num_records == PoolReader(pool.path).num_records
        assert Shard.objects.filter(pool=pool).count() == len(
            PoolReader(pool.path).manifest["shards"]
        )
        val = Pool.objects.get(train_pool=pool)
        assert val.split == Pool.Split.VAL and val.num_documents > 0
        assert val.num_documents + pool.num_documents == pool.parents.get().num_documents

    mixture = services.mixture_create(name="blend")
    version = services.mixture_version_create(
        mixture_id=mixture.pk,
        components=[{"pool": pools[0].pk, "weight": 0.7}, {"pool": pools[1].pk, "weight": 0.3}],
        token_budget=200_000,
        seed=1,
    )
    assert version.number == 1 and version.status == ArtifactStatus.READY
    run = services.run_register(name="run-1", mixture_version_id=version.pk, external_id="wandb/x")
    services.run_progress_record(run_id=run.pk, step=10, consumed_samples=333)

    position = services.run_resume_position(run_id=run.pk)

    from shardcore.blend import build_blending_indices

    index, sample_index = build_blending_indices([0.7, 0.3], 334)
    expected_pool = pools[int(index[333])]
    assert position["pool_id"] == expected_pool.pk
    reader = PoolReader(expected_pool.path)
    epoch, record = divmod(int(sample_index[333]), reader.num_records)
    assert (position["epoch"], position["record"]) == (epoch, record)
    shard = position["shard"]
    first = reader.manifest["cumulative_records"][shard]
    assert position["record_in_shard"] == record - first
    lineage = selectors.run_lineage(run_id=run.pk)
    assert {s.name for s in lineage.sources} == {"prose", "code"}

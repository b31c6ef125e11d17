"""The end-to-end scale harness (bench/scale/e2e.py) at a few MB: real stdlib text
tokenized through the service, replicated, recorded in the catalog, pooled by two real
``celery worker`` subprocesses on Redis and Postgres, one SIGKILLed midway; the pool the
service built is byte-identical to the one ``build_pool`` builds in one process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.scale import e2e
from tests.support.services import catalog_roots, worker_env
from webapp.catalog.models import ArtifactStatus, Pool, TokenizedSource
from webapp.jobs.models import Job, JobUnit, UnitState

pytestmark = pytest.mark.services


def test_a_pool_built_through_the_service_with_a_worker_killed_equals_a_one_process_build(
    postgres, transactional_db, redis_url, celery_queue, tmp_path, settings, monkeypatch
):
    catalog_roots(tmp_path, settings, monkeypatch)  # tmp_path/sources and tmp_path/data
    for name, value in (
        ("SHARDYARD_UNIT_HEARTBEAT", 1),
        ("SHARDYARD_UNIT_LEASE", 4),
        ("SHARDYARD_SWEEP_INTERVAL", 1),
    ):
        monkeypatch.setenv(name, str(value))

    report = e2e.run(
        tmp_path, size=3 << 20, shards=120, queue=celery_queue, env=worker_env(),
        seed_modules=40, input_shard_size=1 << 20, kill_at=0.4, timeout=600,
        name="e2e", log=lambda _m: None,
    )  # fmt: skip

    # Real tokens, replicated past the seed, recorded as a ready tokenization.
    assert report["input"]["tokens"] > 2 * report["seed"]["tokens"] > 0
    assert report["input"]["shards"] >= 3
    assert TokenizedSource.objects.count() == 2  # the seed and its replica
    replica = TokenizedSource.objects.get(job__title="replicate e2e")
    assert replica.status == ArtifactStatus.READY
    assert replica.num_documents == report["input"]["documents"]
    # The worker was SIGKILLed while it ran a unit; the unit ran again elsewhere, once.
    killed = report["service"]["killed"]
    workers = report["service"]["workers"]
    assert killed["worker"] in ("w1", "w2") and workers[killed["worker"]]["killed"]
    assert sorted(workers) == sorted(["w1", "w2", killed["worker"] + "b"])  # the restart
    assert killed["units_done"] < killed["units_total"]
    assert killed["after"]["state"] == UnitState.SUCCEEDED
    assert killed["after"]["attempts"] == killed["attempts"] + 1
    assert not killed["after"]["worker"].startswith(killed["worker"] + "@")
    pool = Pool.objects.get(name="e2e-pool")
    job = Job.objects.get(pk=pool.job_id)
    assert pool.status == ArtifactStatus.READY
    assert pool.num_documents == replica.num_documents  # none lost, none twice
    assert pool.shards.count() == report["service"]["shards"] >= 100
    assert not JobUnit.objects.filter(job=job).exclude(state=UnitState.SUCCEEDED).exists()
    # Every output file, byte for byte.
    cmp = report["compare"]
    assert report["identical"], cmp
    assert cmp["files"] == 4 * pool.shards.count() + 4  # shard files, manifest x3, documents
    assert not cmp["differ"] and not cmp["only_service"] and not cmp["only_one_process"]

    # The comparison sees a single flipped byte.
    other = tmp_path / "flipped"
    shutil.copytree(tmp_path / "one-process", other)
    victim = sorted((other / "shards").rglob("*.bin"))[7]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 1
    victim.write_bytes(bytes(data))
    flipped = e2e.compare(Path(pool.path), other)
    assert flipped["differ"] == [str(victim.relative_to(other))] and not flipped["identical"]

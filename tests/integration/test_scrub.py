"""Corruption is noticed, not laundered: a flipped byte in a pool shard or in a tokenized
shard, on a catalog built by real Celery workers (Redis, Postgres). The workers' sweepers
start scrub jobs on their own (SHARDYARD_SCRUB_INTERVAL=1 here), the scrub marks the
corrupt artifact and everything built from it on every page, the stages that read the bad
bytes fail naming the file and byte range, and once the byte is restored the marks go and
the copy is byte-identical to a clean one."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardcore.manifest import read_manifest
from shardcore.materialize import materialize
from tests.integration.test_jobs_workers import catalog_env, stdlib_docs, wait_job, write_jsonl
from tests.support.services import wait_for
from webapp.catalog.errors import CatalogError
from webapp.catalog.models import ArtifactStatus, Corruption, Export
from webapp.catalog.services.exports import mixture_version_materialize
from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
from webapp.catalog.services.pools import pool_build
from webapp.catalog.services.runs import run_register
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import Job, JobState
from webapp.jobs.services import job_retry

pytestmark = pytest.mark.services
__all__ = ["catalog_env"]

SEQ = 128


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _catalog(catalog_env: Path, celery_workers):
    """A tokenized source, a pool, a mixture version and a run, built by a worker."""
    write_jsonl(catalog_env / "prose" / "a.jsonl", stdlib_docs(30))
    source = source_register(name="prose", uri=str(catalog_env / "prose"))
    builder = celery_workers("builder")
    ts = tokenized_source_build(source_id=source.pk, shard_size=64 << 10)
    assert wait_job(ts.job_id).state == JobState.SUCCEEDED
    pool = pool_build(
        name="p-prose", tokenized_ids=[ts.pk], seq_len=SEQ, memory=1 << 20, shard_size=32 << 10
    )
    assert wait_job(pool.job_id).state == JobState.SUCCEEDED
    version = mixture_version_create(
        mixture_id=mixture_get_or_create(name="blend").pk,
        components=[{"pool": pool.pk, "weight": 1.0}],
        token_budget=60_000,
        seed=1,
    )
    assert wait_job(version.job_id).state == JobState.SUCCEEDED
    version.refresh_from_db()
    run = run_register(name="run-1", mixture_version_id=version.pk)
    builder.stop()
    ts.refresh_from_db()
    pool.refresh_from_db()
    return ts, pool, version, run


# Workers started with these sweep every second and scrub when the last scrub is more than
# a second old.
SCRUBBING = (
    ("SHARDYARD_SCRUB_INTERVAL", "1"),
    ("SHARDYARD_SWEEP_INTERVAL", "1"),
    ("SHARDYARD_UNIT_HEARTBEAT", "1"),
    ("SHARDYARD_UNIT_LEASE", "10"),
)


@pytest.fixture
def scrubbing(monkeypatch):
    for name, value in SCRUBBING:
        monkeypatch.setenv(name, value)


def _page(client, django_user_model, url: str) -> str:
    if not client.session.get("_auth_user_id"):
        client.force_login(django_user_model.objects.create_user("auditor", password="x-1234567"))
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def test_it_scrubs_on_schedule_marks_a_corrupt_pool_and_what_was_built_from_it(
    postgres, redis_url, celery_workers, catalog_env, tmp_path, client, django_user_model,
    monkeypatch,
):  # fmt: skip
    ts, pool, version, run = _catalog(catalog_env, celery_workers)
    clean = tmp_path / "clean-copy"
    materialize(version.path, str(clean))  # the clean bytes, before anything goes wrong
    victim = Path(pool.path) / read_manifest(pool.path)["shards"][0]["prefix"]
    victim = victim.with_suffix(".bin")
    _flip(victim, 1000)

    # Before any scrub: a materialization reads the bad block and fails naming the file
    # and byte range; no copy is recorded.
    reader = celery_workers("reader")
    job = wait_job(mixture_version_materialize(version_id=version.pk).pk)
    assert job.state == JobState.FAILED, job.log_tail + reader.log()
    assert f"{victim}: checksum mismatch in bytes [0, " in job.error, job.error
    assert not Export.objects.filter(version=version, status=ArtifactStatus.READY).exists()
    reader.stop()

    for name, value in SCRUBBING:
        monkeypatch.setenv(name, value)
    worker = celery_workers("scrubber")  # nobody starts a scrub: its sweeper does
    found = wait_for(
        lambda: Corruption.objects.filter(pool=pool, cause=None).first(),
        timeout=180,
        what="the scheduled scrub to find the flipped byte",
    )
    rel = victim.relative_to(pool.path).as_posix()
    assert found.problem.startswith(f"{rel} at byte 0: checksum mismatch in bytes [0, ")
    assert Job.objects.get(pk=found.job_id).kind == "scrub"
    # Everything built from the pool is marked, like a flag's taint; the source is not.
    derived = wait_for(
        lambda: list(Corruption.objects.filter(cause=found).order_by("id")),
        timeout=60,
        what="the marks downstream",
    )
    assert {(c.mixture_version_id, c.run_id) for c in derived} == {
        (version.pk, None),
        (None, run.pk),
    }
    assert all("built from pool p-prose (train), which is corrupt" in c.problem for c in derived)
    assert not Corruption.objects.filter(tokenized_source=ts).exists()
    for url in ("/", f"/pools/{pool.pk}/", f"/runs/{run.pk}/", "/jobs/", "/sources/"):
        page = _page(client, django_user_model, url)
        assert 'id="corruption"' in page and "pool p-prose (train)" in page, url
        assert f"run {run.name}" in page and rel in page, url
    # Nothing new is built on marked data.
    with pytest.raises(CatalogError, match=r"blend v1 is marked corrupt \(built from pool p-prose"):
        mixture_version_materialize(version_id=version.pk)
    with pytest.raises(CatalogError, match="is marked corrupt"):
        mixture_version_create(
            mixture_id=version.mixture_id,
            components=[{"pool": pool.pk, "weight": 1.0}],
            token_budget=50_000,
        )

    # Restored from a copy: the next scrub clears the marks; the failed materialization,
    # retried, makes a copy byte-identical to a clean one.
    _flip(victim, 1000)
    wait_for(lambda: not Corruption.objects.exists(), timeout=180, what="the marks to clear")
    assert 'id="corruption"' not in _page(client, django_user_model, f"/pools/{pool.pk}/")
    job_retry(job_id=job.pk)
    job = wait_job(job.pk)
    assert job.state == JobState.SUCCEEDED, job.log_tail + worker.log()
    copy = Export.objects.get(version=version, format=Export.Format.MATERIALIZED)
    assert copy.status == ArtifactStatus.READY
    for shard in sorted((clean / "shards").iterdir()):
        assert (Path(copy.path) / "shards" / shard.name).read_bytes() == shard.read_bytes()


def test_it_fails_a_pool_build_on_a_corrupt_tokenized_shard_and_marks_older_pools(
    postgres, redis_url, celery_workers, catalog_env, scrubbing
):
    ts, pool, version, run = _catalog(catalog_env, celery_workers)
    victim = Path(ts.path) / f"{read_manifest(ts.path)['shards'][0]['prefix']}.bin"
    _flip(victim, 4321)

    worker = celery_workers("w1")
    again = pool_build(
        name="p-again", tokenized_ids=[ts.pk], seq_len=SEQ, memory=1 << 20, shard_size=32 << 10
    )
    job = wait_job(again.job_id)
    assert job.state == JobState.FAILED, job.log_tail + worker.log()
    assert f"{victim}: checksum mismatch in bytes [" in job.error
    again.refresh_from_db()
    assert again.status == ArtifactStatus.FAILED

    found = wait_for(
        lambda: Corruption.objects.filter(tokenized_source=ts, cause=None).first(),
        timeout=180,
        what="the scheduled scrub",
    )
    assert "checksum mismatch" in found.problem
    marked = wait_for(
        lambda: set(
            Corruption.objects.filter(cause=found).values_list("pool_id", "mixture_version_id")
        ),
        timeout=60,
        what="the marks downstream",
    )
    assert (pool.pk, None) in marked and (None, version.pk) in marked


def test_it_scrubs_on_demand_from_the_command_line_and_finds_a_clean_catalog_clean(
    postgres, redis_url, celery_workers, catalog_env, celery_queue
):
    from tests.support.services import manage

    ts, pool, version, run = _catalog(catalog_env, celery_workers)
    done = manage("catalog", "scrub", SHARDYARD_QUEUE=celery_queue)
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.split("job ")[1].split()[0])
    worker = celery_workers("w1")
    job = wait_job(job_id)

    assert job.state == JobState.SUCCEEDED, job.log_tail + worker.log()
    results = read_manifest(job.output_dir)["results"]
    assert sorted(r["key"] for r in results) == sorted(
        [f"tokenized:{ts.pk}", f"pool:{pool.pk}", f"version:{version.pk}"]
    )
    assert all(r["ok"] and r["bytes"] > 0 for r in results)
    assert job.bytes == sum(r["bytes"] for r in results)
    assert not Corruption.objects.exists()

"""An annotation job on real ``celery worker`` subprocesses heals itself: a worker SIGKILLed
while it annotates a shard loses its claim, the surviving worker's sweeper queues the unit
again, and the annotation ends with the bytes of a clean one-process build, every document
annotated once."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardcore.annotate.artifact import annotate
from tests.integration.test_jobs_heal import fast_leases
from tests.integration.test_jobs_workers import (
    catalog_env,
    kill_mid_unit,
    stdlib_docs,
    wait_job,
    write_jsonl,
)
from webapp.catalog.models import Annotation, ArtifactStatus, TokenizedSource
from webapp.catalog.services.annotations import annotation_build
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import JobState, JobUnit, UnitState

pytestmark = pytest.mark.services
__all__ = ["catalog_env", "fast_leases"]


def _parquet_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((directory / "shards").glob("*.parquet"))}


def test_a_worker_killed_mid_annotation_heals_to_the_same_bytes(
    postgres, redis_url, celery_workers, catalog_env, fast_leases, tmp_path
):
    write_jsonl(catalog_env / "mods" / "a.jsonl", stdlib_docs(120))
    source = source_register(name="mods", uri=str(catalog_env / "mods"))
    builder = celery_workers("builder")
    ts = tokenized_source_build(source_id=source.pk, shard_size=256 << 10)
    assert wait_job(ts.job_id).state == JobState.SUCCEEDED, builder.log()
    builder.kill()
    ts = TokenizedSource.objects.get(pk=ts.pk)
    assert ts.status == ArtifactStatus.READY and ts.shards.count() >= 4

    ann = annotation_build(tokenized_id=ts.pk, annotator="quality")
    stuck = kill_mid_unit(celery_workers, ann.job_id)  # its messages wait: no worker runs
    attempts, doomed = stuck.attempts, stuck.worker
    rescuer = celery_workers("rescuer")
    job = wait_job(ann.job_id)

    assert job.state == JobState.SUCCEEDED, job.log_tail + rescuer.log()
    stuck.refresh_from_db()
    assert stuck.state == UnitState.SUCCEEDED and stuck.attempts == attempts + 1
    assert stuck.last_event.startswith(f"requeued after worker lost ({doomed}")
    assert job.units_total == ts.shards.count()
    assert job.documents == ts.num_documents == 120  # every document once
    assert set(JobUnit.objects.filter(job=job).values_list("state", flat=True)) == {
        UnitState.SUCCEEDED
    }
    ann = Annotation.objects.get(pk=ann.pk)
    assert ann.status == ArtifactStatus.READY and ann.summary["documents"] == 120
    clean = tmp_path / "clean"
    m = annotate(ts.path, clean, "quality")
    assert m["fingerprint"] == ann.fingerprint
    healed = _parquet_bytes(Path(ann.path))
    assert len(healed) == ts.shards.count() and healed == _parquet_bytes(clean)
    # No temporary left by the killed writer.
    assert not list((Path(ann.path) / "shards").glob(".*"))

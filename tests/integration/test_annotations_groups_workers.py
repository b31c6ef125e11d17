"""Near-duplicates across two tokenized sources on real ``celery worker`` subprocesses: the
group job (stage annotate.neardup) signs, buckets, clusters and writes with a worker
SIGKILLed while it runs a unit; the surviving worker heals it to the bytes of a clean
one-process run; one ``minhash`` annotation per source records the planted copies; a pool
joining both annotations filtered to ``minhash.dup_rank = 0`` holds each text once."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardcore import props
from shardcore.annotate import create
from shardcore.annotate.artifact import read_annotation
from shardcore.annotate.neardup import annotation_paths, dedup_group
from shardcore.pool import SOURCE_FP_COL, PoolReader
from tests.integration.annotation_group_fixtures import planted_sources
from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from tests.integration.test_jobs_heal import fast_leases
from tests.integration.test_jobs_workers import catalog_env, kill_mid_unit, wait_job
from webapp.catalog.models import Annotation, ArtifactStatus, Pool, TokenizedSource
from webapp.catalog.services.annotation_groups import annotation_group_build
from webapp.catalog.services.pools import pool_build
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import JobState, JobUnit, UnitState

pytestmark = pytest.mark.services
__all__ = ["catalog_env", "fast_leases"]


def _parquet_bytes(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.glob("sources/*/shards/*.parquet"))
    }


def test_a_group_across_two_sources_heals_and_a_pool_keeps_each_text_once(
    postgres,
    redis_url,
    celery_workers,
    catalog_env,
    fast_leases,
    tmp_path,
    login,  # noqa: F811
):
    planted = planted_sources(catalog_env)
    builder = celery_workers("builder")
    tokenized = []
    for name in ("a", "b"):
        source = source_register(name=name, uri=str(catalog_env / name))
        ts = tokenized_source_build(source_id=source.pk, shard_size=128 << 10)
        assert wait_job(ts.job_id).state == JobState.SUCCEEDED, builder.log()
        tokenized.append(TokenizedSource.objects.get(pk=ts.pk))
    builder.kill()
    a, b = tokenized
    assert a.num_documents == len(planted.a) and b.num_documents == len(planted.b)
    assert a.shards.count() >= 3 and b.shards.count() >= 2

    rows = annotation_group_build(tokenized_ids=[a.pk, b.pk])
    assert [r.tokenized_source_id for r in rows] == [a.pk, b.pk]
    assert len({r.job_id for r in rows}) == 1 and rows[0].status == ArtifactStatus.BUILDING
    job_id = rows[0].job_id
    stuck = kill_mid_unit(celery_workers, job_id)  # its messages wait: no worker runs
    attempts, doomed = stuck.attempts, stuck.worker
    rescuer = celery_workers("rescuer")
    job = wait_job(job_id, timeout=300)

    assert job.state == JobState.SUCCEEDED, job.log_tail + rescuer.log()
    stuck.refresh_from_db()
    assert stuck.state == UnitState.SUCCEEDED and stuck.attempts == attempts + 1
    assert stuck.last_event.startswith(f"requeued after worker lost ({doomed}")
    shards = a.shards.count() + b.shards.count()
    # a signature and a write unit per shard; per partition a bucket, a unit per round
    # of the clusters, a count and a tally; the resolve unit
    parts, rounds = job.plan["meta"]["partitions"], job.plan["meta"]["rounds"]
    assert job.units_total == 2 * shards + parts * (rounds + 3) + 1
    assert job.documents == len(planted.a) + len(planted.b)  # every document once
    assert set(JobUnit.objects.filter(job=job).values_list("state", flat=True)) == {
        UnitState.SUCCEEDED
    }

    # Healed: the bytes of the group run in one process, nothing killed.
    out = Path(job.output_dir)
    clean = tmp_path / "clean"
    dedup_group([a.path, b.path], str(clean))
    healed = _parquet_bytes(out)
    assert len(healed) == shards and healed == _parquet_bytes(clean)
    assert not (out / "_work").exists()

    # One annotation per source, with the planted copies.
    ann_a, ann_b = (Annotation.objects.get(pk=r.pk) for r in rows)
    assert ann_a.status == ann_b.status == ArtifactStatus.READY
    assert [ann_a.path, ann_b.path] == annotation_paths(out)
    threshold = create("minhash").params["threshold"]
    dups = planted.duplicates(threshold)  # exact copies and the near-copies above it
    far = [
        j for (_, j, _), s in zip(planted.near, planted.similarity, strict=True) if s < threshold
    ]
    assert len(dups) == 14 and len(far) == 3  # none of them near the threshold:
    assert all(abs(s - threshold) > 0.1 for s in planted.similarity)
    planted_copies = len(dups)
    assert ann_a.summary["duplicates"]["duplicate_documents"] == 0  # the priority source
    cols = read_annotation(ann_b.path)
    cluster, rank, size = (
        cols.column(c).to_pylist() for c in ("dup_cluster", "dup_rank", "dup_size")
    )
    for i, j in dups:  # in its original's cluster (numbered by it: a comes first), after it
        assert (cluster[j], rank[j], size[j]) == (i, 1, 2)
    for j in [*range(planted.own), *far]:  # texts of their own
        assert (rank[j], size[j]) == (0, 1)
    dup_b = ann_b.summary["duplicates"]
    assert dup_b["duplicate_documents"] == dup_b["clusters_with_copies"] == planted_copies
    assert [c["cluster"] for c in dup_b["largest"]] == sorted(i for i, _ in dups)[:10]
    assert ann_b.summary["group"]["sources"] == 2
    assert ann_a.num_documents == len(planted.a) and ann_b.num_documents == len(planted.b)

    # The same group again: the same rows.
    again = annotation_group_build(tokenized_ids=[a.pk, b.pk])
    assert [r.pk for r in again] == [ann_a.pk, ann_b.pk]

    # A pool joining both, filtered to dup_rank = 0: every text once.
    pool = pool_build(
        name="once", tokenized_ids=[a.pk, b.pk], seq_len=128,
        filter="minhash.dup_rank = 0", annotation_ids=[ann_a.pk, ann_b.pk],
    )  # fmt: skip
    assert wait_job(pool.job_id, timeout=300).state == JobState.SUCCEEDED, rescuer.log()
    pool = Pool.objects.get(pk=pool.pk)
    docs = PoolReader(pool.path).documents
    texts_of = {a.fingerprint: planted.a, b.fingerprint: planted.b}
    kept = [
        texts_of[fp][d]
        for fp, d in zip(
            docs.column(SOURCE_FP_COL).to_pylist(), docs.column("doc_id").to_pylist(), strict=True
        )
    ]
    own = [*planted.b[: planted.own], *(planted.b[j] for j in far)]
    assert len(kept) == len(planted.a) + len(own) == len(planted.a) + len(planted.b) - len(dups)
    assert len(set(kept)) == len(kept) and set(kept) == set(planted.a) | set(own)
    assert set(props.column(docs, "minhash.dup_rank").to_pylist()) == {0}
    assert sorted(pool.params["annotations"]) == sorted([ann_a.fingerprint, ann_b.fingerprint])

    # The pages: the job links both annotations; b's shows the copies and its group.
    client = login("viewer")
    page = client.get(f"/jobs/{job_id}/").content.decode()
    for ann in (ann_a, ann_b):
        assert f'href="/annotations/{ann.pk}/">annotation {ann.pk}</a>' in page
    page = client.get(f"/annotations/{ann_b.pk}/").content.decode()
    assert (
        f"{planted_copies} of {len(planted.b)} documents are copies "
        f"({100 * planted_copies / len(planted.b):.0f}%), in {planted_copies} clusters."
    ) in page
    assert f"a #{a.pk} (annotation {ann_a.pk})</a>: near-duplicates across 2 sources" in page

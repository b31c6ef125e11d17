"""Selectors the pages use run in a bounded number of queries with thousands of shards
and runs."""

from __future__ import annotations

import pytest

from webapp.catalog import selectors
from webapp.catalog.models import (
    Annotation,
    ArtifactStatus,
    Flag,
    Mixture,
    MixtureComponent,
    MixtureVersion,
    Pool,
    Shard,
    Source,
    SourceFile,
    Taint,
    TokenizedSource,
    Tokenizer,
    TrainingRun,
)
from webapp.jobs import selectors as job_selectors
from webapp.jobs.models import Job, JobUnit


@pytest.fixture
def big(db):
    tok = Tokenizer.objects.create(spec="tiktoken:test")
    sources = Source.objects.bulk_create(
        [Source(name=f"s{i}", uri=f"/data/s{i}", num_files=3000 * (i == 0)) for i in range(20)]
    )
    SourceFile.objects.bulk_create(
        [SourceFile(source=sources[0], path=f"f{i:05d}.jsonl", size=i) for i in range(3000)]
    )
    tokenized = TokenizedSource.objects.bulk_create(
        [TokenizedSource(source=s, tokenizer=tok, path=f"/t/{s.name}", num_shards=5000 * (i == 0),
                         status=ArtifactStatus.READY) for i, s in enumerate(sources)]
    )  # fmt: skip
    Shard.objects.bulk_create(
        [Shard(tokenized_source=tokenized[0], index=i, prefix=f"s{i}", num_tokens=10)
         for i in range(5000)]
    )  # fmt: skip
    pool = Pool.objects.create(name="p", path="/p", status=ArtifactStatus.READY)
    pool.parents.set(tokenized)
    Shard.objects.bulk_create([Shard(pool=pool, index=i, prefix=f"p{i}") for i in range(5000)])
    mixture = Mixture.objects.create(name="m")
    version = MixtureVersion.objects.create(mixture=mixture, number=1, token_budget=1, path="/m")
    MixtureComponent.objects.create(version=version, pool=pool, weight=1.0)
    runs = TrainingRun.objects.bulk_create(
        [TrainingRun(name=f"r{i}", mixture_version=version) for i in range(3000)]
    )
    # What it taints is counted on its row when its taint is computed (flag_propagate).
    flag = Flag.objects.create(
        target="source", source=sources[0], reason="x", counts={"runs": 1000, "documents": 7}
    )
    Taint.objects.bulk_create([Taint(flag=flag, run=r) for r in runs[:1000]])
    job = Job.objects.create(kind="tokenize", plan={}, output_dir="/o", units_total=4000)
    JobUnit.objects.bulk_create(
        [
            JobUnit(job=job, unit_id=f"u{i}", index=i, phase=0, state="succeeded")
            for i in range(4000)
        ]
    )
    return {"source": sources[0], "tokenized": tokenized[0], "pool": pool, "run": runs[0],
            "flag": flag, "job": job}  # fmt: skip


def test_it_builds_the_overview_in_one_query_per_count(big, django_assert_max_num_queries):
    with django_assert_max_num_queries(9):
        counts = selectors.overview_counts()
    assert counts["runs"] == 3000 and counts["sources"] == 20


def test_it_shows_a_source_in_bounded_queries(big, django_assert_max_num_queries):
    # The first view asks for its statistics (a row, then a task); the next reads the row.
    with django_assert_max_num_queries(10):
        detail = selectors.source_detail(source_id=big["source"].pk)
    assert detail["stats"]["computing"]["state"] == "queued"
    with django_assert_max_num_queries(6):
        detail = selectors.source_detail(source_id=big["source"].pk)
    assert detail["files_truncated"] and len(detail["files"]) == 200
    assert detail["tokenized"][0].num_shards == 5000  # kept on the row: no shard is counted


def test_it_pages_shards_and_sums_them_in_bounded_queries(big, django_assert_max_num_queries):
    with django_assert_max_num_queries(2):
        page = list(selectors.artifact_shards(pool_id=big["pool"].pk, offset=4900, limit=100))
        totals = selectors.shard_totals(tokenized_id=big["tokenized"].pk)
    assert page[0].index == 4900 and totals == {"shards": 5000, "records": 0,
                                                 "tokens": 50000, "bytes": 0}  # fmt: skip


def test_it_lists_runs_and_their_lineage_in_bounded_queries(big, django_assert_max_num_queries):
    with django_assert_max_num_queries(2):  # the page, then its runs' taints
        runs = selectors.run_list(limit=50)
        assert all(r.mixture_version.mixture.name == "m" for r in runs)
    assert [r.num_taints for r in runs] == [Taint.objects.filter(run=r).count() for r in runs]
    assert sum(r.num_taints for r in selectors.run_list(offset=1990, limit=20)) == 10
    with django_assert_max_num_queries(6):
        lineage = selectors.run_lineage(run_id=big["run"].pk)
        assert len(lineage["sources"]) == 20
    with django_assert_max_num_queries(8):
        audit = selectors.audit_search(source=str(big["source"].pk))
        assert len(audit["runs"]) == 100 and audit["num_runs"] == 3000
    with django_assert_max_num_queries(1):
        assert len(list(selectors.tainted_runs()[:100])) == 100


def test_it_shows_a_flag_and_a_job_in_bounded_queries(big, django_assert_max_num_queries):
    # A page of 50 taints, at the start or deep in, in the same few queries; the totals
    # come from the flag's row.
    with django_assert_max_num_queries(2):
        detail = selectors.flag_detail(flag_id=big["flag"].pk, reads=False)
    assert len(detail["runs"]) == 50 and detail["has_next"] and not detail["has_prev"]
    assert detail["counts"]["runs"] == 1000 and detail["documents"] == 7
    with django_assert_max_num_queries(2):
        last = selectors.flag_detail(flag_id=big["flag"].pk, reads=False, page=20)
    assert len(last["taints"]) == 50 and not last["has_next"] and last["has_prev"]
    first_ids = {t.pk for t in detail["runs"]}
    assert not first_ids & {t.pk for t in last["runs"]}
    with django_assert_max_num_queries(4):
        detail = job_selectors.job_detail(job_id=big["job"].pk)
        assert detail.unit_states == {"succeeded": 4000} and len(detail.units) == 200


def test_it_pages_a_jobs_units_from_any_position(big, client, django_user_model):
    job = big["job"]
    with_bad = JobUnit.objects.filter(job=job, index__in=[3, 3990])
    with_bad.update(bad_lines=1, stats={"bad_input": {"f": {"empty": {"count": 1}}}})
    Job.objects.filter(pk=job.pk).update(state="running", bad_lines=2)

    detail = job_selectors.job_detail(job_id=job.pk, units_limit=50, units_offset=3950)
    assert [u.index for u in detail.units] == list(range(3950, 4000))
    # While the job runs, its bad input is summed from its units that refused some.
    assert detail.job.bad_input == {"f": {"empty": {"count": 2, "samples": []}}}

    client.force_login(django_user_model.objects.create_user("viewer", password="x"))
    page = client.get(f"/jobs/{job.pk}/?units_from=3900").content.decode()
    assert "Units 3,901 to 4,000 of 4,000" in page and "?units_from=3700" in page
    assert "u3900" in page and "u3899" not in page
    polled = client.get(f"/jobs/{job.pk}/progress.json?units_from=3999").json()
    assert [u["unit_id"] for u in polled["units"]] == ["u3999"]
    assert client.get(f"/jobs/{job.pk}/?units_from=nope").status_code == 200


def test_the_step_of_a_sample_from_two_reports_is_the_scan_of_all_reports(db):
    """``steps_of_samples_at`` (one query for a page of runs, two reports each) answers
    what ``step_of_sample`` over every report answers: before the first report, between
    two (exact or not), at a report, past the last, and for a run without reports."""
    from shardcore.flagged_reads import step_of_sample
    from webapp.catalog.models import RunProgress

    version = MixtureVersion.objects.create(
        mixture=Mixture.objects.create(name="m"), number=1, token_budget=1, path="/m"
    )
    # Steps 10, 20, ... consuming 8 a step, then a stretch of 13 a step (not exact).
    points = [(s, 8 * s) for s in range(10, 110, 10)] + [(120, 800 + 13 * 20), (125, 1100)]
    run = TrainingRun.objects.create(name="r", mixture_version=version)
    RunProgress.objects.bulk_create(
        [RunProgress(run=run, step=s, consumed_samples=c, consumed_tokens=c) for s, c in points]
    )
    pruned = TrainingRun.objects.create(
        name="p", mixture_version=version, last_step=40, consumed_samples=320
    )
    for sample in (0, 5, 79, 80, 81, 399, 795, 800, 1000, 1099, 1100, 5000):
        got = selectors.steps_of_samples_at([(run, sample), (pruned, sample)])
        assert got[run.pk] == step_of_sample(sample, points), sample
        assert got[pruned.pk] == step_of_sample(sample, [(40, 320)]), sample
        assert selectors.step_of_sample_at(run, sample) == got[run.pk]


def test_it_shows_annotations_in_bounded_queries(big, django_assert_max_num_queries):
    # A near-duplicate group's annotations (one per source), and 300 more of the first.
    job = Job.objects.create(kind="annotate.neardup", plan={}, output_dir="/a")
    pii = Job.objects.create(kind="annotation", plan={}, output_dir="/a")
    tokenized = list(TokenizedSource.objects.select_related("source").order_by("pk"))
    group = Annotation.objects.bulk_create(
        [
            Annotation(tokenized_source=t, annotator="minhash", path="/a", job=job)
            for t in tokenized[:5]
        ]
    )
    Annotation.objects.bulk_create(
        [
            Annotation(tokenized_source=tokenized[0], annotator="pii", path="/a", job=pii)
            for _ in range(300)
        ]
    )
    with django_assert_max_num_queries(3):
        detail = selectors.annotation_detail(annotation_id=group[0].pk)
        assert [a.tokenized_source.source.name for a in detail["group"]] == ["s1", "s2", "s3", "s4"]
        assert detail["annotation"].tokenized_source.tokenizer.spec == "tiktoken:test"
    assert len(detail["others"]) == 50
    with django_assert_max_num_queries(2):
        page = selectors.source_annotations(tokenized=tokenized[:1])
        assert {a.job.kind for a in page["annotations"]} == {"annotation"}
        candidates = [t.source.name for t in page["group_candidates"]]
    assert len(page["annotations"]) == 100
    assert candidates[:3] == ["s0", "s1", "s10"] and len(candidates) == 20
    with django_assert_max_num_queries(1):
        assert len(selectors.annotations_of_job(job_id=job.pk)) == 5
    with pytest.raises(selectors.NotFound, match="no annotation 0"):
        selectors.annotation_detail(annotation_id=0)

"""A flag taints exactly the tokenized sources, pools, mixture versions, materialized copies
and runs that hold the flagged documents, and nothing else. Jobs run eagerly in this process here (the
worker path is covered by test_jobs_workers and test_flow_pipeline)."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest

from tests.support.flags import taint_computed
from webapp.catalog import selectors
from webapp.catalog.models import ArtifactStatus, Export, Flag, Pool, Taint, TokenizedSource
from webapp.catalog.services.exports import mixture_version_materialize
from webapp.catalog.services.flags import flag_create
from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
from webapp.catalog.services.pools import pool_build
from webapp.catalog.services.runs import run_register
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from workers.celery import app

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _docs(offset: int, n: int) -> list[dict]:
    files = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 2000)[offset : offset + n]
    return [{"text": p.read_text(errors="replace"), "name": p.name} for p in files]


def _source(root: Path, name: str, files: dict[str, list[dict]]):
    for fname, docs in files.items():
        path = root / name / fname
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return source_register(name=name, uri=str(root / name))


def _ready(artifact):
    artifact.refresh_from_db()
    assert artifact.status == ArtifactStatus.READY, artifact.job.log_tail
    return artifact


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory):
    """Two sources, their tokenized versions, four pools, three versions, three runs."""
    from django.conf import settings

    tmp = tmp_path_factory.mktemp("flags")
    old = settings.SOURCE_ROOTS, settings.DATA_ROOT
    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp], tmp / "data"
    app.conf.task_always_eager = True
    with django_db_blocker.unblock():
        a = _source(tmp, "alpha", {"a1.jsonl": _docs(0, 6), "a2.jsonl": _docs(6, 6)})
        b = _source(tmp, "beta", {"b1.jsonl": _docs(20, 5)})
        ta = _ready(tokenized_source_build(source_id=a.pk, shard_size=16 << 10))
        tb = _ready(tokenized_source_build(source_id=b.pk, shard_size=16 << 10))
        flagged_name = _docs(0, 6)[2]["name"]  # alpha document 2, in a1.jsonl
        common = {"seq_len": 64, "memory": 1 << 20, "shard_size": 8 << 10}
        pools = {
            "pa": pool_build(name="pa", tokenized_ids=[ta.pk], **common),
            "pa_without": pool_build(
                name="pa-without", tokenized_ids=[ta.pk], filter=f"name <> '{flagged_name}'",
                **common,
            ),
            "pb": pool_build(name="pb", tokenized_ids=[tb.pk], **common),
            "pab": pool_build(name="pab", tokenized_ids=[ta.pk, tb.pk], **common),
        }  # fmt: skip
        pools = {k: _ready(p) for k, p in pools.items()}
        mix = mixture_get_or_create(name="m")

        def version(*names):
            return mixture_version_create(
                mixture_id=mix.pk,
                components=[{"pool": pools[n].pk, "weight": 1.0} for n in names],
                token_budget=50_000,
            )

        versions = {"v_a_b": version("pa", "pb"), "v_without": version("pa_without"),
                    "v_b": version("pb")}  # fmt: skip
        runs = {
            key: run_register(name=f"run-{key}", mixture_version_id=v.pk)
            for key, v in versions.items()
        }
        # v_b's materialized copy: a separate artifact holding beta's tokens.
        mixture_version_materialize(version_id=versions["v_b"].pk)
    yield {"a": a, "b": b, "ta": ta, "tb": tb, "pools": pools, "versions": versions,
           "runs": runs}  # fmt: skip
    app.conf.task_always_eager = False
    settings.SOURCE_ROOTS, settings.DATA_ROOT = old
    with django_db_blocker.unblock():
        from tests.support.services import flush_database

        flush_database()


def _tainted(flag) -> set[str]:
    names = set()
    for t in Taint.objects.filter(flag=flag).select_related(
        "tokenized_source__source", "pool", "mixture_version", "run", "export__version"
    ):
        if t.tokenized_source_id:
            names.add(f"ts:{t.tokenized_source.source.name}")
        elif t.pool_id:
            names.add(f"pool:{t.pool.name}")
        elif t.mixture_version_id:
            names.add(f"version:{t.mixture_version.number}")
        elif t.export_id:
            names.add(f"{t.export.format}:{t.export.version.number}")
        else:
            names.add(t.run.name)
    return names


def test_it_taints_exactly_what_holds_a_flagged_document(world, db):
    flag = flag_create(reason="PII", source_id=world["a"].pk, document_ids=[2])
    # Recorded at once; what it taints is computed by its task (the pools' documents
    # tables are read there, never in the request).
    assert flag.taint_state == Flag.TaintState.QUEUED and not flag.taints.exists()
    assert "computing" in selectors.flag_detail(flag_id=flag.pk)["taint"]
    taint_computed(flag.pk)
    assert selectors.flag_detail(flag_id=flag.pk)["taint"] == {}

    assert _tainted(flag) == {
        "ts:alpha", "pool:pa", "pool:pab", "version:1", "run-v_a_b",
    }  # fmt: skip


def test_it_taints_what_holds_any_document_of_a_flagged_file(world, db):
    flag = flag_create(reason="license", source_id=world["a"].pk, file_path="a2.jsonl")
    taint_computed(flag.pk)

    # a2.jsonl's documents pass the filter of pa-without, so it is tainted too.
    assert _tainted(flag) == {
        "ts:alpha", "pool:pa", "pool:pa-without", "pool:pab", "version:1", "version:2",
        "run-v_a_b", "run-v_without",
    }  # fmt: skip


def test_it_taints_everything_downstream_of_a_flagged_source(world, db):
    flag = flag_create(reason="bad crawl", source_id=world["b"].pk)
    taint_computed(flag.pk)

    assert _tainted(flag) == {
        "ts:beta", "pool:pb", "pool:pab", "version:1", "version:3", "materialized:3",
        "run-v_a_b", "run-v_b",
    }  # fmt: skip
    detail = selectors.flag_detail(flag_id=flag.pk, reads=False)
    assert {r.name for r in detail["runs"]} == {"run-v_a_b", "run-v_b"}


def test_it_taints_a_run_registered_after_the_flag(world, db):
    flag = flag_create(reason="PII", source_id=world["a"].pk, document_ids=[2])
    taint_computed(flag.pk)
    late = run_register(name="late", mixture_version_id=world["versions"]["v_a_b"].pk)
    clean = run_register(name="clean", mixture_version_id=world["versions"]["v_b"].pk)

    assert Taint.objects.filter(flag=flag, run=late).exists()
    assert not Taint.objects.filter(flag=flag, run=clean).exists()


def test_it_answers_lineage_both_ways(world, db):
    runs = world["runs"]
    lineage = selectors.run_lineage(run_id=runs["v_a_b"].pk)
    assert {s.name for s in lineage["sources"]} == {"alpha", "beta"}
    assert {r.name for r in selectors.audit_search(source=str(world["b"].pk))["runs"]} == {
        "run-v_a_b", "run-v_b",
    }  # fmt: skip
    source = str(world["a"].pk)
    assert {r.name for r in selectors.audit_search(source=source, document_id=2)["runs"]} == {
        "run-v_a_b"
    }
    assert {
        r.name for r in selectors.audit_search(source=source, file_path="a2.jsonl")["runs"]
    } == {
        "run-v_a_b",
        "run-v_without",
    }


def test_it_refuses_to_edit_a_built_artifact(world, db):
    ts = TokenizedSource.objects.get(pk=world["ta"].pk)
    ts.num_tokens = 1
    with pytest.raises(Exception, match="immutable"):
        ts.save()
    assert Pool.objects.filter(split="train").count() == 4


def test_it_taints_a_materialized_copy_built_after_the_flag(
    world, db, django_capture_on_commit_callbacks
):
    flag = flag_create(reason="PII", source_id=world["a"].pk, document_ids=[2])
    taint_computed(flag.pk)
    with django_capture_on_commit_callbacks(execute=True):
        job = mixture_version_materialize(version_id=world["versions"]["v_a_b"].pk)
    copy = Export.objects.get(job=job)

    assert copy.status == ArtifactStatus.READY, job.log_tail
    assert "materialized:1" in _tainted(flag)
    assert Taint.objects.get(flag=flag, export=copy).documents == 1


def test_a_flag_whose_task_was_lost_is_asked_again_and_a_failure_is_said(
    world, db, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from webapp.catalog.selectors.facts import STALE
    from webapp.catalog.services.facts import fact_requests

    flag = flag_create(reason="PII", source_id=world["a"].pk, document_ids=[2])
    # Its worker was killed while computing: running for longer than STALE.
    Flag.objects.filter(pk=flag.pk).update(
        taint_state=Flag.TaintState.RUNNING,
        taint_requested_at=timezone.now() - STALE - timedelta(minutes=1),
    )
    # The read alone writes nothing: it notes the taint as asked for.
    with django_capture_on_commit_callbacks() as sent:
        taint = selectors.flag_detail(flag_id=flag.pk)["taint"]
    assert taint["computing"]["state"] == Flag.TaintState.QUEUED and sent == []
    assert Flag.objects.get(pk=flag.pk).taint_state == Flag.TaintState.RUNNING
    # Read inside a request (the middleware's scope), it is asked for once the view answered.
    with django_capture_on_commit_callbacks() as sent, fact_requests():
        taint = selectors.flag_detail(flag_id=flag.pk)["taint"]
    assert taint["computing"]["state"] == Flag.TaintState.QUEUED and len(sent) == 1
    flag.refresh_from_db()
    assert flag.taint_state == Flag.TaintState.QUEUED
    assert flag.taint_requested_at > timezone.now() - STALE
    taint_computed(flag.pk)
    taint_computed(flag.pk)  # a redelivered message stores the same rows
    assert _tainted(flag) == {
        "ts:alpha", "pool:pa", "pool:pab", "version:1", "run-v_a_b",
    }  # fmt: skip

    # A pool whose files are gone: the task stores the error, the page says it.
    gone = world["pools"]["pa"]
    Pool.objects.filter(pk=gone.pk).update(path=str(Path(gone.path).parent / "gone"))
    from workers.tasks import flag_taint

    assert flag_taint.apply(kwargs={"flag_id": flag.pk}).get() == Flag.TaintState.FAILED
    taint = selectors.flag_detail(flag_id=flag.pk)["taint"]
    assert "gone" in taint["error"]

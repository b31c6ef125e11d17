# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""The contamination audit on Postgres, through HTTP and the command line: a decon
annotation of documents with planted benchmark items (``tests.support.decon_plants``),
a pool filtered on ``decon.items = 0`` that says what it removed, and for the benchmark
the overlapping documents, the pools, version and run holding them with the run's first
step reading one (computed the slow way here, sample by sample), the items the run could
have seen, and its evaluation results marked "possibly contaminated". Jobs and tasks run
in this process through the real engine (Celery's eager mode)."""

from __future__ import annotations

import json

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from shardcore.cli import main
from shardcore.pool import PoolReader
from tests.integration.dashboard_fixtures import first_sample_by_doc, login, users  # noqa: F401
from tests.support import decon_plants
from tests.support.flags import taint_computed
from webapp.catalog import flag_documents
from webapp.catalog.models import Annotation, ArtifactStatus, Flag, Pool
from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build

pytestmark = pytest.mark.services
GBS = 4  # samples per step the test trainer reports with


@pytest.fixture
def eager_jobs():
    from workers.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def _api(user) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return c


def _write_benchmark(root, items) -> str:
    (root / "bench").mkdir()
    (root / "bench" / "qa.jsonl").write_text(
        "".join(json.dumps({"qid": it["id"], "question": it["text"]}) + "\n" for it in items)
    )
    spec = root / "bench" / "spec.json"
    spec.write_text(json.dumps({"benchmarks": [
        {"name": "stdlib_qa", "files": ["qa.jsonl"], "fields": ["question"], "id": "qid"}
    ]}))  # fmt: skip
    return str(spec)


@pytest.fixture
def world(transactional_db, tmp_path, settings, eager_jobs):
    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp_path], tmp_path / "data"
    plants = decon_plants.make(60, 120, seed=5)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "docs.jsonl").write_text(
        "".join(json.dumps({"text": d}) + "\n" for d in plants.docs)
    )
    source = source_register(name="corpus", uri=str(tmp_path / "corpus"))
    ts = tokenized_source_build(source_id=source.pk, shard_size=64 << 10)
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY and ts.shards.count() > 1
    want, _ = decon_plants.reference(plants.docs, plants.items)
    return {"tmp": tmp_path, "plants": plants, "source": source, "ts": ts, "want": want,
            "spec": _write_benchmark(tmp_path, plants.items)}  # fmt: skip


def test_the_audit_finds_documents_pools_versions_runs_and_first_steps(
    world, users, login, live_server, capsys
):
    editor, ts, want = _api(users["editor"]), world["ts"], world["want"]
    overlapping = [i for i, w in enumerate(want) if w]
    assert len(overlapping) >= 40

    # A spec outside the source roots is refused; the spec under them is annotated.
    bad = editor.post(
        "/api/annotations/",
        {"tokenized_source": ts.pk, "annotator": "decon", "params": {"benchmarks": "/etc/hosts"}},
        "json",
    )
    assert bad.status_code == 400 and "outside the source roots" in bad.json()["detail"]
    resp = editor.post(
        "/api/annotations/",
        {"tokenized_source": ts.pk, "annotator": "decon", "params": {"benchmarks": world["spec"]}},
        "json",
    )
    assert resp.status_code == 202, resp.content
    ann = Annotation.objects.get(pk=resp.json()["id"])
    assert ann.status == ArtifactStatus.READY, ann.job.log_tail
    bench = ann.summary["decon"]["benchmarks"][0]
    assert bench["documents"] == len(overlapping) and bench["name"] == "stdlib_qa"

    # Two pools: everything, and the decontaminated one.
    everything = Pool.objects.get(pk=editor.post(
        "/api/pools/", {"name": "all", "tokenized_ids": [ts.pk], "seq_len": 64}, "json"
    ).json()["id"])  # fmt: skip
    resp = editor.post(
        "/api/pools/",
        {"name": "clean", "tokenized_ids": [ts.pk], "seq_len": 64, "filter": "decon.items = 0",
         "annotation_ids": [ann.pk]}, "json",
    )  # fmt: skip
    assert resp.status_code == 201, resp.content
    clean = Pool.objects.get(pk=resp.json()["id"])
    assert clean.status == ArtifactStatus.READY, clean.job.log_tail
    kept = set(PoolReader(clean.path).documents.column("doc_id").to_pylist())
    assert not kept & set(overlapping)
    held = set(PoolReader(everything.path).documents.column("doc_id").to_pylist())
    held_overlapping = sorted(held & set(overlapping))

    # A version over everything and a run that trained on it, reporting its progress.
    version = mixture_version_create(
        mixture_id=mixture_get_or_create(name="m").pk,
        components=[{"pool": everything.pk, "weight": 1.0}],
        token_budget=64 * everything.num_records,
    )
    version.refresh_from_db()
    trainer = editor  # an editor may do what a trainer does: register, report
    run_id = trainer.post("/api/runs/", {"name": "r1", "mixture_version": version.pk}, "json")
    run_id = run_id.json()["id"]
    for step in range(1, everything.num_records // GBS + 1):
        r = trainer.post(
            f"/api/runs/{run_id}/progress/", {"step": step, "consumed_samples": step * GBS}, "json"
        )
        assert r.status_code == 201, r.content

    # Before a flag: the documents per source, no lineage yet.
    listed = editor.get("/api/decon/benchmarks/").json()
    assert [b["name"] for b in listed] == ["stdlib_qa"] and listed[0]["flags"] == []
    audit = editor.get("/api/decon/benchmarks/stdlib_qa/").json()
    assert audit["documents"] == len(overlapping) and not audit["flagged"]
    assert audit["runs"] == []

    # Flag them: the flag names exactly the overlapping documents and taints the lineage.
    resp = editor.post("/api/decon/benchmarks/stdlib_qa/flag/", {"annotation": ann.pk}, "json")
    assert resp.status_code == 201, resp.content
    flag = Flag.objects.get(pk=resp.json()["id"])
    assert flag.benchmark == "stdlib_qa"
    assert flag_documents.all_ids(flag).tolist() == overlapping
    again = editor.post("/api/decon/benchmarks/stdlib_qa/flag/", {"annotation": ann.pk}, "json")
    assert again.status_code == 200 and again.json()["id"] == flag.pk
    taint_computed(flag.pk)
    from workers.tasks import flag_reads

    flag_reads.apply(kwargs={"flag_id": flag.pk}).get()

    # The run's first step reading one: computed here sample by sample.
    first = first_sample_by_doc(version.path, everything.path)
    first_sample = min(first[d] for d in held_overlapping if d in first)
    step = first_sample // GBS + 1
    audit = editor.get("/api/decon/benchmarks/stdlib_qa/").json()
    assert audit["flagged"] and audit["complete"]
    assert [(p["id"], p["documents"]) for p in audit["pools"]] == [
        (everything.pk, len(held_overlapping))
    ]
    assert [v["id"] for v in audit["versions"]] == [version.pk]
    (run,) = audit["runs"]
    assert (run["id"], run["first_sample"], run["step"]) == (run_id, first_sample, step)
    assert run["first_read"] == f"first read at step {step} (sample {first_sample})"

    # One item: the documents overlapping it alone.
    item = sorted(world["want"][overlapping[0]])[0]
    one = editor.get(f"/api/decon/benchmarks/stdlib_qa/?item={item}").json()
    assert one["documents"] == sum(1 for w in want if item in w)

    # The run: the items of the overlapping documents its pool holds.
    items = sorted(set().union(*(want[d] for d in held_overlapping)))
    answer = editor.get(f"/api/decon/runs/{run_id}/").json()
    # the first answer asks a worker which items the pool holds (no request reads a pool)
    assert answer["computing"] and answer["benchmarks"] == []
    answer = editor.get(f"/api/decon/runs/{run_id}/").json()
    assert not answer["computing"]
    (b,) = answer["benchmarks"]
    assert b["benchmark"] == "stdlib_qa" and b["items"] == items and b["count"] == len(items)
    assert b["step"] == step and b["flag"] == flag.pk

    # Evaluation results: the benchmark it could have seen is possibly contaminated.
    resp = trainer.post(
        f"/api/decon/runs/{run_id}/evaluations/",
        {"results": [{"benchmark": "stdlib_qa", "value": 0.91, "step": 10},
                     {"benchmark": "other_bench", "value": 0.4, "step": 10}]}, "json",
    )  # fmt: skip
    assert resp.status_code == 201, resp.content
    marks = {e["benchmark"]: e["possibly_contaminated"] for e in resp.json()["evaluations"]}
    assert marks == {"stdlib_qa": True, "other_bench": False}
    viewer = _api(users["viewer"])
    denied = viewer.post(
        f"/api/decon/runs/{run_id}/evaluations/",
        {"results": [{"benchmark": "x", "value": 1}]}, "json",
    )  # fmt: skip
    assert denied.status_code == 403

    # The pages.
    page = login("viewer").get(f"/annotations/{ann.pk}/").content.decode()
    assert 'href="/decon/stdlib_qa/">stdlib_qa</a>' in page
    assert f'<td class="num">{len(overlapping)}</td>' in page
    assert 'data-column="decon.item_ids"' in page and "non-empty" in page
    page = login("viewer").get("/decon/stdlib_qa/").content.decode()
    assert f"first read at step {step} (sample {first_sample})" in page
    assert f'href="/runs/{run_id}/">r1</a>' in page
    page = login("viewer").get(f"/runs/{run_id}/").content.decode()
    assert 'id="decon-run"' in page and f"{len(items)}: " in page
    assert "possibly contaminated" in page
    page = login("viewer").get(f"/pools/{clean.pk}/").content.decode()
    assert "decon-pool-computing" in page  # asked of a worker once; the next view shows it
    page = login("viewer").get(f"/pools/{clean.pk}/").content.decode()
    # every overlapping document is gone from the decontaminated pool, said per benchmark
    assert 'class="num decon-pool-held">0<' in page
    assert f'class="num decon-pool-removed">{len(overlapping)}<' in page
    page = login("viewer").get(f"/pools/{everything.pk}/").content.decode()
    assert f'class="num decon-pool-held">{len(held_overlapping)}<' in page

    # The command line asks the server.
    token = Token.objects.get_or_create(user=users["viewer"])[0].key
    args = ["--server", live_server.url, "--token", token]
    assert main(["decon", "report", "--benchmark", "stdlib_qa", *args]) == 0
    out = capsys.readouterr().out
    assert f"benchmark stdlib_qa: {len(overlapping)} overlapping documents" in out
    assert f"run r1 (#{run_id}): first read at step {step}" in out
    assert main(["decon", "report", "--run", str(run_id), *args]) == 0
    out = capsys.readouterr().out
    assert f"stdlib_qa: {len(items)} items" in out
    assert main(["decon", "report", "--benchmark", "nope", *args]) == 2
    assert "404" in capsys.readouterr().err

# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Per-step lineage on Postgres, through HTTP: with the order exact, a flag answers "run R
first read the flagged documents at step k" (or "not yet, at its current position", or
"never") on the run page, the audit page of the flag and the API. The expected sample is
computed here the slow way, sample by sample from the schedule and each record's
segments; the product computes it vectorized."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from shardcore.mixture import Mixture
from shardcore.pool import SOURCE_FP_COL, PoolReader
from tests.integration.dashboard_fixtures import (  # noqa: F401
    first_sample_by_doc,
    login,
    stdlib_code_pool,
    users,
)
from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
from webapp.catalog.services.runs import run_register
from workers.celery import app

STDLIB = Path(sysconfig.get_paths()["stdlib"])
GBS = 4  # samples per step the test trainer reports with


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory):
    """A source of stdlib modules, tokenized, one pool, a version that reads part of it,
    and a run: built by the real services (jobs run eagerly in this process)."""
    from django.conf import settings

    tmp = tmp_path_factory.mktemp("flagsteps")
    old = settings.SOURCE_ROOTS, settings.DATA_ROOT
    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp], tmp / "data"
    app.conf.task_always_eager = True
    with django_db_blocker.unblock():
        source, ts, pool = stdlib_code_pool(tmp)
        mix = mixture_get_or_create(name="m")
        version = mixture_version_create(
            mixture_id=mix.pk,
            components=[{"pool": pool.pk, "weight": 1.0}],
            token_budget=64 * (pool.num_records // 2),  # half the pool: some data never read
        )
        version.refresh_from_db()
        run = run_register(name="r", mixture_version_id=version.pk)
    yield {"source": source, "ts": ts, "pool": pool, "version": version, "run": run}
    app.conf.task_always_eager = False
    settings.SOURCE_ROOTS, settings.DATA_ROOT = old
    with django_db_blocker.unblock():
        from tests.support.services import flush_database

        flush_database()


def _first_sample_by_doc(world) -> dict[int, int]:
    """Per source document id: the first training sample whose record holds any of its
    tokens, sample by sample (documents never read are absent)."""
    mix = Mixture(world["version"].path)
    assert len(mix.pools) == 1
    pool_path = mix.pools[0]["path"]
    documents = PoolReader(pool_path).documents
    assert set(documents.column(SOURCE_FP_COL).to_pylist()) == {world["ts"].fingerprint}
    return first_sample_by_doc(world["version"].path, pool_path)


def _api(user) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return c


def _new_run(api, world, name):
    """A run registered through the API by the user who will report its progress."""
    from webapp.catalog.models import TrainingRun

    resp = api.post("/api/runs/", {"name": name, "mixture_version": world["version"].pk}, "json")
    assert resp.status_code == 201, resp.content
    return TrainingRun.objects.get(pk=resp.json()["id"])


def _report(api, run, step):
    resp = api.post(
        f"/api/runs/{run.pk}/progress/", {"step": step, "consumed_samples": step * GBS}, "json"
    )
    assert resp.status_code == 201, resp.content


def _taint_computed(api, flag: int) -> None:
    """Until its task ran, the flag's answer says what it taints is being computed (no
    request reads a pool's documents table); then the task (``workers.flag_taint``)
    stores it."""
    from tests.support.flags import taint_computed

    answer = api.get(f"/api/flags/{flag}/taints/").json()
    assert answer["taint"]["computing"]["state"] == "queued" and answer["taints"] == []
    assert answer["flag"]["taint_state"] == "queued"
    taint_computed(flag)
    answer = api.get(f"/api/flags/{flag}/taints/").json()
    assert answer["taint"] == {} and answer["flag"]["taint_state"] == "ready"


def _reads_computed(api, run_pk: int, flag: int) -> None:
    """Until its task ran, the run's answer for ``flag`` says it is being computed (no
    page reads a schedule); then the task (``workers.flag_reads``) stores it."""
    from workers.tasks import flag_reads

    (row,) = [r for r in api.get(f"/api/runs/{run_pk}/flags/").json() if r["flag"] == flag]
    assert row["computing"]["done"] == 0 and row["computing"]["total"] >= 1
    assert row["text"].startswith("being computed: the first flagged sample of 0 of ")
    assert flag_reads.apply(kwargs={"flag_id": flag}).get() >= 1


def test_it_answers_when_a_run_first_read_flagged_documents(world, users, login, db):
    first = _first_sample_by_doc(world)
    # A document first read well inside the run, after the first few steps.
    doc, sample = next((d, s) for d, s in sorted(first.items(), key=lambda x: x[1]) if s > 5 * GBS)
    editor = _api(users["editor"])
    resp = editor.post(
        "/api/flags/",
        {"source": world["source"].pk, "reason": "pii", "document_ids": [doc]},
        "json",
    )
    assert resp.status_code == 201, resp.content
    flag = resp.json()["id"]
    _taint_computed(editor, flag)
    run = _new_run(editor, world, "reads")
    _reads_computed(editor, run.pk, flag)

    # Before any report: not yet.
    (row,) = editor.get(f"/api/runs/{run.pk}/flags/").json()
    assert (row["flag"], row["first_sample"], row["read"], row["step"]) == (flag, sample, False, 0)

    # Reported up to just before the step that reads it: still not yet, at its position.
    before = sample // GBS
    _report(editor, run, before)
    (row,) = editor.get(f"/api/runs/{run.pk}/flags/").json()
    assert not row["read"] and row["consumed_samples"] == before * GBS and row["step"] == before
    page = login("viewer").get(f"/runs/{run.pk}/").content.decode()
    assert f"not yet: the first flagged sample is {sample}" in page
    assert f"has consumed {before * GBS} samples (step {before})" in page

    # Three steps later: read, at exactly step sample // GBS + 1.
    _report(editor, run, before + 3)
    (row,) = editor.get(f"/api/runs/{run.pk}/flags/").json()
    assert row["read"] and row["exact"] and row["step"] == sample // GBS + 1
    text = f"first read at step {sample // GBS + 1} (sample {sample})"
    assert row["text"] == text
    assert text in login("viewer").get(f"/runs/{run.pk}/").content.decode()
    audit = login("viewer").get(f"/audit/flags/{flag}/").content.decode()
    assert f"run {run.name}" in audit and text in audit
    taints = editor.get(f"/api/flags/{flag}/taints/").json()["taints"]
    reads = {t["label"]: t["first_read"] for t in taints if "first_read" in t}
    assert reads[f"run {run.name}"]["step"] == sample // GBS + 1
    assert not reads[f"run {world['run'].name}"]["read"]  # that run reported nothing


def test_it_says_never_for_flagged_documents_the_mixture_does_not_read(world, users, login, db):
    first = _first_sample_by_doc(world)
    pool = PoolReader(world["pool"].path)
    held = set(pool.documents.column("doc_id").to_numpy().tolist())
    unread = sorted(held - set(first))
    assert unread  # the version reads half the pool
    editor = _api(users["editor"])
    resp = editor.post(
        "/api/flags/",
        {"source": world["source"].pk, "reason": "license", "document_ids": unread[:2]},
        "json",
    )
    flag = resp.json()["id"]
    _taint_computed(editor, flag)
    _reads_computed(editor, world["run"].pk, flag)
    rows = [
        r for r in editor.get(f"/api/runs/{world['run'].pk}/flags/").json() if r["flag"] == flag
    ]
    # The pool holds the documents, so the run is tainted; its samples never read them.
    assert rows and rows[0]["never"] and rows[0]["first_sample"] is None
    page = login("viewer").get(f"/audit/flags/{flag}/").content.decode()
    assert "never: no sample of this mixture reads a flagged document" in page


def test_it_finds_the_same_first_sample_as_the_slow_scan_for_every_document(world, db):
    from webapp.catalog import flag_documents
    from webapp.catalog.models import Flag
    from webapp.catalog.selectors import flag_first_sample

    first = _first_sample_by_doc(world)
    version = world["version"]
    rng = np.random.default_rng(0)
    docs = sorted(set(PoolReader(world["pool"].path).documents.column("doc_id").to_pylist()))
    for doc in rng.choice(docs, size=min(8, len(docs)), replace=False).tolist():
        flag = Flag.objects.create(target=Flag.Target.DOCUMENTS, source=world["source"], reason="t")
        flag_documents.store(flag, np.array([doc]))
        assert flag_first_sample(flag=flag, version=version) == first.get(doc)


def test_the_run_page_snippet_streams_the_mixture_from_the_resume_position(world, users, login, db):
    import html
    import re

    editor = _api(users["editor"])
    run = _new_run(editor, world, "snippet")
    _report(editor, run, 7)  # 28 samples consumed
    page = login("viewer").get(f"/runs/{run.pk}/").content.decode()
    snippet = html.unescape(re.search(r'<pre id="loader-snippet">(.*?)</pre>', page, re.S)[1])
    stream = snippet[snippet.index("from shardcore.loader") :]
    scope: dict = {}
    exec(compile(stream, "snippet", "exec"), scope)
    batch = next(iter(scope["loader"]))
    mix = Mixture(world["version"].path)
    assert batch["sample"].tolist() == list(range(7 * GBS, 7 * GBS + 8))
    for k, row in zip(batch["sample"].tolist(), batch["tokens"].numpy(), strict=True):
        np.testing.assert_array_equal(row, mix.tokens(k))

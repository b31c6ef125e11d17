# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Numbers pages show that are measured from an artifact's files are measured by a real
Celery worker and stored in rows; the page reads the rows (and says "being computed"
until they are there), never the files."""

from __future__ import annotations

import numpy as np
import pytest

from tests.integration.dashboard_fixtures import login, stdlib_code_pool, users  # noqa: F401
from tests.support.services import wait_for
from webapp.catalog import measures
from webapp.catalog.models import Fact
from webapp.catalog.services import facts
from workers.celery import app

pytestmark = pytest.mark.services


def test_a_worker_measures_and_stores_what_the_pool_page_shows(
    transactional_db, celery_workers, users, login, settings, tmp_path
):
    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp_path], tmp_path / "data"
    app.conf.task_always_eager = True  # the builds, in this process
    try:
        _source, ts, pool = stdlib_code_pool(tmp_path)
    finally:
        app.conf.task_always_eager = False
    Fact.objects.all().delete()  # what the builds asked for: asked again, of the worker
    celery_workers("facts")

    page = login("viewer").get(f"/pools/{pool.pk}/?by=length").content.decode()
    assert "Being computed by a worker" in page  # asked, not measured, by the page
    facts.fact_request("source_stats", ts.pk)

    def stored(kind, pk, key=""):
        return Fact.objects.filter(kind=kind, object_id=pk, key=key, state="ready").first()

    wait_for(lambda: stored("pool_properties", pool.pk), timeout=120, what="properties")
    wait_for(lambda: stored("pool_quality", pool.pk, "length"), timeout=120, what="quality")
    wait_for(lambda: stored("source_stats", ts.pk), timeout=120, what="statistics")
    assert stored("pool_properties", pool.pk).value == measures.pool_properties_measure(pool=pool)
    measured = measures.pool_quality_measure(pool=pool, by="length")
    assert stored("pool_quality", pool.pk, "length").value["windows"] == measured["windows"]
    resp = login("viewer").get(f"/pools/{pool.pk}/?by=length")
    assert resp.context["quality"]["report"]["windows"] == measured["windows"]
    assert "Being computed by a worker" not in resp.content.decode()
    # The source page's statistics come from the stored row: documents per length bin.
    stats = stored("source_stats", ts.pk).value
    assert sum(stats["counts"]) == ts.num_documents


def test_a_worker_computes_what_a_flag_taints_after_the_request_recorded_it(
    transactional_db, celery_workers, users, login, settings, tmp_path
):
    from webapp.catalog import pool_documents
    from webapp.catalog.models import Flag, Taint
    from workers.tasks import flag_taint

    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp_path], tmp_path / "data"
    app.conf.task_always_eager = True  # the builds, in this process
    try:
        source, ts, pool = stdlib_code_pool(tmp_path)
    finally:
        app.conf.task_always_eager = False

    # The request records the flag and queues its task; no worker yet: being computed.
    editor = login("editor")
    resp = editor.post(
        "/audit/flags/", {"source_id": source.pk, "reason": "pii", "document_ids": "0, 3, 5"}
    )
    assert resp.status_code == 302, resp.content
    flag = Flag.objects.latest("pk")
    assert flag.taint_state == Flag.TaintState.QUEUED and not Taint.objects.filter(flag=flag)
    page = login("viewer").get(f"/audit/flags/{flag.pk}/").content.decode()
    assert "Being computed by a worker" in page and 'id="flag-summary"' not in page

    celery_workers("taint")
    wait_for(
        lambda: Flag.objects.get(pk=flag.pk).taint_state == Flag.TaintState.READY,
        timeout=120, what="the flag's taint",
    )  # fmt: skip
    held = pool_documents.pool_documents_hit(pool=pool, tokenized=ts, doc_ids=np.array([0, 3, 5]))
    assert held > 0
    rows = {
        (t.tokenized_source_id, t.pool_id, t.documents) for t in Taint.objects.filter(flag=flag)
    }
    assert rows == {(ts.pk, None, 3), (None, pool.pk, held)}
    page = login("viewer").get(f"/audit/flags/{flag.pk}/").content.decode()
    assert "Being computed by a worker" not in page
    assert "holding 3 flagged documents" in page

    # A second message for the same flag (a redelivery) replaces them with the same rows.
    first = set(Taint.objects.filter(flag=flag).values_list("pk", flat=True))
    flag_taint.delay(flag_id=flag.pk)
    wait_for(lambda: not Taint.objects.filter(pk__in=first).exists(), timeout=120, what="the rerun")
    again = {
        (t.tokenized_source_id, t.pool_id, t.documents) for t in Taint.objects.filter(flag=flag)
    }
    assert again == rows and Flag.objects.get(pk=flag.pk).taint_state == Flag.TaintState.READY

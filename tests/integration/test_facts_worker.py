# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Numbers pages show that are measured from an artifact's files are measured by a real
Celery worker and stored in rows; the page reads the rows (and says "being computed"
until they are there), never the files."""

from __future__ import annotations

import pytest

from tests.integration.dashboard_fixtures import login, stdlib_code_pool, users  # noqa: F401
from tests.support.services import wait_for
from webapp.catalog import facts
from webapp.catalog.models import Fact
from webapp.catalog.selectors import pools as pool_selectors
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
    assert stored("pool_properties", pool.pk).value == pool_selectors.pool_properties_measure(
        pool=pool
    )
    measured = pool_selectors.pool_quality_measure(pool=pool, by="length")
    assert stored("pool_quality", pool.pk, "length").value["windows"] == measured["windows"]
    resp = login("viewer").get(f"/pools/{pool.pk}/?by=length")
    assert resp.context["quality"]["report"]["windows"] == measured["windows"]
    assert "Being computed by a worker" not in resp.content.decode()
    # The source page's statistics come from the stored row: documents per length bin.
    stats = stored("source_stats", ts.pk).value
    assert sum(stats["counts"]) == ts.num_documents

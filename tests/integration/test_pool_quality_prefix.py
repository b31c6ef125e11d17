# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""A pool's shuffle quality is measured by its build on the first records of its order,
whatever its size: a pool larger than the limit gets a report from the build that covers
exactly that prefix, its page says so, and a choice of labels is measured on the same
prefix."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest

from shardcore import quality
from shardcore.pool import PoolReader
from tests.integration.dashboard_fixtures import (  # noqa: F401
    computed,
    login,
    stdlib_code_pool,
    users,
)
from webapp.catalog.measures import pools as pool_measures
from workers.celery import app

STDLIB = Path(sysconfig.get_paths()["stdlib"])
LIMIT = 40


@pytest.fixture
def eager():
    """Jobs run in this process, to the end, when they are started."""
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def test_a_pool_larger_than_the_limit_is_measured_by_its_build_on_its_first_records(
    transactional_db, eager, users, login, settings, tmp_path, monkeypatch, computed
):
    from django.core.cache import cache

    cache.clear()
    monkeypatch.setattr(pool_measures, "QUALITY_RECORDS", LIMIT)
    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp_path], tmp_path / "data"
    _source, _ts, pool = stdlib_code_pool(tmp_path)
    reader = PoolReader(pool.path)
    assert reader.num_records > 4 * LIMIT and len(reader.manifest["shards"]) > 1

    # Recorded by the build: the first LIMIT records of the pool's order, no more.
    recorded = pool.params["quality"]
    assert (recorded["measured"], recorded["records"]) == (LIMIT, reader.num_records)
    main = reader.main_documents()
    bins = np.floor(np.log2(np.maximum(reader.documents.column("n_tokens").to_numpy(), 1)))
    labels = np.array([f"{2 ** int(b):,}-{2 ** (int(b) + 1) - 1:,} tokens" for b in bins])
    prefix = main[:LIMIT]
    expected = quality.report(labels[prefix[prefix >= 0]], batch_size=256)
    assert recorded["windows"] == expected["windows"]
    assert recorded["label"] == "document length (tokens)"
    # Not the whole pool's report.
    whole = quality.report(labels[main[main >= 0]], batch_size=256)
    assert recorded["windows"] != whole["windows"]

    page = login("viewer").get(f"/pools/{pool.pk}/").content.decode()
    assert 'id="quality-verdict"' in page
    assert f"measured on the first {LIMIT} of {reader.num_records:,} records" in page

    # Another labelling, on demand: the same prefix.
    resp = computed(login("viewer"), f"/pools/{pool.pk}/?by=length")
    assert resp.context["quality"]["report"]["measured"] == LIMIT
    assert f"measured on the first {LIMIT} of {reader.num_records:,} records" in (
        resp.content.decode()
    )

"""Journey: a catalog whose data root is a bucket of the local S3 server. Open the pool from
the pools page, read its numbers and its shuffle verdict, copy its s3:// location, label
its quality by a property read from the bucket; follow it to the mixture version that uses
it, read its samples and epochs, and copy where its materialized copy is."""

import numpy as np
import pytest

from shardcore import manifest as mf
from shardcore import quality
from shardcore.pool import PoolReader
from tests.integration.dashboard_fixtures import catalog_world

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def s3_world(transactional_db, s3_data_root, settings, tmp_path):
    from workers.celery import app

    settings.SOURCE_ROOTS = [tmp_path]
    app.conf.task_always_eager = True
    try:
        yield catalog_world(tmp_path, steps=9, samples_per_step=4)
    finally:
        app.conf.task_always_eager = False


def _copied(page, target: str) -> str:
    """Click the Copy button of ``target`` (a selector); what it put on the clipboard."""
    button = f"[data-copy='{target}']"
    page.wait_for_load_state()  # copy.js, at the end of the page, has attached its listeners
    page.click(button)
    page.wait_for_function(f"() => document.querySelector(\"{button}\").textContent === 'Copied'")
    return page.evaluate("() => navigator.clipboard.readText()")


def test_the_pool_and_version_pages_of_a_catalog_on_object_storage(
    page, live_server, login, screenshot, s3_world, s3_data_root
):
    pool, version, copy = s3_world["pool"], s3_world["version"], s3_world["copy"]
    manifest = mf.read_manifest(pool.path)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    login("ada", superuser=True)

    page.click("nav >> text=Pools")
    page.click("table >> text=code")
    assert "ready" in page.locator("h1").inner_text()
    facts = page.locator("dl.facts").first.inner_text()
    assert f"{manifest['num_records']:,} × 65 tokens (sequence length 64 + 1)" in facts
    assert f"{manifest['num_tokens']:,}" in facts and f"{manifest['documents']:,}" in facts
    location = page.inner_text("#pool-location")
    assert location == pool.path and location.startswith(f"{s3_data_root}/pools/")
    assert _copied(page, "#pool-location") == pool.path

    # The verdict its build measured, and the same windows measured here from the bucket.
    reader = PoolReader(pool.path)
    main = reader.main_documents()
    bins = np.floor(np.log2(np.maximum(reader.documents.column("n_tokens").to_numpy(), 1)))
    labels = np.array([f"{2 ** int(b):,}-{2 ** (int(b) + 1) - 1:,} tokens" for b in bins])
    recorded = pool.params["quality"]
    assert recorded["windows"] == quality.report(labels[main], batch_size=256)["windows"]
    text = recorded["verdict"]["text"]
    verdict = page.inner_text("#quality-verdict")
    assert verdict == f"{text[0].upper()}{text[1:]} (labels: document length (tokens))."
    screenshot("s3-pool")

    # Labels by a property of the documents, offered from the documents table's schema on
    # the bucket and measured from the pool's files there.
    options = page.locator("#quality-by select option").all_inner_texts()
    assert "size" in options and "module" in options
    page.select_option("#quality-by select", "size")
    page.click("#quality-by button")
    page.wait_for_url("**/?by=size")
    # Measured by a task (eager here) as the page asks, never by the page itself.
    assert "Being computed by a worker" in page.inner_text("#quality-computing")
    page.reload()
    assert "(labels: size)" in page.inner_text("#quality-verdict")

    # The version that reads it.
    page.click(f"text={version}")
    assert f"v{version.number}" in page.locator("h1").inner_text()
    schedule = mf.read_manifest(version.path)
    facts = page.locator("dl.facts").first.inner_text()
    assert f"Samples\n{schedule['num_samples']:,}" in facts
    row = page.locator("table tr", has_text=pool.name).first.inner_text()
    assert f"{schedule['pools'][0]['epochs']:.2f}" in row
    materialized = page.locator("#materialized")
    assert f"{copy.num_records:,} samples in training order" in materialized.inner_text()
    where = materialized.locator("[data-field=location]").inner_text()
    assert where == copy.path and where.startswith(f"{version.path}/materialized/")
    assert _copied(page, f"#copy-location-{copy.pk}") == copy.path
    assert f"ShardyardIterableDataset({copy.path!r}" in materialized.inner_text()
    screenshot("s3-version")

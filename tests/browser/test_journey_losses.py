# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Journey: two training loops report validation loss with ``shardcore.client``; the run
page draws the per-pool loss chart (plotly in Chromium) with the other run overlaid, and
proposes the next stage's weights against the other run, beside the current weights."""

import pytest
from rest_framework.authtoken.models import Token

from shardcore.client import ShardyardClient
from tests.integration.dashboard_fixtures import catalog, users  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_it_reads_the_loss_chart_and_the_proposal(
    page, live_server, login, screenshot, catalog, django_user_model
):
    login("ada", superuser=True)
    token = Token.objects.create(user=django_user_model.objects.get(username="ada")).key
    client = ShardyardClient(live_server.url, token=token, retries=0)
    pool, version = catalog["pool"].pk, catalog["version"].pk
    runs = {}
    for name, losses in (("tiny-a", (4.0, 3.1)), ("tiny-ref", (3.8, 2.7))):
        run = client.register_run(mixture_version=version, name=name)
        for step, loss in zip((10, 20), losses, strict=True):
            client.report_progress(run["id"], step=step, consumed_samples=step * 4)
            client.report_losses(run["id"], step=step, val={pool: loss}, train=[(step, loss + 0.2)])
        runs[name] = run["id"]

    page.goto(f"{live_server.url}/runs/{runs['tiny-a']}/")
    card = page.locator("#losses")
    # plotly.js drew the chart: its legend names this run's pool and the overlaid run's.
    chart = card.locator(".chart").first
    chart.locator(".legend").wait_for()
    legend = chart.locator(".legend").text_content()
    assert "wiki-2048" in legend and "tiny-ref: wiki-2048" in legend
    assert chart.locator(".scatterlayer .trace").count() == 2
    assert "tiny-ref" in card.locator("p.muted").inner_text()
    screenshot("10-run-losses")

    page.select_option("#proposal select[name=reference]", label="tiny-ref")
    page.click("#proposal >> text=Propose")
    row = page.locator("#proposal table tr", has_text="wiki-2048").inner_text().split("\t")
    # One pool: its loss 3.1 at step 20 against 2.7, excess 0.4; the weight stays 1.
    assert row == ["wiki-2048", "3.1000", "2.7000", "0.4000", "1.0000", "1.0000"]
    screenshot("11-run-proposal")

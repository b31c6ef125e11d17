"""Journey: a two-stage mixture (main, then a 10% anneal) typed into the builder, whose
preview draws the stages in order and as wide as the build makes them; a budget too large
for a schedule shows the reason in the error panel, clears the charts and blocks Save with
that reason; after saving, the version page reads the built schedule: the anneal last,
at its width, and each pool's tokens as built."""

import pytest

from shardcore.manifest import read_manifest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

# plotly's own copy of the figure drawn in a chart element
FIGURE = "(el) => ({data: el.data, annotations: (el.layout.annotations || []).map(a => a.text)})"


def test_it_previews_and_shows_stages_in_schedule_order_and_width(
    page, live_server, login, screenshot, stack
):
    corpus = stack.corpus()
    stack.start_worker()
    prose = stack.pool("prose", stack.tokenized("docstrings", corpus["docstrings"].parent), 64)
    code = stack.pool("code", stack.tokenized("code", corpus["stdlib-code"].parent), 64)
    login("ada", superuser=True)

    page.goto(f"{live_server.url}/mixtures/new/")
    page.wait_for_selector("#rows [data-k=pool]")
    # Untouched, the budget is one epoch of the first pool: the builder opens saveable.
    first = page.locator("#rows [data-k=pool]").first.input_value()
    from webapp.catalog.models import Pool

    pool = Pool.objects.get(pk=first)  # one epoch: every record's seq_len trained tokens
    assert page.input_value("[name=tokens]") == str(pool.num_records * pool.seq_len)
    page.fill("[name=name]", "staged")
    budget, anneal = 64 * 2000, 64 * 200
    page.fill("[name=tokens]", str(budget))
    page.locator("#rows [data-k=pool]").first.select_option(str(prose.pk))
    page.click("[data-add=stage]")
    page.locator("#stages [data-k=tokens]").fill(str(anneal))
    page.click("[data-add=row]")
    second = page.locator("#rows tr").nth(2)
    second.locator("[data-k=stage]").fill("anneal")
    second.locator("[data-k=pool]").select_option(str(code.pk))
    page.wait_for_function(
        "() => { const el = document.getElementById('composition-chart');"
        " return el.data && el.data.length === 2 && el.layout.annotations.length === 2; }"
    )
    fig = page.locator("#composition-chart").evaluate(FIGURE)
    assert fig["annotations"] == ["main", "anneal"]
    by_pool = {t["name"]: t for t in fig["data"]}
    assert by_pool["code"]["width"] == [budget - anneal, anneal]
    assert by_pool["code"]["x"] == [(budget - anneal) / 2, budget - anneal / 2]
    assert by_pool["code"]["y"] == [0, 1] and by_pool["prose"]["y"] == [1, 0]
    assert page.inner_text("#save-reason") == ""
    screenshot("builder-stages")

    # A budget whose schedule cannot be held: the reason, no stale numbers, Save blocked.
    page.fill("[name=tokens]", str(10**15))
    page.wait_for_function("() => document.getElementById('error').textContent.length > 0")
    error = page.inner_text("#error")
    assert "SHARDYARD_MAX_SCHEDULE_SAMPLES" in error and "1,000,000,000,000,000 tokens" in error
    assert page.locator("#save").is_disabled()
    assert page.inner_text("#save-reason") == f"Cannot save: {error}"
    assert page.locator("#prediction tr").count() == 0
    assert page.locator("#composition-chart").evaluate("(el) => (el.data || []).length") == 0
    screenshot("builder-budget-error")

    page.fill("[name=tokens]", str(budget))
    page.wait_for_function("() => !document.getElementById('save').disabled")
    page.click("#save")
    page.wait_for_url("**/mixtures/versions/*/")
    # The page follows the build job, then shows the built version (it reloads when the
    # job ends).
    page.wait_for_function("() => !document.getElementById('job')", timeout=120_000)
    from webapp.catalog.models import MixtureVersion

    version = MixtureVersion.objects.get(mixture__name="staged")
    built = read_manifest(version.path)
    main, last = built["stages"]
    chart = page.locator(".card .js-plotly-plot").nth(1)
    fig = chart.evaluate(FIGURE)
    assert fig["annotations"] == ["main", "anneal"]
    by_pool = {t["name"]: t for t in fig["data"]}
    assert by_pool["code"]["width"] == [main["num_tokens"], last["num_tokens"]]
    assert last["num_tokens"] == anneal
    bars = page.locator(".card .js-plotly-plot").nth(0).evaluate(FIGURE)["data"][0]
    tokens = {p["path"]: p["tokens"] for p in built["pools"]}
    assert dict(zip(bars["x"], bars["y"], strict=True)) == {
        "prose": tokens[prose.path], "code": tokens[code.path]
    }  # fmt: skip
    screenshot("version-stages")

"""Journey: a version ordered by the diversity recipe (``greedy_block``) is built; its page
shows the recipe's measurements recorded by the build: per family (pool, document-length
bins), the cumulative characteristic error of its order against random permutations of the
same samples, as a table and a chart, and the per-batch error of its worst batch against
the best and the mean random batch, with their distribution."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

FIGURE = "(el) => el.data.map((t) => ({name: t.name, x: t.x, y: t.y}))"


def test_version_page_shows_the_recipe_measured_at_build(
    page, live_server, login, screenshot, jobs_inline, code_pools
):
    from shardcore import quality
    from webapp.catalog.services import recipe
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create

    mixture = mixture_get_or_create(name="recipe-code")
    with jobs_inline():  # built in this process, through the job engine
        version = mixture_version_create(
            mixture_id=mixture.pk, token_budget=65 * 6000, seed=4, order="greedy_block",
            components=[{"pool": code_pools["early"].pk, "weight": 0.5},
                        {"pool": code_pools["middle"].pk, "weight": 0.3},
                        {"pool": code_pools["late"].pk, "weight": 0.2}],
            max_repetitions=100,
        )  # fmt: skip
    version.refresh_from_db()
    rec = version.params["recipe"]
    # Recorded by the build, and what measuring the built schedule again gives.
    again = quality.recipe_quality(
        version.path, length_bins=recipe.RECIPE_LENGTH_BINS, batch_size=recipe.RECIPE_BATCH,
        trials=recipe.RECIPE_TRIALS, checkpoints=recipe.RECIPE_CHECKPOINTS,
        limit=recipe.RECIPE_RECORDS, pool_sources=True,
    )["order"]  # fmt: skip
    assert rec == again
    assert set(rec["families"]) == {"pool", "length"}  # a JSON column: keys unordered
    assert rec["num_records"] == version.num_samples
    login("ada", superuser=True)

    page.goto(f"{live_server.url}/mixtures/versions/{version.pk}/")
    card = page.locator("#recipe")
    assert f"on {version.num_samples:,} samples in the schedule's order" in card.inner_text()
    for key, name, title in (("pool", "pool", "pool"),
                             ("length", "length", "document length (quantile bins)")):  # fmt: skip
        fam = rec["families"][name]
        sec = page.locator(f"#recipe-{key}")
        assert sec.locator("h3").inner_text() == title
        cum, b = fam["cumulative"], fam["batches"]
        verdict = sec.locator(".recipe-verdict").inner_text()
        # The greedy order's error is below every random permutation's (the recipe's
        # claim, measured on this schedule), said as such.
        assert cum["below_all"], cum
        assert "below every random order's at every checkpoint" in verdict
        assert cum["verdict"]["text"].capitalize() in verdict
        assert b["verdict"]["text"].capitalize() in verdict
        assert "good" in sec.locator(".recipe-verdict").get_attribute("class")
        assert sec.locator(".recipe-order-worst").inner_text() == f"{b['order_worst']:.4f}"
        assert sec.locator(".recipe-random-best").inner_text() == f"{b['random_best']:.4f}"
        assert sec.locator(".recipe-random-mean").inner_text() == f"{b['random_mean']:.4f}"
        rows = [r.locator("td").all_inner_texts() for r in sec.locator("table tr").all()[1:]]
        assert len(rows) == recipe.RECIPE_CHECKPOINTS - 1
        for r, p, o, lo, mean in zip(rows, rec["position"], cum["order"], cum["random_min"],
                                     cum["random_mean"], strict=False):  # fmt: skip
            assert r == [f"{p:,}", f"{o:,.1f}", f"{lo:,.1f}", f"{mean:,.1f}", f"{o / lo:.3f}"]
        charts = sec.locator(".js-plotly-plot")
        charts.nth(1).wait_for()
        lines = {t["name"]: t for t in charts.nth(0).evaluate(FIGURE)}
        assert lines["this order"]["x"] == rec["position"]
        assert lines["this order"]["y"] == [round(v, 3) for v in cum["order"]]
        assert lines[f"random, lowest of {rec['trials']}"]["y"] == [
            round(v, 3) for v in cum["random_min"]
        ]
        bars = {t["name"]: t for t in charts.nth(1).evaluate(FIGURE)}
        assert bars["this order"]["y"] == b["histogram"]["order"]
        assert sum(bars["this order"]["y"]) == version.num_samples // rec["batch_size"]
    screenshot("version-recipe")


def test_a_staged_version_is_judged_stage_by_stage_like_its_quality(
    page, live_server, login, jobs_inline, code_pools
):
    """A blend with an anneal: each stage's samples against random orders of that stage's
    own samples (not orders that mix the stages), so the pools' verdicts agree with the
    quality verdicts above them (good in both stages); the anneal's few batches are not
    drawn as a distribution, and the card says why."""
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create

    mixture = mixture_get_or_create(name="recipe-staged")
    with jobs_inline():
        version = mixture_version_create(
            mixture_id=mixture.pk, token_budget=64 * 6000, seed=4, order="blend",
            components=[{"pool": code_pools["early"].pk, "weight": 0.5},
                        {"pool": code_pools["middle"].pk, "weight": 0.3},
                        {"pool": code_pools["late"].pk, "weight": 0.2},
                        {"pool": code_pools["middle"].pk, "weight": 0.5, "stage": "anneal"},
                        {"pool": code_pools["late"].pk, "weight": 0.5, "stage": "anneal"}],
            stages=[{"name": "anneal", "tokens": 64 * 1200}], max_repetitions=100,
        )  # fmt: skip
    version.refresh_from_db()
    rec = version.params["recipe"]
    assert [(s["name"], s["measured"]) for s in rec["stages"]] == [("main", 4800),
                                                                   ("anneal", 1200)]  # fmt: skip
    login("ada", superuser=True)
    page.goto(f"{live_server.url}/mixtures/versions/{version.pk}/")
    card = page.locator("#recipe")
    assert "each stage against random orders of its own samples" in card.inner_text()
    stages = page.locator("#quality-stages > li").all()
    assert len(stages) == 2
    for i, (name, first, last) in enumerate((("main", 0, 4799), ("anneal", 4800, 5999))):
        head = page.locator(f"#recipe-stage-{i} h3").inner_text()
        assert head.startswith(f"Stage {name} (samples {first:,}–{last:,}")
        assert "good" in stages[i].get_attribute("class"), stages[i].inner_text()
        pools = page.locator(f"#recipe-{i}-pool")
        verdict = pools.locator(".recipe-verdict")
        fam = rec["stages"][i]["families"]["pool"]
        assert fam["cumulative"]["verdict"]["kind"] == "better", fam["cumulative"]
        assert "good" in verdict.get_attribute("class"), verdict.inner_text()
        assert fam["cumulative"]["verdict"]["text"].capitalize() in verdict.inner_text()
    # main: 18 whole batches of 256, a distribution; anneal: 4, none drawn.
    main_pools = page.locator("#recipe-0-pool .js-plotly-plot")
    main_pools.nth(1).wait_for()
    assert main_pools.count() == 2
    anneal = page.locator("#recipe-1-pool")
    anneal.locator(".js-plotly-plot").first.wait_for()
    assert anneal.locator(".js-plotly-plot").count() == 1
    assert (
        "Too few batches to judge the per-batch error: 4 whole batches of 256, and a "
        "distribution needs at least 8." in anneal.locator(".recipe-batches").inner_text()
    )

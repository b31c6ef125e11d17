"""Journey: a two-stage version is built (no materialized copy, no run); its page already
says how well the schedule mixes its pools, per stage, as a verdict against random
permutations of the same samples, with the window-deviation curve behind it, series
named by the pools."""

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

FIGURE = "(el) => ({data: el.data, annotations: (el.layout.annotations || []).map(a => a.text)})"


def test_it_shows_the_quality_verdict_measured_at_build(
    page, live_server, login, screenshot, jobs_inline, code_pools
):
    from shardcore import quality
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create

    pools = code_pools
    mixture = mixture_get_or_create(name="mixed-code")
    with jobs_inline():  # built in this process
        version = mixture_version_create(
            mixture_id=mixture.pk, token_budget=64 * 4000, seed=2, order="diversity",
            components=[{"pool": pools["early"].pk, "weight": 0.6},
                        {"pool": pools["late"].pk, "weight": 0.4},
                        {"pool": pools["early"].pk, "weight": 0.2, "stage": "anneal"},
                        {"pool": pools["late"].pk, "weight": 0.8, "stage": "anneal"}],
            stages=[{"name": "anneal", "tokens": 64 * 400}],
            max_repetitions=100,
        )  # fmt: skip
        mixture_version_create(
            mixture_id=mixture.pk, token_budget=64 * 4000, seed=2,
            components=[{"pool": pools["early"].pk, "weight": 0.6},
                        {"pool": pools["late"].pk, "weight": 0.4},
                        {"pool": pools["middle"].pk, "weight": 1.0, "stage": "anneal"}],
            stages=[{"name": "anneal", "tokens": 64 * 400}],
            max_repetitions=100,
        )  # fmt: skip
    version.refresh_from_db()
    # Recorded by the build, before anything was materialized or trained.
    recorded = version.params["quality"]
    assert not version.exports.exists() and not version.runs.exists()
    expected = quality.mixture_quality(version.path, by="pool")
    assert [s["verdict"]["text"] for s in recorded["stages"]] == [
        s["verdict"]["text"] for s in expected["stages"]
    ]
    login("ada", superuser=True)

    page.goto(f"{live_server.url}/mixtures/versions/{version.pk}/")
    shares = [r.locator("td").all_inner_texts()[:3]
              for r in page.locator("table", has_text="Share of stage").locator("tr").all()[1:]]  # fmt: skip
    assert sorted(shares) == [["anneal", "code-early", "20.0%"], ["anneal", "code-late", "80.0%"],
                              ["main", "code-early", "60.0%"], ["main", "code-late", "40.0%"]]  # fmt: skip
    stages = page.locator("#quality-stages > li > .stage-verdict").all_inner_texts()
    main_text = recorded["stages"][0]["verdict"]["text"]
    assert re.fullmatch(
        r"(within \d+\.\d\dx of|better than) a perfect shuffle at windows of [\d,]+ samples "
        r"and more.*",
        main_text,
    )
    assert stages[0] == f"main: {main_text}."
    assert recorded["stages"][1]["name"] == "anneal"
    assert stages[1] == f"anneal: {recorded['stages'][1]['verdict']['text']}."
    chart = page.locator("#version-quality .js-plotly-plot")
    fig = chart.evaluate(FIGURE)
    assert "no quality report yet" not in fig["annotations"]
    names = [t["name"] for t in fig["data"]]
    assert {"code-early", "code-late", "worst label"} <= set(names)
    assert "perfect shuffle (4 simulations)" in names
    worst = next(t for t in fig["data"] if t["name"] == "worst label")
    assert worst["y"] == recorded["windows"]["max_all"]
    assert worst["x"] == recorded["windows"]["window_sizes"]
    screenshot("version-quality")

    # The second version's anneal reads one pool: nothing to mix, said as such.
    v2 = mixture.versions.get(number=2)
    page.goto(f"{live_server.url}/mixtures/versions/{v2.pk}/")
    assert page.locator("#quality-stages > li > .stage-verdict").nth(1).inner_text() == (
        "anneal: one pool only (code-middle): nothing to mix."
    )

    # Label the samples by a document property instead: the choice lists what every pool
    # has, the series are its values, the verdicts are measured for it.
    page.goto(f"{live_server.url}/mixtures/versions/{version.pk}/")
    options = page.locator("#quality-by select option").all_inner_texts()
    assert options[0] == "pool" and "package" in options
    page.select_option("#quality-by select", "package")
    page.click("#quality-by button")
    page.wait_for_url("**?by=package")
    # Measured by a task (here run in Celery's eager mode as the page asks for it), never
    # by the page: the first answer says so, the next shows the stored numbers.
    assert "Being computed by a worker" in page.inner_text("#version-quality")
    page.reload()
    by_package = quality.mixture_quality(version.path, by="package")
    stages = page.locator("#quality-stages > li > .stage-verdict").all_inner_texts()
    assert stages == [f"{s['name']}: {s['verdict']['text']}." for s in by_package["stages"]]
    assert "the package of each sample's main document" in page.inner_text("#version-quality")
    names = {t["name"] for t in chart.evaluate(FIGURE)["data"]}
    windows = by_package["windows"]
    top = max(zip(windows["share"], windows["labels"], strict=True))[1]
    assert top in names and "code-early" not in names
    # A property not every pool has is refused with the choices, not measured.
    page.goto(f"{live_server.url}/mixtures/versions/{version.pk}/?by=nonexistent")
    assert "not every pool of this version has the property 'nonexistent'" in page.inner_text(
        "#version-quality"
    )

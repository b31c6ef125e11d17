"""Journey over the small things a newcomer found, page by page in Chromium at 1280 px:
long names, paths and URLs wrap instead of widening the page (one was 1,815 px wide,
another 8,295 px); sizes are written in the README's units (kB = 1000 bytes: 886,397
bytes is 886.4 kB, not "865.6 KB"); a scanned source that is not tokenized yet says so
instead of "no documents"; the overview's running jobs table fits its card; the run
page's loader snippet is wrapped, not cut off, and its comment names the sample its
``next_sample`` streams from; a version's recipe card counts samples, charts included."""

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

WIDTH = 1280  # the fixtures' viewport
LONG = "a_very_long_source_name_" * 4  # 96 characters, nowhere to break a line
URL = "s3://corpus-bucket/" + "/".join(f"segment_{i:03d}_of_a_deep_prefix" for i in range(25))


def _page_width(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


def _figure(chart) -> dict:
    return chart.evaluate("el => ({data: el.data, layout: el.layout})")


def test_pages_fit_the_window_and_say_sizes_and_states_as_they_are(
    page, live_server, login, jobs_inline, code_pools
):
    from webapp.catalog.models import Pool, Source, SourceFile, TrainingRun
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
    from webapp.catalog.services.runs import run_progress_record, run_register
    from webapp.jobs.models import Job

    source = Source.objects.create(
        name=LONG.rstrip("_"), uri=URL, status=Source.Status.SCANNED, num_files=1,
        num_documents=12, num_bytes=886_397,
    )  # fmt: skip
    SourceFile.objects.create(source=source, path=URL[40:] + ".jsonl", size=886_397,
                              num_documents=12)  # fmt: skip
    pool = code_pools["early"]
    Pool.objects.filter(pk=pool.pk).update(name="pool_" + LONG.rstrip("_"))
    mixture = mixture_get_or_create(name="mix_" + LONG.rstrip("_"))
    with jobs_inline():
        version = mixture_version_create(
            mixture_id=mixture.pk, token_budget=64 * 600, seed=1,
            components=[{"pool": pool.pk, "weight": 1.0}],
        )  # fmt: skip
    run = run_register(name="run_" + LONG.rstrip("_"), mixture_version_id=version.pk)
    run_progress_record(run_id=run.pk, step=30, consumed_samples=123)
    job = Job.objects.create(
        kind="pool", title=f"pool {LONG} from {URL}"[:300], state="running", plan={},
        output_dir=URL, units_total=40, units_done=7, tokens=123_456_789,
    )  # fmt: skip
    login("ada", superuser=True)
    url = live_server.url

    pages = ["/", "/sources/", f"/sources/{source.pk}/", "/pools/", f"/pools/{pool.pk}/",
             "/mixtures/", f"/mixtures/{mixture.pk}/", f"/mixtures/versions/{version.pk}/",
             "/runs/", f"/runs/{run.pk}/", "/jobs/", f"/jobs/{job.pk}/", "/storage/"]  # fmt: skip
    wide = {}
    for path in pages:
        page.goto(url + path)
        if _page_width(page) > WIDTH:
            wide[path] = _page_width(page)
    assert wide == {}, wide

    # Sizes in the README's units, the same on every page.
    page.goto(url + "/sources/")
    assert "886.4 kB" in page.inner_text("main") and "KB" not in page.inner_text("main")
    page.goto(f"{url}/sources/{source.pk}/")
    main = page.inner_text("main")
    assert "886.4 kB" in main and "865.6" not in main

    # Scanned, not tokenized: the length chart says so, not "no documents".
    lengths = page.locator(".js-plotly-plot").last
    lengths.locator(".annotation-text").first.wait_for()
    said = lengths.locator(".annotation-text").evaluate_all("ns => ns.map(n => n.textContent)")
    assert any("not tokenized yet (12 documents scanned)" in t for t in said), said
    assert not any(t == "no documents" for t in said)

    # The overview's running jobs table ends inside its card.
    page.goto(url + "/")
    card = page.locator("#running-jobs").bounding_box()
    table = page.locator("#running-jobs table").bounding_box()
    assert table["x"] + table["width"] <= card["x"] + card["width"] + 0.5, (table, card)
    assert f"#{job.pk}" in page.inner_text("#running-jobs")

    # The loader snippet: wrapped inside its box, and its comment names the sample that
    # the stream snippet's next_sample starts from.
    page.goto(f"{url}/runs/{run.pk}/")
    snippet = page.locator("#loader-snippet")
    assert snippet.evaluate("el => el.scrollWidth <= el.clientWidth")
    text = snippet.inner_text()
    next_sample = int(re.search(r"next_sample=(\d+)", text)[1])
    assert f"# the run's next sample is {next_sample}:" in text, text
    assert next_sample == TrainingRun.objects.get(pk=run.pk).consumed_samples == 123

    # A version's recipe card counts samples, in its text and on its charts' axes.
    page.goto(f"{url}/mixtures/versions/{version.pk}/")
    recipe = page.locator("#recipe")
    assert "records" not in recipe.inner_text()
    charts = recipe.locator(".js-plotly-plot")
    charts.first.wait_for()
    titles = [_figure(c)["layout"]["xaxis"]["title"]["text"] for c in charts.all()]
    assert titles and all("record" not in t for t in titles), titles

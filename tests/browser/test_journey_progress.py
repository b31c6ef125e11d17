"""Journey: a run of a two-stage version (main, then an anneal) reports its progress;
the run page plots consumed tokens against training step, not wall-clock time, and marks
the step at which the run moved into the anneal, computed from the built schedule's
stage start and the run's reports."""

import pytest

from shardcore.manifest import read_manifest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

FIGURE = "(el) => ({data: el.data, layout: el.layout})"


def test_it_plots_progress_by_step_with_the_stage_boundary(
    page, live_server, login, screenshot, jobs_inline, code_pools
):
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
    from webapp.catalog.services.runs import run_progress_record, run_register

    pools = code_pools
    mixture = mixture_get_or_create(name="annealed")
    with jobs_inline():  # built in this process
        version = mixture_version_create(
            mixture_id=mixture.pk, token_budget=64 * 2000, seed=1,
            components=[{"pool": pools["early"].pk, "weight": 0.5},
                        {"pool": pools["late"].pk, "weight": 0.5},
                        {"pool": pools["middle"].pk, "weight": 1.0, "stage": "anneal"}],
            stages=[{"name": "anneal", "tokens": 64 * 300}],
        )  # fmt: skip
    version.refresh_from_db()
    anneal = read_manifest(version.path)["stages"][1]
    first = anneal["first_sample"]
    assert anneal["name"] == "anneal" and first == 1700
    run = run_register(name="small-lm", mixture_version_id=version.pk)
    # 8 samples per step: the anneal's first sample is read at step first // 8 + 1.
    reports = [(100, 800), (200, 1600), (240, 1920)]
    for step, samples in reports:
        run_progress_record(run_id=run.pk, step=step, consumed_samples=samples)
    login("ada", superuser=True)

    page.goto(f"{live_server.url}/runs/{run.pk}/")
    chart = page.locator("#progress-chart .js-plotly-plot")
    chart.wait_for()
    fig = chart.evaluate(FIGURE)
    layout = fig["layout"]
    assert layout["xaxis"]["title"]["text"] == "training step"
    assert fig["data"][0]["x"] == [s for s, _ in reports]
    assert fig["data"][0]["y"] == [n * 64 for _, n in reports]
    boundary = first // 8 + 1
    assert boundary == 213
    notes = [a["text"] for a in layout["annotations"]]
    assert notes == ["budget: 128,000 tokens", f"anneal from step {boundary:,}"]
    vertical = [s for s in layout["shapes"] if s.get("yref") == "paper"]
    assert [(s["x0"], s["x1"]) for s in vertical] == [(boundary, boundary)]
    horizontal = sorted(s["y0"] for s in layout["shapes"] if s.get("xref") == "paper")
    assert horizontal == [first * 64, version.token_budget]
    screenshot("run-progress")

    # A run that has not reached the anneal: its start in tokens, "not reached".
    early = run_register(name="small-lm-early", mixture_version_id=version.pk)
    run_progress_record(run_id=early.pk, step=50, consumed_samples=400)
    page.goto(f"{live_server.url}/runs/{early.pk}/")
    chart.wait_for()
    layout = chart.evaluate(FIGURE)["layout"]
    assert [a["text"] for a in layout["annotations"]] == [
        "budget: 128,000 tokens",
        f"anneal from {first * 64:,} tokens (not reached)",
    ]
    assert not [s for s in layout["shapes"] if s.get("yref") == "paper"]

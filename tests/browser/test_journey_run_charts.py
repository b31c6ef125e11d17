"""Journey: a run's charts on its page. Its progress chart marks where it switched version
(the loss charts did; the progress chart had no such line), and labels on lines that
fall on one spot (two pools whose epochs start at the same step) are set apart instead of
printing over each other."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

GBS = 4  # samples per step
BOXES = """el => Array.from(el.querySelectorAll('.annotation')).map(a => {
  const b = a.getBoundingClientRect(); return {text: a.textContent, box: [b.left, b.top, b.right, b.bottom]}; })"""


def _overlapping(labels: list[dict]) -> list[tuple[str, str]]:
    out = []
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            (l1, t1, r1, b1), (l2, t2, r2, b2) = a["box"], b["box"]
            if l1 < r2 - 1 and l2 < r1 - 1 and t1 < b2 - 1 and t2 < b1 - 1:
                out.append((a["text"], b["text"]))
    return out


def test_the_run_charts_mark_the_switch_and_keep_labels_apart(
    page, live_server, login, jobs_inline, code_pools
):
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
    from webapp.catalog.services.runs import (
        run_losses_record,
        run_progress_record,
        run_register,
        run_switch,
    )  # fmt: skip

    early, late = code_pools["early"], code_pools["late"]
    records = early.num_records + late.num_records
    # Weights in proportion to the pools' records: both pools start each epoch together.
    with jobs_inline():
        version = mixture_version_create(
            mixture_id=mixture_get_or_create(name="epochs").pk,
            token_budget=64 * int(2.5 * records), seed=1,
            components=[{"pool": early.pk, "weight": early.num_records / records},
                        {"pool": late.pk, "weight": late.num_records / records}],
        )  # fmt: skip
    run = run_register(name="epochs-run", mixture_version_id=version.pk)
    last = int(2.2 * records) // GBS
    steps = list(range(10, last, max(1, last // 12)))
    for step in steps:
        run_progress_record(run_id=run.pk, step=step, consumed_samples=step * GBS)
        run_losses_record(run_id=run.pk, step=step, val=[
            {"pool": early.pk, "source": "", "loss": 3.0 - step / (2 * last)},
            {"pool": late.pk, "source": "", "loss": 3.2 - step / (2 * last)}])  # fmt: skip
    with jobs_inline():
        switched = run_switch(run_id=run.pk, weights={early.pk: 0.3, late.pk: 0.7})
    v2 = switched["version"]

    login("ada", superuser=True)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    charts = page.locator(".js-plotly-plot")
    charts.first.wait_for()
    figures = charts.evaluate_all("els => els.map(el => ({layout: el.layout}))")
    progress = next(f for f in figures if "Progress" in f["layout"]["title"]["text"])
    texts = [a["text"] for a in progress["layout"]["annotations"]]
    assert f"switch to v{v2.number} after step {steps[-1]:,}" in texts, texts
    assert any(sh["x0"] == steps[-1] and sh["line"]["dash"] == "dash"
               for sh in progress["layout"]["shapes"])  # fmt: skip

    by_step = charts.nth(
        next(i for i, f in enumerate(figures) if "by step" in f["layout"]["title"]["text"])
    )
    labels = by_step.evaluate(BOXES)
    epochs = [lab for lab in labels if "epoch" in lab["text"]]
    assert {"code-early epoch 2", "code-late epoch 2"} <= {lab["text"] for lab in epochs}, labels
    assert _overlapping(labels) == [], _overlapping(labels)


# CIELAB of an sRGB colour, optionally through a colour-vision-deficiency simulation
# (Machado, Oliveira and Fernandes 2009, severity 1).
DEUTERANOPIA = ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413),
                (-0.011820, 0.042940, 0.968881))  # fmt: skip
PROTANOPIA = ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216),
              (-0.003882, -0.048116, 1.051998))  # fmt: skip


def _lab(colour: str, vision=None) -> tuple[float, float, float]:
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    rgb = [linear(int(colour[i : i + 2], 16) / 255) for i in (1, 3, 5)]
    if vision:
        rgb = [min(1.0, max(0.0, sum(m * v for m, v in zip(row, rgb, strict=True))))
               for row in vision]  # fmt: skip
    r, g, b = rgb
    xyz = (0.4124 * r + 0.3576 * g + 0.1805 * b, 0.2126 * r + 0.7152 * g + 0.0722 * b,
           0.0193 * r + 0.1192 * g + 0.9505 * b)  # fmt: skip

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = (f(v / n) for v, n in zip(xyz, (0.95047, 1.0, 1.08883), strict=True))
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def test_the_quality_chart_colours_stay_apart_for_colour_blind_readers(
    page, live_server, login, jobs_inline, code_pools
):
    """Each pool's line on the version's quality chart differs from every other by at
    least 15 (CIELAB delta E) to normal, deuteranope and protanope eyes; three pools named
    books, math and github were red, grey and pink (4 apart to a deuteranope)."""
    import math

    from webapp.catalog.models import Pool
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create

    names = {"early": "books", "middle": "math", "late": "github"}
    for key, name in names.items():
        Pool.objects.filter(pk=code_pools[key].pk).update(name=name)
    with jobs_inline():
        version = mixture_version_create(
            mixture_id=mixture_get_or_create(name="colours").pk, token_budget=64 * 900,
            seed=1, components=[{"pool": code_pools[k].pk, "weight": 1.0} for k in names],
        )  # fmt: skip
    login("ada", superuser=True)
    page.goto(f"{live_server.url}/mixtures/versions/{version.pk}/")
    chart = page.locator("#version-quality .js-plotly-plot")
    chart.wait_for()
    traces = chart.evaluate("el => el.data.map(t => [t.name, (t.line || {}).color])")
    colours = {n: c for n, c in traces if n in names.values()}
    assert set(colours) == set(names.values()), traces
    for vision in (None, DEUTERANOPIA, PROTANOPIA):
        labs = {n: _lab(c, vision) for n, c in colours.items()}
        closest = min(math.dist(labs[a], labs[b]) for a in labs for b in labs if a < b)
        assert closest >= 15, (vision, colours, closest)

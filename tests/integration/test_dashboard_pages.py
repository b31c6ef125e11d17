# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Every dashboard page renders for a viewer, with the catalog's real content on it."""

import re

import pytest

from tests.integration.dashboard_fixtures import catalog, computed, login, users  # noqa: F401

pytestmark = pytest.mark.django_db


def test_it_shows_counts_running_jobs_runs_and_taint_on_the_overview(login, catalog):
    resp = login("viewer").get("/")
    assert resp.status_code == 200
    body = resp.content.decode()
    assert "Overview" in body
    assert "tokenize wiki" in body  # the running job
    assert "olmo-tiny-a" in body  # the recent run
    assert "license unclear" in body  # the taint's flag


def test_it_lists_sources_and_shows_a_source_with_its_bad_input(login, catalog):
    c = login("viewer")
    assert "wiki" in c.get("/sources/").content.decode()
    body = c.get(f"/sources/{catalog['source'].pk}/").content.decode()
    assert "part-0.jsonl:4: {not json" in body
    assert "tiktoken:gpt2" in body
    assert "plotly.min.js" in body
    # Viewers see no write buttons.
    assert "Rescan" not in body


def test_it_shows_a_pool_with_quality_charts_and_its_users(login, catalog, tmp_path, computed):
    from django.core.cache import cache

    from tests.unit import mix_fixtures
    from webapp.catalog.models import Pool

    cache.clear()
    built = mix_fixtures.build_pools(tmp_path / "built", seq_len=32)["early"]
    Pool.objects.filter(pk=catalog["pool"].pk).update(path=str(built))
    body = computed(login("viewer"), f"/pools/{catalog['pool'].pk}/").content.decode()
    assert "wiki-2048" in body
    assert "base-mix v1" in body
    assert "worst label" in body  # the window deviation chart's data
    assert '"heatmap"' in body


def test_it_lists_pools_and_mixtures(login, catalog):
    c = login("viewer")
    assert "wiki-2048" in c.get("/pools/").content.decode()
    assert "base-mix" in c.get("/mixtures/").content.decode()
    assert "v1" in c.get(f"/mixtures/{catalog['mixture'].pk}/").content.decode()


def test_it_shows_a_mixture_version_with_runs_and_lineage(login, catalog):
    body = login("viewer").get(f"/mixtures/versions/{catalog['version'].pk}/").content.decode()
    assert "olmo-tiny-a" in body
    assert "wiki-2048" in body
    assert "Lineage" in body


def test_it_downloads_a_mixture_version_as_json(login, catalog):
    resp = login("viewer").get(f"/mixtures/versions/{catalog['version'].pk}/version.json")
    assert resp.status_code == 200
    assert "attachment" in resp["Content-Disposition"]
    doc = resp.json()
    assert doc["components"][0]["pool"] == "wiki-2048"
    assert doc["token_budget"] == 1_000_000


def test_it_lists_jobs_filtered_by_state(login, catalog):
    c = login("viewer")
    assert "tokenize wiki" in c.get("/jobs/?state=active").content.decode()
    assert "tokenize wiki" not in c.get("/jobs/?state=failed").content.decode()
    # Each state once in the filter: "active" (queued or running), then the job states.
    states = c.get("/jobs/").context["states"]
    assert states == ["active", "queued", "running", "succeeded", "failed", "cancelled"]


def test_it_shows_a_job_and_its_live_progress_document(login, catalog):
    c = login("viewer")
    job = catalog["job"]
    body = c.get(f"/jobs/{job.pk}/").content.decode()
    assert "part-1.jsonl" in body and "created: 3 unit(s)" in body
    p = c.get(f"/jobs/{job.pk}/progress.json").json()
    assert p["state"] == "running"
    assert (p["units_done"], p["units_total"]) == (1, 3)
    assert p["unit_counts"]["running"] == 1 and p["unit_counts"]["queued"] == 1
    assert p["tokens_per_second"] > 0
    assert [u["unit_id"] for u in p["units"]] == ["part-0.jsonl", "part-1.jsonl", "part-2.jsonl"]


def test_it_shows_runs_with_progress_and_taint(login, catalog):
    c = login("viewer")
    assert "tainted" in c.get("/runs/").content.decode()
    body = c.get(f"/runs/{catalog['run'].pk}/").content.decode()
    assert "olmo-tiny-a" in body
    assert "tainted" in body
    assert "2 report(s)" in body


def test_it_audits_a_source_down_to_runs(login, catalog):
    body = login("viewer").get("/audit/?source=wiki").content.decode()
    assert re.search(
        r"In 1 pool: <a href=\"/pools/\d+/\">[\w-]+</a>; 1 mixture version; 1 run\.", body
    )
    assert "olmo-tiny-a" in body
    assert "Flag this" not in body  # viewers cannot flag


def test_it_reports_an_unknown_source_in_the_audit(login, catalog):
    body = login("viewer").get("/audit/?source=nope").content.decode()
    assert "no source named" in body


def test_it_shows_what_a_flag_taints(login, catalog):
    body = login("viewer").get(f"/audit/flags/{catalog['flag'].pk}/").content.decode()
    assert "license unclear" in body
    assert "run olmo-tiny-a" in body


def test_it_answers_404_for_a_missing_object(login, catalog):
    c = login("viewer")
    for path in (
        "/sources/999/", "/pools/999/", "/runs/999/", "/jobs/999/", "/audit/flags/999/",
        "/mixtures/999/", "/mixtures/versions/999/", "/mixtures/versions/999/version.json",
        f"/mixtures/versions/{catalog['version'].pk}/diff/999/", "/exports/999/download/",
    ):  # fmt: skip
        assert c.get(path).status_code == 404, path


def test_it_audits_a_file_and_keeps_pools_it_cannot_clear(login, catalog):
    from webapp.catalog.models import TokenizedSource

    # The tokenized source knows the file's documents; the pool's document list is missing,
    # so the audit cannot rule the pool out and lists it.
    TokenizedSource.objects.filter(pk=catalog["tokenized"].pk).update(
        params={"file_ranges": {"part-0.jsonl": [0, 3]}}
    )
    body = login("viewer").get("/audit/?source=wiki&file_path=part-0.jsonl").content.decode()
    assert re.search(
        r"In 1 pool: <a href=\"/pools/\d+/\">[\w-]+</a>; 1 mixture version; 1 run\.", body
    )
    body = login("viewer").get("/audit/?source=wiki&file_path=other.jsonl").content.decode()
    assert "has no file" in body


def test_it_downloads_trainer_configs_of_a_built_mixture(login, catalog, tmp_path):
    from shardcore.mixture import MixtureSpec, build_mixture
    from tests.unit import mix_fixtures
    from webapp.catalog.models import Export, MixtureVersion

    pools = mix_fixtures.build_pools(tmp_path / "built", seq_len=32)
    spec = {
        "tokens": 32 * 500,
        "components": [{"pool": str(p), "weight": 1} for p in pools.values()],
    }
    out = tmp_path / "built" / "mixture"
    build_mixture(MixtureSpec.from_dict(spec), out)
    MixtureVersion.objects.filter(pk=catalog["version"].pk).update(
        path=str(out), manifest_path=str(out / "manifest.json")
    )
    c = login("viewer")
    base = f"/mixtures/versions/{catalog['version'].pk}/export"
    # A reader's GET writes nothing: Megatron's export (with its index cache) is written by
    # an editor's POST, once, and recorded; then anyone downloads it.
    assert c.get(f"{base}/megatron/").status_code == 404
    assert not Export.objects.exists() and not (out / "exports").exists()
    assert c.post(f"{base}/megatron/").status_code == 403
    editor = login("editor")
    recorded = editor.post(f"{base}/megatron/")
    assert recorded.status_code == 200
    resp = c.get(f"{base}/megatron/")
    assert resp.status_code == 200
    assert 'filename="base-mix-v1-megatron.txt"' in resp["Content-Disposition"]
    text = b"".join(resp.streaming_content).decode()
    assert "--data-path" in text
    assert b"".join(recorded.streaming_content).decode() == text
    export = Export.objects.get(version=catalog["version"], format="megatron")
    assert export.path == str(out / "exports" / "megatron.txt")
    assert editor.post(f"{base}/megatron/").status_code == 200
    assert Export.objects.filter(version=catalog["version"]).count() == 1
    assert "stages" in c.get(f"{base}/json/").content.decode()
    assert c.get(f"{base}/parquet/").status_code == 404
    page = c.get(f"/mixtures/versions/{catalog['version'].pk}/").content.decode()
    assert f"/exports/{export.pk}/download/" in page


def test_it_answers_404_for_exports_before_the_schedule_is_built(login, catalog):
    resp = login("viewer").get(f"/mixtures/versions/{catalog['version'].pk}/export/olmo/")
    assert resp.status_code == 404


def test_it_measures_a_built_pool_and_compares_the_four_shuffles(
    login, catalog, tmp_path, computed
):
    from django.core.cache import cache

    from tests.unit import mix_fixtures
    from webapp.catalog.models import Pool

    cache.clear()
    built = mix_fixtures.build_pools(tmp_path / "built", seq_len=32)["early"]
    Pool.objects.filter(pk=catalog["pool"].pk).update(path=str(built), params={})
    body = computed(login("viewer"), f"/pools/{catalog['pool'].pk}/").content.decode()
    # One panel per shuffle, each with the ideal bound, on real stdlib documents (the
    # figure JSON is embedded with "<" escaped).
    for name in ("exact", "grid", "local", "buffer"):
        assert f"\\u003Cb\\u003E{name}\\u003C/b\\u003E" in body
    assert "i.i.d. bound (sample level)" in body
    assert "worst label" in body
    assert "perfect shuffle (8 simulations)" in body
    assert 'id="quality-verdict"' in body and "of a perfect shuffle at" in body


def test_it_shows_a_tainted_materialized_copy_on_the_overview_and_the_flag_page(login, catalog):
    from webapp.catalog.models import ArtifactStatus, Export, Taint

    copy = Export.objects.create(
        version=catalog["version"], format=Export.Format.MATERIALIZED, path="/tmp/copy",
        status=ArtifactStatus.READY,
    )  # fmt: skip
    Taint.objects.create(flag=catalog["flag"], export=copy, documents=3)
    c = login("viewer")
    label = f"materialized copy of {catalog['version']}"
    assert label in c.get("/").content.decode()
    assert label in c.get(f"/audit/flags/{catalog['flag'].pk}/").content.decode()


def test_it_draws_a_built_versions_stages_in_schedule_order_and_width(login, catalog, tmp_path):
    """A main stage and a 10% anneal: the page's numbers are the built schedule's (tokens
    per pool, stage places and widths), not the weights spread over the whole budget."""
    from shardcore.mixture import build_mixture
    from tests.unit import mix_fixtures
    from webapp.catalog.models import MixtureComponent, MixtureVersion, Pool

    paths = mix_fixtures.build_pools(tmp_path, seq_len=64)
    pools = {
        name: Pool.objects.create(name=f"code-{name}", seq_len=64, path=str(path), num_tokens=1)
        for name, path in paths.items()
    }
    budget, anneal = 64 * 3000, 64 * 300
    spec = {
        "components": [{"pool": str(paths["early"]), "weight": 0.5},
                       {"pool": str(paths["late"]), "weight": 0.5}],
        "tokens": budget, "seed": 1,
        "stages": [{"name": "anneal", "tokens": anneal,
                    "components": [{"pool": str(paths["middle"]), "weight": 1.0}]}],
    }  # fmt: skip
    manifest = build_mixture(spec, tmp_path / "version")
    version = MixtureVersion.objects.create(
        mixture=catalog["version"].mixture, number=2, token_budget=budget,
        path=str(tmp_path / "version"), num_samples=manifest["num_samples"],
    )  # fmt: skip
    for name, stage in (("early", "main"), ("late", "main"), ("middle", "anneal")):
        MixtureComponent.objects.create(version=version, pool=pools[name], weight=1.0, stage=stage)

    page = login("viewer").get(f"/mixtures/versions/{version.pk}/")
    assert page.status_code == 200
    bars = page.context["epochs_figure"]["data"][0]
    built = {p["path"]: p["tokens"] for p in manifest["pools"]}
    assert dict(zip(bars["x"], bars["y"], strict=True)) == {
        pools[n].name: built[str(paths[n])] for n in paths
    }
    assert sum(bars["y"]) == manifest["num_tokens"]
    fig = page.context["heatmap_figure"]
    names = [a["text"] for a in fig["layout"]["annotations"]]
    assert names == ["main", "anneal"]  # schedule order: the anneal comes last
    by_pool = {t["name"]: t for t in fig["data"]}
    main, last = manifest["stages"]
    assert by_pool["code-middle"]["width"] == [main["num_tokens"], last["num_tokens"]]
    assert last["num_tokens"] == anneal and main["num_tokens"] == budget - anneal
    assert by_pool["code-middle"]["x"][1] == budget - anneal / 2  # centred in the last tenth
    assert by_pool["code-middle"]["y"] == [0.0, 1.0]
    early = by_pool["code-early"]["y"][0] + by_pool["code-late"]["y"][0]
    assert early == pytest.approx(1.0)


def test_it_says_where_a_materialized_copy_is_and_its_snippet_streams_it(login, catalog, tmp_path):
    """No dead download link for a directory: its location, and a loader snippet that,
    run as shown, streams the copy's samples in training order."""
    import html
    import re

    import numpy as np

    from shardcore.materialize import materialize
    from shardcore.mixture import Mixture, build_mixture
    from tests.unit import mix_fixtures
    from webapp.catalog.models import Export

    paths = mix_fixtures.build_pools(tmp_path, seq_len=64)
    spec = {"components": [{"pool": str(paths["early"]), "weight": 1.0}], "tokens": 64 * 200}
    build_mixture(spec, tmp_path / "mix")
    manifest = materialize(tmp_path / "mix", tmp_path / "flat", shard_bytes=8 << 10)
    version = catalog["version"]
    export = Export.objects.create(
        version=version, format="materialized", path=str(tmp_path / "flat"), status="ready",
        num_records=manifest["num_records"],
    )  # fmt: skip
    body = login("viewer").get(f"/mixtures/versions/{version.pk}/").content.decode()
    assert f'href="/exports/{export.pk}/' not in body  # no download link for a directory
    location = re.search(r'data-field="location">([^<]*)<', body).group(1)
    assert html.unescape(location) == str(tmp_path / "flat")
    snippet = html.unescape(re.search(r'data-field="snippet">(.*?)</pre>', body, re.S).group(1))
    scope = {"RANK": 0, "WORLD_SIZE": 1}
    exec(snippet.replace("num_workers=2", "num_workers=0"), scope)
    first = next(iter(scope["loader"]))
    mix = Mixture(tmp_path / "mix")
    got = np.asarray(first["tokens"] if isinstance(first, dict) else first)
    for i in range(len(got)):
        np.testing.assert_array_equal(got[i], mix.tokens(i))


def test_it_explains_a_refusal_on_a_page_of_its_own(login, catalog):
    resp = login("viewer").get("/mixtures/new/")
    assert resp.status_code == 403
    body = resp.content.decode()
    assert "This needs the editor role." in body
    assert "signed in as <strong>viewer</strong> (viewer)" in body
    assert 'href="/"' in body and "<nav>" in body  # the app around it, not a bare page


def test_it_measures_a_pool_by_the_property_a_person_chooses(login, catalog, tmp_path, computed):
    """The quality page offers the pool's own properties; series are the property's values,
    each with one colour wherever it is drawn; length bins read as token ranges."""
    from django.core.cache import cache

    from tests.unit import mix_fixtures
    from webapp.catalog.models import Pool
    from webapp.dashboard.charts import colours_of

    cache.clear()
    built = mix_fixtures.build_pools(tmp_path / "built", seq_len=32)["early"]
    Pool.objects.filter(pk=catalog["pool"].pk).update(path=str(built), params={})
    c = login("viewer")
    page = computed(c, f"/pools/{catalog['pool'].pk}/")
    assert "package" in page.context["properties"] and "kind" in page.context["properties"]
    page = computed(c, f"/pools/{catalog['pool'].pk}/?by=package")
    assert page.context["by"] == "package"
    assert page.context["quality"]["report"]["label"] == "package"
    traces = page.context["deviation_figure"]["data"]
    from shardcore.pool import PoolReader

    packages = set(PoolReader(built).document_values("package").tolist())
    named = {t["name"] for t in traces} - {"worst label"}
    named = {n for n in named if not n.startswith(("perfect shuffle", "i.i.d."))}
    assert named and named <= packages
    colours = colours_of(named)  # one colour each, fixed by the set of labels
    for t in traces:
        if t["name"] in named:
            assert t["line"]["color"] == colours[t["name"]]
    page = computed(c, f"/pools/{catalog['pool'].pk}/?by=length")
    names = [t["name"] for t in page.context["deviation_figure"]["data"]]
    bins = [n for n in names if n.endswith(" tokens")]
    assert bins and all("-" in n for n in bins)
    lows = [int(n.split("-")[0].replace(",", "")) for n in bins]
    assert lows == sorted(lows)  # by value, not as text
    page = c.get(f"/pools/{catalog['pool'].pk}/?by=__nope")  # unknown: the default
    assert page.status_code == 200 and page.context["by"] == ""

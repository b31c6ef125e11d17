# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""The mixture builder: live predictions from plan_epochs, warnings, saving a version."""

import json

import pytest

from tests.integration.dashboard_fixtures import catalog, login, stdlib_pools, users  # noqa: F401
from webapp.catalog import builder

pytestmark = pytest.mark.django_db


def _draft(catalog, **extra):
    return {
        "name": "wiki-only",
        "tokens": 2048 * 100,
        "rows": [{"stage": "main", "pool": catalog["pool"].pk, "weight": 1}],
        **extra,
    }


def test_it_shows_the_builder_to_editors_only(login, catalog):
    assert login("viewer").get("/mixtures/new/").status_code == 403
    body = login("editor").get("/mixtures/new/").content.decode()
    assert "wiki-2048" in body and "builder.js" in body


def test_it_predicts_tokens_and_epochs_and_warns_about_repetition(login, catalog):
    c = login("editor")
    resp = c.post("/mixtures/new/predict.json", _draft(catalog), content_type="application/json")
    p = resp.json()
    assert p["error"] is None
    row = p["rows"][0]
    # 100 samples from a pool of 40 records: 2.5 epochs.
    assert (row["pool"], row["samples"], row["tokens"], row["epochs"]) == (
        "wiki-2048", 100, 100 * 2048, 2.5
    )  # fmt: skip
    assert p["warnings"] == ["wiki-2048 repeats: 2.50 epochs"]
    p = c.post(
        "/mixtures/new/predict.json",
        _draft(catalog, max_repetitions=2),
        content_type="application/json",
    ).json()
    assert "above max_repetitions=2" in p["warnings"][0]
    assert p["epochs_figure"]["data"][1]["marker"]["color"] == ["#c0392b"]


def test_it_explains_a_draft_it_cannot_plan(login, catalog):
    c = login("editor")
    p = c.post(
        "/mixtures/new/predict.json", _draft(catalog, tokens=0), content_type="application/json"
    ).json()
    assert p["error"].startswith("tokens: 0 is outside the allowed range [1, ")
    p = c.post(
        "/mixtures/new/predict.json", {"tokens": 10, "rows": []}, content_type="application/json"
    ).json()
    assert p["error"] == "add at least one pool to the main stage"


def test_it_refuses_predictions_and_saves_to_viewers(login, catalog):
    c = login("viewer")
    body = json.dumps(_draft(catalog))
    assert c.post("/mixtures/new/predict.json", body, "application/json").status_code == 403
    assert c.post("/mixtures/new/save/", body, "application/json").status_code == 403


def test_it_saves_the_next_immutable_version(login, catalog):
    from webapp.catalog.models import MixtureVersion

    c = login("editor")
    resp = c.post(
        "/mixtures/new/save/", _draft(catalog, name="base-mix"), content_type="application/json"
    )
    assert resp.status_code == 200, resp.content
    v = MixtureVersion.objects.get(mixture__name="base-mix", number=2)
    assert resp.json()["url"] == f"/mixtures/versions/{v.pk}/"
    assert v.token_budget == 2048 * 100
    assert [(c.pool_id, c.weight) for c in v.components.all()] == [(catalog["pool"].pk, 1.0)]


def test_it_flattens_nested_groups_into_shares():
    from shardcore.mixture import MixtureSpec, flatten

    spec = builder.spec_from_rows(
        rows=[
            {"pool": 1, "weight": 0.8, "group": "prose", "group_weight": 0.7},
            {"pool": 2, "weight": 0.2, "group": "prose"},
            {"pool": 3, "weight": 0.3},
            {"pool": 1, "weight": 1, "stage": "anneal"},
        ],
        stages=[{"name": "anneal", "tokens": 2048 * 10}],
        tokens=2048 * 100,
    )
    assert spec["components"][0] == {
        "name": "prose", "weight": 0.7,
        "components": [{"pool": "1", "weight": 0.8}, {"pool": "2", "weight": 0.2}],
    }  # fmt: skip
    parsed = MixtureSpec.from_dict(spec)
    shares = {
        (stage, int(pool)): round(share, 6)
        for stage, comps in parsed.stage_components()
        for pool, share in flatten(comps)
    }
    assert shares == {("main", 1): 0.56, ("main", 2): 0.14, ("main", 3): 0.3, ("anneal", 1): 1.0}


def test_it_predicts_stages_without_a_database():
    spec = builder.spec_from_rows(
        rows=[{"pool": 1, "weight": 1}, {"pool": 2, "weight": 1}, {"pool": 2, "weight": 1, "stage": "anneal"}],
        stages=[{"name": "anneal", "tokens": 2048 * 20}],
        tokens=2048 * 100,
    )  # fmt: skip
    pools = {
        1: {"name": "web", "num_records": 1000, "seq_len": 2048},
        2: {"name": "wiki", "num_records": 1000, "seq_len": 2048},
    }
    p = builder.predict(spec, pools)
    by = {r["pool"]: r for r in p["rows"]}
    assert by["web"]["stages"] == {"main": 40, "anneal": 0}
    assert by["wiki"]["stages"] == {"main": 40, "anneal": 20}
    assert p["stages"] == ["main", "anneal"]


def test_it_refuses_a_later_stage_without_tokens():
    with pytest.raises(builder.BuilderError, match="stage 'anneal': give its token count"):
        builder.spec_from_rows(
            rows=[{"pool": 1, "weight": 1}, {"pool": 1, "weight": 1, "stage": "anneal"}],
            tokens=1000,
        )


def test_it_refuses_to_save_a_version_that_repeats_a_pool_beyond_the_cap(login, catalog):
    from webapp.catalog.models import MixtureVersion

    resp = login("editor").post(
        "/mixtures/new/save/",
        _draft(catalog, name="too-much", max_repetitions=2),
        content_type="application/json",
    )
    assert resp.status_code == 400
    assert "above max_repetitions=2" in resp.json()["error"]
    assert not MixtureVersion.objects.filter(mixture__name="too-much").exists()


def test_it_saves_the_anneal_stage_and_the_diversity_order_into_the_schedule(
    login, stdlib_pools, jobs_inline
):
    from shardcore.mixture import Mixture
    from webapp.catalog.models import MixtureVersion

    p = stdlib_pools
    draft = {
        "name": "stdlib-anneal",
        "tokens": 32 * 3000,
        "order": "diversity",
        "order_options": {"by": ["package"]},
        "rows": [
            {"pool": p["early"].pk, "weight": 1},
            {"pool": p["late"].pk, "weight": 1},
            {"pool": p["middle"].pk, "weight": 1, "stage": "anneal"},
        ],
        "stages": [{"name": "anneal", "tokens": 32 * 500}],
    }
    with jobs_inline():
        resp = login("editor").post("/mixtures/new/save/", draft, content_type="application/json")
    assert resp.status_code == 200, resp.content
    version = MixtureVersion.objects.get(mixture__name="stdlib-anneal")
    assert resp.json() == {"url": f"/mixtures/versions/{version.pk}/", "job": version.job_id}
    assert version.status == "ready", version.job.error
    mix = Mixture(version.path)
    manifest = mix.manifest
    assert manifest["order"] == "diversity"
    assert manifest["spec"]["order_options"] == {"by": ["package"]}
    # The anneal stage takes the last 500 of 3000 samples, all from the middle pool.
    stages = {s["name"]: s for s in manifest["stages"]}
    assert (stages["main"]["first_sample"], stages["main"]["num_samples"]) == (0, 2500)
    assert (stages["anneal"]["first_sample"], stages["anneal"]["num_samples"]) == (2500, 500)
    keys = [pool["path"] for pool in manifest["pools"]]
    middle = keys.index(p["middle"].path)
    assert (mix.pool_index[2500:] == middle).all()
    assert not (mix.pool_index[:2500] == middle).any()
    # The catalog row records the same schedule.
    assert [s["name"] for s in version.params["stages"]] == ["main", "anneal"]
    assert {(c.pool_id, c.stage) for c in version.components.all()} == {
        (p["early"].pk, "main"), (p["late"].pk, "main"), (p["middle"].pk, "anneal")
    }  # fmt: skip


def test_it_refuses_order_options_it_cannot_build(login, stdlib_pools):
    draft = {
        "name": "stdlib-bad",
        "tokens": 32 * 100,
        "order": "diversity",
        "rows": [{"pool": stdlib_pools["early"].pk, "weight": 1}],
    }
    c = login("editor")
    for options, message in [
        ({"by": "package"}, "'by' lists document property names"),
        ({"colour": 1}, "unknown ['colour']"),
        ({"lambda": {"pool": -1}}, "weights >= 0"),
    ]:
        resp = c.post(
            "/mixtures/new/save/", {**draft, "order_options": options}, "application/json"
        )
        assert resp.status_code == 400 and message in resp.json()["error"], options


def test_it_refuses_a_budget_whose_schedule_would_not_fit_before_allocating(login, catalog):
    c = login("editor")
    draft = _draft(catalog, tokens=10**15, max_repetitions=1e12)
    p = c.post("/mixtures/new/predict.json", draft, content_type="application/json").json()
    assert "schedule" in (p["error"] or "") and "SHARDYARD_MAX_SCHEDULE_SAMPLES" in p["error"]
    resp = c.post("/mixtures/new/save/", draft, content_type="application/json")
    assert resp.status_code == 400
    assert "SHARDYARD_MAX_SCHEDULE_SAMPLES" in resp.json()["error"]


def test_it_shows_the_build_job_on_the_version_page_until_the_schedule_is_recorded(
    login, stdlib_pools, jobs_inline
):
    from webapp.catalog.models import MixtureVersion

    c = login("editor")
    draft = {"name": "stdlib-wait", "tokens": 32 * 300,
             "rows": [{"pool": stdlib_pools["early"].pk, "weight": 1}]}  # fmt: skip
    url = c.post("/mixtures/new/save/", draft, content_type="application/json").json()["url"]
    version = MixtureVersion.objects.get(mixture__name="stdlib-wait")
    assert version.status == "building" and version.job.state == "queued"
    page = c.get(url).content.decode()
    assert "Building the schedule" in page and f"/jobs/{version.job_id}/progress.json" in page
    # The job runs (here in this process): the page is the built version.
    from webapp.jobs.services import _send_units

    with jobs_inline():
        _send_units(version.job_id, list(version.job.units.values_list("pk", flat=True)))
    version.refresh_from_db()
    assert version.status == "ready" and version.num_samples == 300
    page = c.get(url).content.decode()
    assert "Building the schedule" not in page and "300" in page


def test_it_shows_why_a_build_failed_and_a_save_of_the_same_draft_runs_it_again(
    login, stdlib_pools, jobs_inline, tmp_path
):
    import shutil

    from webapp.catalog.models import MixtureVersion

    c = login("editor")
    pool = stdlib_pools["late"]
    draft = {"name": "stdlib-gone", "tokens": 32 * 300, "rows": [{"pool": pool.pk, "weight": 1}]}
    # The pool's files are moved away after the request checked the catalog: the worker
    # cannot read them, and the job says so.
    kept = tmp_path / "kept"
    shutil.move(pool.path, kept)
    with jobs_inline():
        url = c.post("/mixtures/new/save/", draft, content_type="application/json").json()["url"]
    version = MixtureVersion.objects.get(mixture__name="stdlib-gone")
    assert (version.status, version.job.state) == ("failed", "failed")
    page = c.get(url).content.decode()
    assert "The build failed" in page and "unknown pool" in version.job.error
    assert "unknown pool" in page
    # Saved again once the files are back: the same version is built, no second one.
    shutil.move(kept, pool.path)
    with jobs_inline():
        again = c.post("/mixtures/new/save/", draft, content_type="application/json").json()
    assert again["url"] == url
    version.refresh_from_db()
    assert version.status == "ready", version.job.error
    assert MixtureVersion.objects.filter(mixture__name="stdlib-gone").count() == 1

"""Item: the API's edges, over HTTP as an attacker reached them. A body nested thousands of
levels deep answered 500 (RecursionError) and is a 400 on every endpoint; the OpenAPI
schema was public and needs a login or a token; an id above 2^63 answered Django's HTML
404 page and is a JSON 404; any editor could switch anyone's run while its owner (a
trainer) got 403, and now only the owner, its team or an admin switch it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from webapp.catalog.models import MixtureVersion, TrainingRun


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


POSTS = [
    "/api/sources/",
    "/api/pools/",
    "/api/mixtures/",
    "/api/flags/",
    "/api/runs/",
    "/api/runs/{run}/progress/",
    "/api/runs/{run}/losses/",
    "/api/runs/{run}/switch/",
    "/api/sources/{source}/tokenize/",
    "/api/mixture-versions/{version}/exports/",
    "/api/mixture-versions/{version}/materialize/",
]


@pytest.mark.parametrize("path", POSTS)
@pytest.mark.parametrize("depth", [100_000, 40])
def test_a_deeply_nested_body_is_a_400_on_every_endpoint(api, catalog, path, depth):
    url = path.format(run=catalog["run"].pk, source=catalog["source"].pk,
                      version=catalog["version"].pk)  # fmt: skip
    before = (TrainingRun.objects.count(), MixtureVersion.objects.count())
    resp = api("admin").generic("POST", url, _nested(depth), content_type="application/json")
    assert resp.status_code == 400, (resp.status_code, resp.content[:300])
    assert "nested deeper than 32 levels" in resp.json()["detail"]
    assert (TrainingRun.objects.count(), MixtureVersion.objects.count()) == before


def test_a_body_of_ordinary_depth_still_parses(api, catalog):
    run = catalog["run"]
    resp = api("editor").post(f"/api/runs/{run.pk}/progress/",
                              {"step": 30, "consumed_samples": 120}, "json")  # fmt: skip
    assert resp.status_code == 201, resp.content


def test_the_schema_needs_a_login_or_a_token(api, page, catalog):
    anonymous = api(None).get("/api/schema/")
    assert anonymous.status_code == 401
    assert b"openapi" not in anonymous.content
    assert api("viewer").get("/api/schema/").status_code == 200
    assert b"openapi" in page("viewer").get("/api/schema/").content


@pytest.mark.parametrize(
    "path",
    [
        f"/api/runs/{2**63}/",
        f"/api/runs/{2**64 + 5}/progress/",
        "/api/pools/99999999999999999999999/",
        f"/api/mixture-versions/{2**63 - 1}/",  # a bigint, no such row
        "/api/sources/1e3/",
        "/api/jobs/-1/",
        "/api/no-such-collection/",
    ],
)
def test_an_id_that_is_no_row_or_no_bigint_is_a_json_404(api, catalog, path):
    resp = api("viewer").get(path)
    assert resp.status_code == 404
    assert resp["Content-Type"].startswith("application/json"), resp.content[:200]
    assert "detail" in resp.json()
    assert b"<html" not in resp.content.lower()


def _switch(c, run):
    pool = run.mixture_version.components.first().pool
    return c.post(f"/api/runs/{run.pk}/switch/", {"weights": [{"pool": pool.pk, "weight": 1}]},
                  "json")  # fmt: skip


def test_another_editor_cannot_switch_a_run_it_does_not_own(api, catalog):
    run = catalog["run"]  # the editor's
    for who in ("editor2", "trainer"):
        resp = _switch(api(who), run)
        assert resp.status_code == 403, resp.content
        assert "belongs to another user" in resp.json()["detail"]
    run.refresh_from_db()
    assert run.mixture_version_id == catalog["version"].pk and not run.segments.exists()


def test_the_owner_with_the_trainer_role_and_its_team_may_switch(api, users, catalog):
    """Past the permission check: the catalog's version has no built schedule, so the
    switch itself is refused with the reason (400), not with 403 (the full switch by a
    trainer is test_run_switch's)."""
    run = catalog["run"]
    run.created_by = users["trainer"]
    run.save()
    assert _switch(api("editor"), run).status_code == 403  # no longer the editor's
    for who in ("trainer", "admin"):
        resp = _switch(api(who), run)
        assert resp.status_code == 400, resp.content
        assert "no built schedule" in resp.json()["detail"]
    team = Group.objects.create(name="switch-team")
    users["editor2"].groups.add(team)
    run.team = team
    run.save()
    assert _switch(api("editor2"), run).status_code == 400
    assert _switch(api("viewer"), run).status_code == 403


@pytest.mark.parametrize("path", ["/mixtures/new/predict.json", "/mixtures/new/save/"])
def test_the_builders_json_endpoints_take_a_deep_body_without_a_500(page, catalog, path):
    resp = page("editor").generic("POST", path, _nested(100_000), content_type="application/json")
    assert resp.status_code < 500, resp.content[:300]
    assert MixtureVersion.objects.count() == 1  # the fixture's

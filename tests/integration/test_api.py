# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""The JSON API: token auth, roles (viewer reads, editor writes), and each resource."""

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.integration.dashboard_fixtures import catalog, users, write_pool_manifest  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(users):
    def as_role(role: str | None) -> APIClient:
        c = APIClient()
        if role:
            c.credentials(
                HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=users[role])[0].key}"
            )
        return c

    return as_role


def test_it_answers_401_without_a_token(api, catalog):
    resp = api(None).get("/api/runs/")
    assert resp.status_code == 401
    assert resp["WWW-Authenticate"] == "Token"


def test_it_answers_401_for_a_wrong_token(catalog):
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef0123456789abcdef01234567")
    assert c.get("/api/sources/").status_code == 401


def test_it_stops_accepting_a_revoked_token(api, users, catalog):
    c = api("viewer")
    assert c.get("/api/sources/").status_code == 200
    Token.objects.filter(user=users["viewer"]).delete()
    assert c.get("/api/sources/").status_code == 401


@pytest.mark.parametrize(
    "path",
    ["/api/sources/", "/api/pools/", "/api/mixtures/", "/api/mixture-versions/", "/api/jobs/",
     "/api/runs/", "/api/flags/", "/api/schema/"],
)  # fmt: skip
def test_it_lets_a_viewer_read(api, catalog, path):
    assert api("viewer").get(path).status_code == 200


@pytest.mark.parametrize(
    "path,body",
    [
        ("/api/runs/", {"name": "r", "mixture_version": 1}),
        ("/api/sources/", {"name": "s", "uri": "/nowhere"}),
        ("/api/flags/", {"source": 1, "reason": "pii"}),
        ("/api/jobs/1/cancel/", {}),
        ("/api/jobs/1/retry/", {}),
        ("/api/sources/1/scan/", {}),
        ("/api/runs/1/progress/", {"step": 1, "consumed_samples": 4}),
    ],
)
def test_it_refuses_writes_to_a_viewer(api, catalog, path, body):
    from webapp.catalog.models import Flag, TrainingRun

    runs, flags = TrainingRun.objects.count(), Flag.objects.count()
    resp = api("viewer").post(path, body, format="json")
    assert resp.status_code == 403
    assert (TrainingRun.objects.count(), Flag.objects.count()) == (runs, flags)


def test_it_reads_a_pool_and_a_mixture_version(api, catalog):
    c = api("viewer")
    pool = c.get(f"/api/pools/{catalog['pool'].pk}/").json()
    assert pool["name"] == "wiki-2048"
    assert pool["parents"] == [catalog["tokenized"].pk]
    v = c.get(f"/api/mixture-versions/{catalog['version'].pk}/").json()
    assert v["components"] == [
        {"pool": catalog["pool"].pk, "pool_name": "wiki-2048", "weight": 1.0, "stage": "main",
         "epochs": None}
    ]  # fmt: skip


def test_it_pages_lists(api, catalog):
    body = api("viewer").get("/api/jobs/?limit=1").json()
    assert body["count"] == 1
    assert body["results"][0]["title"] == "tokenize wiki"
    assert body["results"][0]["units_done"] == 1


def test_it_registers_a_run_idempotently_by_name(api, catalog):
    c = api("editor")
    body = {"name": "llama-small-b", "mixture_version": catalog["version"].pk}
    first = c.post("/api/runs/", body, format="json")
    assert first.status_code == 201
    again = c.post("/api/runs/", body, format="json")
    assert again.json()["id"] == first.json()["id"]


def test_it_taints_a_run_registered_on_a_tainted_version(api, catalog):
    from webapp.catalog.models import Taint

    Taint.objects.create(flag=catalog["flag"], mixture_version=catalog["version"], documents=2)
    run_id = (
        api("editor")
        .post("/api/runs/", {"name": "late", "mixture_version": catalog["version"].pk}, "json")
        .json()["id"]
    )
    assert Taint.objects.filter(run_id=run_id, flag=catalog["flag"]).exists()


def test_it_refuses_a_run_on_a_missing_version(api, catalog):
    resp = api("editor").post("/api/runs/", {"name": "x", "mixture_version": 999}, format="json")
    assert resp.status_code == 400
    assert "no mixture version 999" in resp.json()["detail"]


def test_it_records_progress_once_per_step_and_resumes(api, catalog):
    c = api("editor")
    run = catalog["run"]
    resp = c.post(f"/api/runs/{run.pk}/progress/", {"step": 30, "consumed_samples": 13}, "json")
    assert resp.status_code == 201
    assert resp.json()["consumed_tokens"] == 13 * 2048
    # A retried report of the same step records nothing new.
    c.post(f"/api/runs/{run.pk}/progress/", {"step": 30, "consumed_samples": 99}, "json")
    assert run.progress.filter(step=30).count() == 1
    pos = c.get(f"/api/runs/{run.pk}/resume/").json()
    # 4 shards of 10 records: sample 13 is record 3 of shard 1.
    assert (pos["pool"], pos["shard"], pos["record_in_shard"], pos["epoch"]) == (
        "wiki-2048", 1, 3, 0
    )  # fmt: skip
    assert pos["shard_prefix"].endswith("pool-00001")


def test_it_accepts_tokens_instead_of_samples(api, catalog):
    run = catalog["run"]
    c = api("editor")
    resp = c.post(
        f"/api/runs/{run.pk}/progress/", {"step": 31, "consumed_tokens": 45 * 2048}, "json"
    )
    assert resp.json()["consumed_samples"] == 45
    pos = c.get(f"/api/runs/{run.pk}/resume/").json()
    # 45 samples = one full pass over the 40 records + 5: epoch 1, shard 0, record 5.
    assert (pos["epoch"], pos["shard"], pos["record_in_shard"]) == (1, 0, 5)


def test_it_requires_samples_or_tokens_in_a_report(api, catalog):
    resp = api("editor").post(f"/api/runs/{catalog['run'].pk}/progress/", {"step": 1}, "json")
    assert resp.status_code == 400


def test_it_resumes_a_two_pool_mixture_along_the_blend(api, catalog, tmp_path):
    from webapp.catalog.models import MixtureComponent, Pool, Shard

    other = Pool.objects.create(
        name="code", status="ready", path=str(tmp_path / "code"), seq_len=2048, num_records=100
    )
    Shard.objects.create(pool=other, index=0, prefix=f"{other.path}/pool-00000", num_records=100)
    write_pool_manifest(other, [100])
    version = catalog["version"]
    MixtureComponent.objects.filter(version=version).update(weight=0.5)
    MixtureComponent.objects.create(version=version, pool=other, weight=0.5, stage="main")
    c = api("editor")
    run = catalog["run"]
    c.post(f"/api/runs/{run.pk}/progress/", {"step": 40, "consumed_samples": 5}, "json")
    pos = c.get(f"/api/runs/{run.pk}/resume/").json()
    # Equal weights alternate pools: samples 0..4 were wiki, code, wiki, code, wiki.
    assert (pos["pool"], pos["record"]) == ("code", 2)


def test_it_cancels_a_job_for_an_editor(api, catalog):
    resp = api("editor").post(f"/api/jobs/{catalog['job'].pk}/cancel/")
    assert resp.status_code == 200
    assert resp.json()["state"] == "cancelled"
    again = api("editor").post(f"/api/jobs/{catalog['job'].pk}/cancel/")
    assert again.status_code == 400
    assert "only a queued or running job can be cancelled" in again.json()["detail"]


def test_it_flags_a_file_and_lists_what_it_taints(api, catalog):
    c = api("editor")
    resp = c.post(
        "/api/flags/",
        {"source": catalog["source"].pk, "file_path": "part-0.jsonl", "reason": "contains PII"},
        format="json",
    )
    assert resp.status_code == 201, resp.content
    assert resp.json()["file_path"] == "part-0.jsonl"
    taints = c.get(f"/api/flags/{resp.json()['id']}/taints/").json()
    assert taints["flag"]["reason"] == "contains PII"


def test_it_refuses_a_flag_on_an_unknown_file(api, catalog):
    resp = api("editor").post(
        "/api/flags/",
        {"source": catalog["source"].pk, "file_path": "nope.jsonl", "reason": "x"},
        format="json",
    )
    assert resp.status_code == 400
    assert "has no file" in resp.json()["detail"]


def test_it_answers_audit_queries(api, catalog):
    body = api("viewer").get("/api/audit/?source=wiki").json()
    assert body["mixture_versions"] == [catalog["version"].pk]
    assert [r["name"] for r in body["runs"]] == ["olmo-tiny-a"]
    missing = api("viewer").get("/api/audit/?source=missing")
    assert missing.status_code == 404 and missing.json() == {"detail": "no source named 'missing'"}
    missing = api("viewer").get("/api/flags/999/taints/")
    assert missing.status_code == 404 and missing.json() == {"detail": "no flag 999"}
    assert api("viewer").get("/api/audit/").status_code == 400


def test_it_registers_a_source_under_a_root_and_refuses_one_outside(
    api, catalog, settings, tmp_path
):
    settings.SOURCE_ROOTS = [tmp_path / "sources"]
    c = api("editor")
    ok = c.post(
        "/api/sources/", {"name": "wiki2", "uri": str(tmp_path / "sources" / "wiki")}, "json"
    )
    assert ok.status_code == 201, ok.content
    assert ok.json()["num_documents"] == 3
    assert ok.json()["bad_lines"] == 1
    bad = c.post("/api/sources/", {"name": "etc", "uri": "/etc"}, "json")
    assert bad.status_code == 400
    assert "outside the source roots" in bad.json()["detail"]


def test_it_answers_404_for_progress_of_a_missing_run(api, catalog):
    resp = api("editor").post("/api/runs/999/progress/", {"step": 1, "consumed_samples": 1}, "json")
    assert resp.status_code == 404


def test_it_creates_a_mixture_version_from_a_draft(api, catalog, jobs_inline):
    c = api("editor")
    draft = {
        "name": "wiki-api",
        "tokens": 2048 * 50,
        "rows": [{"pool": catalog["pool"].pk, "weight": 1.0}],
    }
    with jobs_inline():
        resp = c.post("/api/mixtures/", draft, format="json")
    # Accepted: the version exists, building, with its job; Location is where to poll.
    assert resp.status_code == 202, resp.content
    body = resp.json()
    assert (body["number"], body["status"]) == (1, "building") and body["job"]
    assert body["components"][0]["pool_name"] == "wiki-2048"
    assert resp["Location"].endswith(f"/api/mixture-versions/{body['id']}/")
    built = c.get(resp["Location"]).json()
    assert built["status"] == "ready", c.get(f"/api/jobs/{body['job']}/").json()["error"]
    assert (built["num_samples"], built["components"][0]["epochs"]) == (50, 50 / 40)
    assert c.get(f"/api/jobs/{body['job']}/").json()["state"] == "succeeded"
    again = c.post("/api/mixtures/", draft, format="json")
    assert (again.status_code, again.json()["id"]) == (200, body["id"])
    too_much = {**draft, "tokens": 2048 * 1000}  # 1000 samples from 40 records: 25 epochs
    resp = c.post("/api/mixtures/", too_much, format="json")
    assert resp.status_code == 400
    assert "wiki-2048 above max_repetitions=4" in resp.json()["detail"]
    assert api("viewer").post("/api/mixtures/", draft, format="json").status_code == 403
    bad = {**draft, "order": "diversity", "order_options": {"by": [3]}}
    resp = c.post("/api/mixtures/", bad, format="json")
    assert resp.status_code == 400
    assert "'by' lists document property names" in resp.json()["detail"]


def test_it_refuses_a_pool_build_over_unknown_tokenized_sources(api, catalog):
    resp = api("editor").post(
        "/api/pools/", {"name": "p", "tokenized_ids": [999], "seq_len": 2048}, format="json"
    )
    assert resp.status_code == 400


def test_it_records_a_report_in_a_bounded_number_of_queries(
    api, catalog, django_assert_max_num_queries
):
    c = api("editor")
    run = catalog["run"]
    # The token with its user and role, then the run locked (with all the checks read),
    # the report inserted and the run moved forward; the test's savepoint pair around it.
    bound = 6
    with django_assert_max_num_queries(bound):
        resp = c.post(f"/api/runs/{run.pk}/progress/", {"step": 40, "consumed_samples": 7}, "json")
    assert resp.status_code == 201
    assert (resp.json()["last_step"], resp.json()["consumed_tokens"]) == (40, 7 * 2048)
    with django_assert_max_num_queries(bound):
        resp = c.post(f"/api/runs/{run.pk}/progress/", {"step": 41, "consumed_tokens": 9 * 2048 + 5}, "json")  # fmt: skip
    assert resp.json()["consumed_samples"] == 9


def test_it_records_a_run_of_reports_new_retried_out_of_order_and_tokens_only(catalog):
    """From a registered run: a new report moves it, a retried step records nothing, an
    earlier step is recorded without moving it back, tokens alone give the samples."""
    from webapp.catalog.models import TrainingRun
    from webapp.catalog.services.runs import run_progress_record

    run = TrainingRun.objects.create(name="fast", mixture_version=catalog["version"])
    reports = [(5, 10, None), (5, 99, None), (9, 30, None), (7, 20, None), (9, 31, None),
               (12, None, 50 * 2048 + 100), (12, 1, None)]  # fmt: skip
    answers = []
    for step, samples, tokens in reports:
        out = run_progress_record(
            run_id=run.pk, step=step, consumed_samples=samples, consumed_tokens=tokens
        )
        run.refresh_from_db()
        assert (out.last_step, out.state, out.consumed_tokens) == (
            run.last_step,
            run.state,
            run.consumed_tokens,
        )
        answers.append((out.last_step, out.consumed_samples))
    assert answers == [(5, 10), (5, 10), (9, 30), (9, 30), (9, 30), (12, 50), (12, 50)]
    rows = list(run.progress.order_by("step").values_list("step", "consumed_samples", "consumed_tokens"))  # fmt: skip
    assert rows == [(5, 10, 10 * 2048), (7, 20, 20 * 2048), (9, 30, 30 * 2048),
                    (12, 50, 50 * 2048 + 100)]  # fmt: skip
    assert (run.state, run.last_step, run.consumed_samples, run.consumed_tokens) == (
        "running",
        12,
        50,
        50 * 2048 + 100,
    )


def test_it_applies_a_role_change_to_the_next_api_request(api, users, catalog):
    from webapp.dashboard.services import user_role_set

    c = api("viewer")
    url = f"/api/runs/{catalog['run'].pk}/progress/"
    assert c.post(url, {"step": 50, "consumed_samples": 1}, "json").status_code == 403
    user_role_set(user=users["viewer"], role="admin")  # the run is the editor's: admins write any
    assert c.post(url, {"step": 50, "consumed_samples": 1}, "json").status_code == 201
    user_role_set(user=users["viewer"], role="viewer")
    assert c.post(url, {"step": 51, "consumed_samples": 2}, "json").status_code == 403

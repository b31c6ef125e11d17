"""Item: idempotent launches and saves, and no 500s. Double-clicked saves made identical
versions; a concurrent first save of a mixture name answered 500; ``?state=%00`` answered
500; a viewer's GET on an export wrote files and rows."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from tests.security.conftest import tree_digest
from webapp.catalog.models import Export, Mixture, MixtureVersion


def _draft(pools, name="twice", tokens=32 * 300):
    return {
        "name": name,
        "tokens": tokens,
        "rows": [{"pool": pools["early"].pk, "weight": 2}, {"pool": pools["late"].pk, "weight": 1}],
    }


def test_a_double_clicked_save_makes_one_version(page, stdlib_pools):
    c = page("editor")
    first = c.post("/mixtures/new/save/", _draft(stdlib_pools), content_type="application/json")
    again = c.post("/mixtures/new/save/", _draft(stdlib_pools), content_type="application/json")
    assert (first.status_code, again.status_code) == (200, 200)
    assert first.json()["url"] == again.json()["url"]
    assert MixtureVersion.objects.count() == 1
    # Different content is a new version.
    changed = c.post(
        "/mixtures/new/save/", _draft(stdlib_pools, tokens=32 * 301),
        content_type="application/json",
    )  # fmt: skip
    assert changed.status_code == 200
    assert list(MixtureVersion.objects.order_by("number").values_list("number", flat=True)) == [
        1, 2
    ]  # fmt: skip


def test_a_retried_api_save_answers_the_existing_version(api, stdlib_pools):
    c = api("editor")
    first = c.post("/api/mixtures/", _draft(stdlib_pools), format="json")
    again = c.post("/api/mixtures/", _draft(stdlib_pools), format="json")
    assert (first.status_code, again.status_code) == (202, 200)
    assert first.json()["id"] == again.json()["id"]
    assert MixtureVersion.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_first_saves_of_one_name_both_succeed(api, stdlib_pools):
    barrier = threading.Barrier(2)
    answers: list[int] = []

    def save():
        try:
            c = api("editor")
            barrier.wait()
            answers.append(
                c.post("/api/mixtures/", _draft(stdlib_pools), format="json").status_code
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=save) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [200, 202]
    assert Mixture.objects.count() == 1
    assert MixtureVersion.objects.count() == 1


@pytest.mark.parametrize("query", ["?state=%00", "?state=bogus", "?state=%ff%fe"])
def test_a_bad_job_state_filter_is_a_400(api, catalog, query):
    resp = api("viewer").get(f"/api/jobs/{query}")
    assert resp.status_code == 400
    assert "unknown state" in resp.json()["state"]


@pytest.mark.parametrize("query", ["?state=%00", "?page=%00", "?page=99999999999999999999999",
                                   "?page=-3", "?page=x"])  # fmt: skip
def test_the_jobs_page_survives_odd_query_strings(page, catalog, query):
    assert page("viewer").get(f"/jobs/{query}").status_code == 200


@pytest.mark.parametrize("path", ["/sources/", "/pools/", "/mixtures/", "/runs/"])
def test_list_pages_survive_odd_page_numbers(page, catalog, path):
    for query in ("?page=%00", "?page=1e999", "?page=99999999999999999999999"):
        assert page("viewer").get(path + query).status_code == 200


def test_a_viewers_get_of_an_export_writes_nothing(page, stdlib_pools, jobs_inline):
    from webapp.catalog.models import Shard

    editor = page("editor")
    with jobs_inline():
        editor.post("/mixtures/new/save/", _draft(stdlib_pools), content_type="application/json")
    version = MixtureVersion.objects.get()
    before = tree_digest(version.path)
    rows = (Export.objects.count(), Shard.objects.count())
    viewer = page("viewer")
    for fmt in ("olmo", "json"):
        resp = viewer.get(f"/mixtures/versions/{version.pk}/export/{fmt}/")
        assert resp.status_code == 200
        assert resp.content
    # Megatron's and nanotron's exports write files (index cache, view folders): until an
    # editor wrote them, a reader is told to ask one.
    for fmt in ("megatron", "nanotron"):
        resp = viewer.get(f"/mixtures/versions/{version.pk}/export/{fmt}/")
        assert resp.status_code == 404
    assert viewer.get(f"/mixtures/versions/{version.pk}/version.json").status_code == 200
    assert viewer.get(f"/mixtures/versions/{version.pk}/").status_code == 200
    assert tree_digest(version.path) == before
    assert (Export.objects.count(), Shard.objects.count()) == rows
    # Writing the export is an editor's POST, and refused to a viewer.
    assert viewer.post(f"/mixtures/versions/{version.pk}/export/json/").status_code == 403
    assert Export.objects.count() == rows[0]


def test_tokenize_three_times_makes_one_job(page, catalog, roots):
    from webapp.catalog.models import TokenizedSource
    from webapp.jobs.models import Job

    c = page("editor")
    jobs = Job.objects.count()
    answers = [
        c.post(f"/sources/{catalog['source'].pk}/tokenize/", {"tokenizer": ""}) for _ in range(3)
    ]
    assert {a.status_code for a in answers} == {302}
    assert len({a["Location"] for a in answers}) == 1  # the one job's page, three times
    assert Job.objects.count() == jobs + 1
    assert TokenizedSource.objects.filter(status="building").count() == 1


def test_a_pool_build_three_times_makes_one_pool(api, tokenized):
    from webapp.catalog.models import Pool
    from webapp.jobs.models import Job

    c = api("editor")
    body = {"name": "thrice", "tokenized_ids": [tokenized.pk], "seq_len": 64,
            "filter": "n_tokens > 10"}  # fmt: skip
    ids = {c.post("/api/pools/", body, format="json").json()["id"] for _ in range(3)}
    assert len(ids) == 1
    assert Pool.objects.filter(name="thrice").count() == 1
    assert Job.objects.filter(kind="pool").count() == 1
    # Other parameters are another pool, which needs a name of its own.
    taken = c.post("/api/pools/", {**body, "seed": 1}, format="json")
    assert taken.status_code == 400 and "pool name" in taken.json()["detail"]
    other = c.post("/api/pools/", {**body, "seed": 1, "name": "thrice-1"}, format="json")
    assert other.status_code == 201 and other.json()["id"] not in ids


def test_no_get_of_a_reader_writes_a_row_or_a_file(
    api, page, catalog, stdlib_pools, settings, jobs_inline
):
    from django.apps import apps

    editor = page("editor")
    draft = _draft(stdlib_pools, name="readme")
    with jobs_inline():
        editor.post("/mixtures/new/save/", draft, content_type="application/json")
    version = MixtureVersion.objects.get(mixture__name="readme")
    assert version.status == "ready", version.job.error
    viewer, token = page("viewer"), api("viewer")  # sessions and tokens exist before
    # catalog.Fact is the store of measurements derived from immutable artifacts: a page
    # may ask for one it shows (one row per artifact and known label, asked once, computed
    # by a worker); it is checked apart below: a second round of reads adds none.
    models = [
        m
        for m in apps.get_models()
        if m._meta.app_label not in {"sessions"} and m._meta.label != "catalog.Fact"
    ]
    fact_model = apps.get_model("catalog", "Fact")

    def snapshot():
        return ({m._meta.label: m.objects.count() for m in models},
                tree_digest(settings.DATA_ROOT))  # fmt: skip

    before = snapshot()
    v, r = version.pk, catalog["run"].pk
    facts_after_first_round = None
    for _round in range(2):
        _read_every_page(viewer, token, catalog, stdlib_pools, version, v, r)
        if facts_after_first_round is None:
            facts_after_first_round = fact_model.objects.count()
    assert fact_model.objects.count() == facts_after_first_round
    assert snapshot() == before


def _read_every_page(viewer, token, catalog, stdlib_pools, version, v, r):
    for path in ("/", "/sources/", f"/sources/{catalog['source'].pk}/", "/pools/",
                 f"/pools/{stdlib_pools['early'].pk}/", "/mixtures/",
                 f"/mixtures/{version.mixture_id}/", f"/mixtures/versions/{v}/",
                 f"/mixtures/versions/{v}/version.json", f"/mixtures/versions/{v}/export/json/",
                 f"/mixtures/versions/{v}/export/olmo/", f"/mixtures/versions/{v}/export/megatron/",
                 "/runs/", f"/runs/{r}/", "/jobs/", f"/jobs/{catalog['job'].pk}/",
                 f"/jobs/{catalog['job'].pk}/progress.json", "/audit/?source=wiki",
                 f"/audit/flags/{catalog['flag'].pk}/"):  # fmt: skip
        assert viewer.get(path).status_code in (200, 404), path
    for path in ("/api/sources/", "/api/pools/", "/api/mixtures/", "/api/mixture-versions/",
                 "/api/jobs/", "/api/runs/", f"/api/runs/{r}/progress/", f"/api/runs/{r}/resume/",
                 "/api/flags/", f"/api/flags/{catalog['flag'].pk}/taints/",
                 "/api/audit/?source=wiki", "/api/schema/"):  # fmt: skip
        assert token.get(path).status_code in (200, 409), path

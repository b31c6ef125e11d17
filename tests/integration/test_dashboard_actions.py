# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Writes from the pages: viewers get 403 and change nothing; editors can."""

import pytest

from tests.integration.dashboard_fixtures import catalog, login, users  # noqa: F401

pytestmark = pytest.mark.django_db


def _writes(catalog):
    return [
        (f"/jobs/{catalog['job'].pk}/cancel/", {}),
        (f"/jobs/{catalog['job'].pk}/retry/", {}),
        (f"/sources/{catalog['source'].pk}/scan/", {}),
        ("/sources/register/", {"name": "x", "uri": "/tmp", "text_field": "text"}),
        ("/audit/flags/", {"source_id": catalog["source"].pk, "reason": "pii"}),
    ]


def test_it_refuses_every_page_write_to_a_viewer(login, catalog):
    from webapp.catalog.models import Flag, Source
    from webapp.jobs.models import Job

    c = login("viewer")
    for path, data in _writes(catalog):
        assert c.post(path, data).status_code == 403, path
    assert Job.objects.get().state == "running"
    assert (Source.objects.count(), Flag.objects.count()) == (1, 1)


def test_it_hides_write_buttons_from_viewers_and_shows_them_to_editors(login, catalog):
    job_page = f"/jobs/{catalog['job'].pk}/"
    assert "Cancel</button>" not in login("viewer").get(job_page).content.decode()
    assert "Cancel</button>" in login("editor").get(job_page).content.decode()


def test_it_lets_an_editor_cancel_then_retry_a_job(login, catalog):
    from webapp.jobs.models import Job

    c = login("editor")
    job = catalog["job"]
    resp = c.post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert "Cancelled" in resp.content.decode()
    assert Job.objects.get().state == "cancelled"
    c.post(f"/jobs/{job.pk}/retry/")
    job.refresh_from_db()
    assert job.state in ("queued", "running")
    # The cancelled unit runs again; the finished one keeps its output.
    assert job.units.get(unit_id="part-2.jsonl").state == "queued"
    assert job.units.get(unit_id="part-0.jsonl").state == "succeeded"


def test_it_shows_the_service_refusal_when_retrying_a_running_job(login, catalog):
    resp = login("editor").post(f"/jobs/{catalog['job'].pk}/retry/", follow=True)
    assert "retry it when it failed or was cancelled" in resp.content.decode()


def test_it_lets_an_editor_register_a_source_and_flag_a_file(login, catalog, settings, tmp_path):
    settings.SOURCE_ROOTS = [tmp_path / "sources"]
    c = login("editor")
    resp = c.post(
        "/sources/register/",
        {"name": "wiki-copy", "uri": str(tmp_path / "sources" / "wiki"), "text_field": "text",
         "metadata_fields": "language"},
        follow=True,
    )  # fmt: skip
    assert "Registered wiki-copy: 1 file(s), " in resp.content.decode()
    resp = c.post(
        "/audit/flags/",
        {"source_id": catalog["source"].pk, "file_path": "part-0.jsonl", "reason": "opt-out"},
        follow=True,
    )
    assert "opt-out" in resp.content.decode()


def test_it_refuses_a_source_outside_the_roots_with_the_reason(login, catalog, settings, tmp_path):
    settings.SOURCE_ROOTS = [tmp_path / "sources"]
    resp = login("editor").post(
        "/sources/register/", {"name": "etc", "uri": "/etc", "text_field": "text"}, follow=True
    )
    assert "outside the source roots" in resp.content.decode()


def test_it_shows_the_resume_position_and_a_loader_snippet_on_the_run_page(login, catalog):
    from webapp.catalog.services.runs import run_progress_record

    run_progress_record(run_id=catalog["run"].pk, step=50, consumed_samples=25)
    body = login("viewer").get(f"/runs/{catalog['run'].pk}/").content.decode()
    assert "Copy loader snippet" in body
    assert "start_record = 25" in body
    assert "pool-00002" in body  # 25 = shard 2 (records 20..29), record 5

# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""The Storage page and ``/api/storage/`` show the newest measurement a worker stored, with
its age, and never measure on the request: they answer while the object store is frozen
without contacting it. A real Celery worker measures when asked (the page's button, the
API's POST, the sweepers' interval); until then the page keeps the stored numbers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from tests.integration.test_store_frozen import _bounded, frozen, remote_catalog  # noqa: F401
from tests.support.services import wait_for
from webapp.catalog.models import ArtifactStatus, Pool
from webapp.ops.models import StorageReport

pytestmark = pytest.mark.django_db(transaction=True)


def _api(user) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return api


def test_the_page_and_the_api_answer_from_the_stored_report_while_the_store_is_frozen(
    frozen, remote_catalog, users, login
):
    pool = remote_catalog["pool"]
    two_hours_ago = timezone.now() - timedelta(hours=2)
    StorageReport.objects.create(
        state=StorageReport.State.DONE, started_at=two_hours_ago - timedelta(seconds=40),
        finished_at=two_hours_ago,
        report={"data_root": "s3://frozen/data", "sources": [], "total": 1234567,
                "artifacts": [{"kind": "pool", "id": pool.pk, "name": pool.name,
                               "status": "ready", "path": pool.path, "owner": "", "teams": [],
                               "bytes": 1234567}],
                "by_kind": {"pool": 1234567}, "by_owner": {"(nobody)": 1234567},
                "by_team": {"(no team)": 1234567}},
    )  # fmt: skip
    page = _bounded(lambda: login("viewer").get("/storage/"))
    assert page.status_code == 200
    text = page.content.decode()
    assert "Measured <strong>2\xa0hours ago</strong>" in text, text
    assert "1,234,567" in text and "in 40.0 s" in text
    answer = _bounded(lambda: _api(users["viewer"]).get("/api/storage/"))
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["artifacts"][0]["bytes"] == body["total"] == 1234567
    assert body["age_seconds"] >= 7200 and body["measured_at"].startswith(
        two_hours_ago.isoformat()[:16]
    )
    assert frozen.accepted == 0  # neither request went near the store


def test_a_worker_measures_when_asked_and_the_page_shows_the_stored_numbers(
    users, login, tmp_path, settings, celery_workers, celery_queue
):
    settings.DATA_ROOT = tmp_path / "data"
    built = tmp_path / "data" / "pools" / "wiki-0123456789"
    built.mkdir(parents=True)
    for i, size in enumerate((1000, 2000, 3000)):
        (built / f"pool-{i:05d}.bin").write_bytes(b"x" * size)
    Pool.objects.create(name="wiki", status=ArtifactStatus.READY, path=str(built), seq_len=8)
    editor = login("editor")
    page = editor.get("/storage/")
    assert b"Not measured yet." in page.content and b"Measure now" in page.content
    assert login("viewer").post("/storage/measure/").status_code == 403
    assert _api(users["viewer"]).post("/api/storage/").status_code == 403
    assert not StorageReport.objects.exists()

    celery_workers("measurer")
    page = login("editor").post("/storage/measure/", follow=True)
    assert b"A worker measures the storage now" in page.content
    wait_for(lambda: StorageReport.objects.filter(state="done").exists(), timeout=120,
             what="the worker's measurement")  # fmt: skip
    page = login("viewer").get("/storage/")
    assert b"6,000" in page.content and b"Measured <strong>0\xc2\xa0minutes ago" in page.content

    # The page shows what was stored, not what the store holds this moment.
    (built / "pool-00003.bin").write_bytes(b"x" * 1000)
    assert b"6,000" in login("viewer").get("/storage/").content
    asked = _api(users["editor"]).post("/api/storage/")
    assert asked.status_code == 202 and asked.json()["state"] == "queued", asked.content
    wait_for(lambda: StorageReport.objects.filter(state="done").count() == 2, timeout=120,
             what="the second measurement")  # fmt: skip
    body = _api(users["viewer"]).get("/api/storage/").json()
    assert [r["bytes"] for r in body["artifacts"]] == [7000] and body["measuring"] is None


def test_the_sweepers_queue_a_measurement_once_the_newest_is_too_old(celery_queue):
    from webapp.ops.storage import storage_measure_due

    assert storage_measure_due(interval=0) is None  # 0: never by the sweepers
    assert not StorageReport.objects.exists()
    first = storage_measure_due(interval=3600)
    assert first is not None and first.state == "queued"
    assert storage_measure_due(interval=3600) is None  # one under way: no second
    StorageReport.objects.filter(pk=first.pk).update(
        state="done", finished_at=timezone.now() - timedelta(minutes=30)
    )
    assert storage_measure_due(interval=3600) is None  # recent enough
    StorageReport.objects.filter(pk=first.pk).update(
        finished_at=timezone.now() - timedelta(hours=2)
    )
    again = storage_measure_due(interval=3600)
    assert again is not None and again.pk != first.pk

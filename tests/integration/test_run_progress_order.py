# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""A run's progress reports agree with each other: samples and tokens never decrease with
the step, so a late report (of a step before the run's last) lies between the recorded
reports on each side of it, or is refused over HTTP with both named. Concurrent late
reports are serialized by the run's lock: of two that contradict each other, one is kept."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.integration.dashboard_fixtures import catalog, users  # noqa: F401
from tests.support.services import wait_for


def _client(user) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return c


def _run(catalog, users, name: str):
    from webapp.catalog.models import TrainingRun

    return TrainingRun.objects.create(
        name=name, mixture_version=catalog["version"], created_by=users["editor"]
    )


def _rows(run) -> list[tuple[int, int]]:
    return list(run.progress.order_by("step").values_list("step", "consumed_samples"))


@pytest.mark.django_db
def test_it_refuses_a_late_report_that_contradicts_either_neighbour(catalog, users):
    run = _run(catalog, users, "late-reports")
    c = _client(users["editor"])
    url = f"/api/runs/{run.pk}/progress/"
    for step, samples in ((50, 100), (90, 180)):
        assert c.post(url, {"step": step, "consumed_samples": samples}, "json").status_code == 201

    # Step 80 with fewer samples than step 50 read.
    resp = c.post(url, {"step": 80, "consumed_samples": 90}, "json")
    assert resp.status_code == 400
    detail = resp.json()["detail"]
    assert "step 80 reports 90 samples, fewer than the 100 of the earlier step 50" in detail
    assert "100 samples, 204800 tokens at step 50" in detail
    assert "180 samples, 368640 tokens at step 90" in detail

    # Step 70 with more samples than step 90 read.
    resp = c.post(url, {"step": 70, "consumed_samples": 190}, "json")
    assert resp.status_code == 400
    assert (
        "step 70 reports 190 samples, more than the 180 of the later step 90"
        in (resp.json()["detail"])
    )
    assert _rows(run) == [(50, 100), (90, 180)]

    # One between them is recorded, and is then a neighbour itself.
    assert c.post(url, {"step": 70, "consumed_samples": 150}, "json").status_code == 201
    resp = c.post(url, {"step": 80, "consumed_samples": 140}, "json")
    assert resp.status_code == 400
    assert "fewer than the 150 of the earlier step 70" in resp.json()["detail"]
    resp = c.post(url, {"step": 60, "consumed_samples": 160}, "json")
    assert resp.status_code == 400
    assert "more than the 150 of the later step 70" in resp.json()["detail"]
    # Tokens are held to the same order.
    body = {"step": 60, "consumed_samples": 140, "consumed_tokens": 150 * 2048 + 1}
    resp = c.post(url, body, "json")
    assert resp.status_code == 400
    assert (
        "consumed_tokens: step 60 reports 307201 tokens, more than the 307200"
        in (resp.json()["detail"])
    )
    # A retried report of a recorded step still records nothing, whatever it says.
    assert c.post(url, {"step": 70, "consumed_samples": 185}, "json").status_code == 201
    # A report after the last one that reads fewer than it is refused too.
    resp = c.post(url, {"step": 95, "consumed_samples": 170}, "json")
    assert resp.status_code == 400
    assert "fewer than the 180 of the earlier step 90" in resp.json()["detail"]
    assert _rows(run) == [(50, 100), (70, 150), (90, 180)]
    run.refresh_from_db()
    assert (run.last_step, run.consumed_samples) == (90, 180)


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_late_reports_that_contradict_each_other_keep_one(catalog, users, postgres):
    """Steps 60 (170 samples) and 70 (120) each fit between steps 50 and 90, not both.
    The run's row is held locked while both are sent, so both wait for it; once it is
    released, whichever goes second sees the first and is refused."""
    from webapp.catalog.models import TrainingRun

    run = _run(catalog, users, "racing-reports")
    c = _client(users["editor"])
    url = f"/api/runs/{run.pk}/progress/"
    for step, samples in ((50, 100), (90, 180)):
        assert c.post(url, {"step": step, "consumed_samples": samples}, "json").status_code == 201

    answers: dict[int, int] = {}

    def report(step: int, samples: int) -> None:
        try:
            answers[step] = (
                _client(users["editor"])
                .post(url, {"step": step, "consumed_samples": samples}, "json")
                .status_code
            )
        finally:
            connections.close_all()

    def waiting_for_locks() -> int:
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0]

    holder = connections.create_connection("default")
    try:
        with holder.cursor() as cursor:
            cursor.execute("BEGIN")
            table = TrainingRun._meta.db_table
            cursor.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", [run.pk])
            threads = [
                threading.Thread(target=report, args=args) for args in ((60, 170), (70, 120))
            ]
            for t in threads:
                t.start()
            wait_for(lambda: waiting_for_locks() == 2, timeout=60,
                     what="both reports to wait for the run's lock")  # fmt: skip
            cursor.execute("COMMIT")
        for t in threads:
            t.join()
    finally:
        holder.close()
    assert sorted(answers.values()) == [201, 400], answers
    kept = 60 if answers[60] == 201 else 70
    assert [s for s, _ in _rows(run)] == [50, kept, 90]
    with transaction.atomic():
        assert TrainingRun.objects.get(pk=run.pk).last_step == 90

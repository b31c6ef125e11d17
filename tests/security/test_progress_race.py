"""Item: concurrent progress reports of one step recorded several rows (48 of 100 steps
doubled under 4 racing clients). Here four real clients (threads, each its own HTTP
connection) race every step against the live server and Postgres: each step is recorded
once, by the first report; the run's position is that report's; replays of a recorded step
with other counts record nothing. And the migration that adds the constraint keeps the
first report of each step of a database that has doubled rows."""

from __future__ import annotations

import threading

import pytest
import requests
from rest_framework.authtoken.models import Token

from webapp.catalog.models import RunProgress, TrainingRun

pytestmark = pytest.mark.django_db(transaction=True)

CLIENTS = 4
STEPS = 40


def test_racing_reports_of_a_step_record_it_once(live_server, users, catalog):
    run = catalog["run"]  # the editor's, reported up to step 20 (80 samples)
    token = Token.objects.get_or_create(user=users["editor"])[0].key
    url = f"{live_server.url}/api/runs/{run.pk}/progress/"
    barrier = threading.Barrier(CLIENTS)
    answers: list[list[int]] = [[] for _ in range(CLIENTS)]
    errors: list[BaseException] = []

    def client(c: int) -> None:
        http = requests.Session()
        http.headers["Authorization"] = f"Token {token}"
        try:
            for step in range(21, 21 + STEPS):
                barrier.wait(timeout=60)  # every client sends this step at the same moment
                # Each client gives its own count (all monotonic in the step).
                body = {"step": step, "consumed_samples": step * 4 + c}
                answers[c].append(http.post(url, json=body, timeout=60).status_code)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert all(a == [201] * STEPS for a in answers), answers
    rows = list(RunProgress.objects.filter(run=run, step__gt=20).order_by("step", "id"))
    steps = [r.step for r in rows]
    assert len(steps) == len(set(steps)) == STEPS, f"{len(steps) - len(set(steps))} doubled"
    for r in rows:
        assert r.consumed_samples - r.step * 4 in range(CLIENTS)
    run = TrainingRun.objects.get(pk=run.pk)
    last = rows[-1]
    assert (run.last_step, run.consumed_samples) == (last.step, last.consumed_samples)
    # A replay of a recorded step with other counts records nothing and answers the run.
    http = requests.Session()
    http.headers["Authorization"] = f"Token {token}"
    replay = http.post(url, json={"step": last.step, "consumed_samples": last.step * 4 + 3 -
                                  (last.consumed_samples - last.step * 4)}, timeout=60)  # fmt: skip
    assert replay.status_code == 201
    assert replay.json()["consumed_samples"] == last.consumed_samples
    assert RunProgress.objects.filter(run=run, step=last.step).count() == 1


def test_the_migration_keeps_the_first_report_of_each_step(users, catalog):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    run = catalog["run"]  # steps 10 and 20 recorded
    before = ("catalog", "0007_run_segments")
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("catalog")
    executor.migrate([before])
    try:
        with connection.cursor() as cur:  # what racing reports left: doubled steps
            for step, samples in ((20, 81), (20, 82), (10, 41)):
                cur.execute(
                    "INSERT INTO catalog_runprogress (run_id, step, consumed_samples, "
                    "consumed_tokens, reported_at) VALUES (%s, %s, %s, %s, now())",
                    [run.pk, step, samples, samples * 2048],
                )
            cur.execute(
                "UPDATE catalog_trainingrun SET consumed_samples = 82 WHERE id = %s", [run.pk]
            )
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    kept = list(RunProgress.objects.filter(run=run).order_by("step").values_list("step",
                                                                                "consumed_samples"))  # fmt: skip
    assert kept == [(10, 40), (20, 80)]
    assert TrainingRun.objects.get(pk=run.pk).consumed_samples == 80

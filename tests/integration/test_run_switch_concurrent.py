# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Concurrent run switches over HTTP against Postgres (a live server answering in threads,
each request in its own transaction): runs of different mixtures whose sources carry the
same flags switch at the same moment, and every switch answers 201. Each switch asks for
its flags' taint again, which writes their rows, while the taints asked for by the others
are computed and stored: rows taken in different orders by two transactions deadlock, and
Postgres then aborts one of them (a 500)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token

from tests.integration.dashboard_fixtures import users  # noqa: F401
from tests.integration.test_run_switch import GBS, SWITCH_STEP, _api, _version1, world  # noqa: F401
from webapp.catalog.models import Flag, RunSegment, TrainingRun

RUNS = 6
TRIES = 3  # switches sent for each run at once: 18 requests


def _post(url: str, token: str, body: dict) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.django_db(transaction=True)
def test_concurrent_switches_of_runs_sharing_flags_all_answer(
    world, users, live_server, jobs_inline, celery_queue
):
    editor = _api(users["editor"])
    token = Token.objects.get(user=users["editor"]).key
    for name in ("alpha", "beta", "gamma"):
        for i in range(4):
            Flag.objects.create(target=Flag.Target.SOURCE, source=world[name]["source"],
                                reason=f"pii {i}")  # fmt: skip
    runs = []
    for i in range(RUNS):
        v1 = _version1(world, f"concurrent-{i}", jobs_inline, samples=300)
        run = editor.post("/api/runs/", {"name": f"c-{i}", "mixture_version": v1.pk}, "json")
        assert run.status_code == 201, run.content
        runs.append(run.json()["id"])
        resp = editor.post(f"/api/runs/{runs[-1]}/progress/",
                           {"step": SWITCH_STEP, "consumed_samples": SWITCH_STEP * GBS}, "json")  # fmt: skip
        assert resp.status_code == 201, resp.content
    weights = [{"pool": world["beta"]["pool"].pk, "weight": 0.3},
               {"pool": world["gamma"]["pool"].pk, "weight": 0.7}]  # fmt: skip
    body = {"weights": weights, "add": [world["gamma"]["pool"].pk]}

    # The taint and build tasks each switch queues run in this process as it commits (eager),
    # so taints are computed and stored while other switches are under way, as workers do.
    asked = timezone.now()
    start = threading.Barrier(RUNS * TRIES)
    answers: list[tuple[int, int, str]] = []

    def switch(run_id: int) -> None:
        start.wait()
        status, text = _post(f"{live_server.url}/api/runs/{run_id}/switch/", token, body)
        answers.append((run_id, status, text[:300]))

    threads = [threading.Thread(target=switch, args=(r,)) for r in runs for _ in range(TRIES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert len(answers) == RUNS * TRIES
    failed = [a for a in answers if a[1] != 201]
    assert not failed, failed
    for run_id in runs:  # each run reads the version its last switch saved
        run = TrainingRun.objects.get(pk=run_id)
        last = RunSegment.objects.filter(run=run).order_by("-index").first()
        assert last.mixture_version_id == run.mixture_version_id and last.end_sample is None
    # Every switch asked for its flags' taint again, once it had committed.
    assert Flag.objects.filter(taint_requested_at__gte=asked).count() == Flag.objects.count()

"""Item: runs belong to their owner (or a team); a trainer token registers runs and reports
progress and may write nothing else; progress is bounded by the version's size and
monotonic, with clear 400s. The attacks: any editor token reported to any run; a step of
2^62 froze a run for good; consumed_tokens of 2^62 was accepted; consumed_samples of 2^60
answered 500 (bigint overflow)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from webapp.catalog.models import Flag, Pool, RunProgress, Source, TrainingRun
from webapp.jobs.models import Job


def _register(c, version, name="run-a", **extra):
    return c.post("/api/runs/", {"name": name, "mixture_version": version.pk, **extra}, "json")


def _report(c, run_id, **body):
    return c.post(f"/api/runs/{run_id}/progress/", body, "json")


def test_a_trainer_registers_and_reports_its_own_run(api, catalog):
    c = api("trainer")
    run = _register(c, catalog["version"]).json()
    assert run["owner"] == TrainingRun.objects.get(name="run-a").created_by_id
    assert _report(c, run["id"], step=10, consumed_samples=40).status_code == 201
    assert c.get(f"/api/runs/{run['id']}/resume/").json()["sample"] == 40


@pytest.mark.parametrize(
    "path, body",
    [
        ("/api/sources/", {"name": "s", "uri": "/tmp"}),
        ("/api/pools/", {"name": "p", "tokenized_ids": [1], "seq_len": 16}),
        ("/api/flags/", {"source": 1, "reason": "pii"}),
        ("/api/mixtures/", {"name": "m", "tokens": 10, "rows": [{"pool": 1, "weight": 1}]}),
        ("/api/jobs/{job}/cancel/", {}),
        ("/api/jobs/{job}/retry/", {}),
        ("/api/sources/{source}/scan/", {}),
    ],
)
def test_a_trainer_token_writes_nothing_but_runs(api, catalog, path, body):
    url = path.format(job=catalog["job"].pk, source=catalog["source"].pk)
    before = (Source.objects.count(), Pool.objects.count(), Flag.objects.count(),
              Job.objects.get(pk=catalog["job"].pk).state)  # fmt: skip
    assert api("trainer").post(url, body, format="json").status_code == 403
    assert before == (Source.objects.count(), Pool.objects.count(), Flag.objects.count(),
                      Job.objects.get(pk=catalog["job"].pk).state)  # fmt: skip


def test_a_viewer_still_cannot_register_a_run(api, catalog):
    assert _register(api("viewer"), catalog["version"]).status_code == 403
    assert not TrainingRun.objects.filter(name="run-a").exists()


def test_another_editor_cannot_report_to_a_run_it_does_not_own(api, catalog):
    run = catalog["run"]  # the editor's
    before = (run.progress.count(), TrainingRun.objects.get(pk=run.pk).last_step)
    for who in ("editor2", "trainer"):
        resp = _report(api(who), run.pk, step=30, consumed_samples=100)
        assert resp.status_code == 403
        assert "belongs to another user" in resp.json()["detail"]
    assert (run.progress.count(), TrainingRun.objects.get(pk=run.pk).last_step) == before
    # Nor take the run over by registering its name again.
    again = _register(api("editor2"), catalog["version"], name=run.name)
    assert again.status_code == 403
    # Its owner and an admin may.
    assert _report(api("editor"), run.pk, step=30, consumed_samples=100).status_code == 201
    assert _report(api("admin"), run.pk, step=31, consumed_samples=104).status_code == 201


def test_a_team_shares_its_runs(api, users, catalog):
    team = Group.objects.create(name="pretrain-team")
    users["trainer"].groups.add(team)
    users["editor2"].groups.add(team)
    c = api("trainer")
    run = _register(c, catalog["version"], name="team-run", team="pretrain-team").json()
    assert _report(api("editor2"), run["id"], step=1, consumed_samples=4).status_code == 201
    assert _report(api("editor"), run["id"], step=2, consumed_samples=8).status_code == 403
    # One cannot put a run in a team one is not in.
    resp = _register(api("editor"), catalog["version"], name="x", team="pretrain-team")
    assert resp.status_code == 403
    assert _register(api("editor"), catalog["version"], name="y", team="editor").status_code == 400


@pytest.mark.parametrize(
    "body, field",
    [
        ({"step": 2**62, "consumed_samples": 41}, "step"),
        ({"step": 401, "consumed_samples": 41}, "step"),
        ({"step": 21, "consumed_samples": 2**60}, "consumed_samples"),
        ({"step": 21, "consumed_samples": 401}, "consumed_samples"),
        ({"step": 21, "consumed_tokens": 2**62}, "consumed_tokens"),
        ({"step": 21, "consumed_tokens": 400 * 2048 + 1}, "consumed_tokens"),
    ],
)
def test_a_report_beyond_the_version_is_a_clear_400_and_does_not_freeze_the_run(
    api, catalog, body, field
):
    c = api("editor")
    run = catalog["run"]  # version of 400 samples, seq_len 2048, at step 20
    resp = _report(c, run.pk, **body)
    assert resp.status_code == 400
    assert resp.json()["detail"].startswith(f"{field}: ")
    assert not RunProgress.objects.filter(run=run, step=body["step"]).exists()
    # The run keeps moving: the next honest report is recorded and resumes there.
    assert _report(c, run.pk, step=21, consumed_samples=44).status_code == 201
    assert c.get(f"/api/runs/{run.pk}/resume/").json()["sample"] == 44


def test_progress_is_monotonic(api, catalog):
    c = api("editor")
    run = catalog["run"]
    assert _report(c, run.pk, step=30, consumed_samples=120).status_code == 201
    back = _report(c, run.pk, step=31, consumed_samples=119)
    assert back.status_code == 400
    assert "fewer than the 120 of the earlier step 30" in back.json()["detail"]
    late = _report(c, run.pk, step=25, consumed_samples=121)
    assert late.status_code == 400
    assert "more than the 120 of the later step 30" in late.json()["detail"]
    # A late report that agrees is history, and the run stays at its latest step.
    assert _report(c, run.pk, step=25, consumed_samples=100).status_code == 201
    fresh = TrainingRun.objects.get(pk=run.pk)
    assert (fresh.last_step, fresh.consumed_samples) == (30, 120)

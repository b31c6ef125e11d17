"""The job engine over a shardcore plan, tasks run eagerly in this process: phases in
order, counters, failures on the job row, retry of failed units only, cancel, stale and
duplicate deliveries. (Real workers: test_jobs_workers.py.)"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest

from shardcore import atomic, units
from shardcore.units import merge_bad_input
from webapp.jobs import recorders, selectors, services
from webapp.jobs.models import Job, JobState, JobUnit, UnitState
from workers.celery import app

STDLIB = Path(sysconfig.get_paths()["stdlib"])
FAIL_ON: set[str] = set()  # unit ids whose next run raises (a permanent failure)
TAKEN_OVER: set[str] = set()  # unit ids whose claim passes to "rescuer" while they run


def _run_unit(plan: units.Plan, unit: dict) -> dict:
    if unit["id"] in FAIL_ON:
        raise ValueError(f"cannot read {unit['file']}: broken on purpose")
    if unit["id"] in TAKEN_OVER:
        # Meanwhile the claim lapsed, the sweeper queued the unit again, another claimed it.
        row = JobUnit.objects.get(unit_id=unit["id"], state=UnitState.RUNNING)
        JobUnit.objects.filter(pk=row.pk).update(state=UnitState.QUEUED)
        services._claim(row.pk, "rescuer")
    out = Path(plan.out)
    if unit["phase"] == "count":
        data = Path(unit["file"]).read_bytes()
        result = {"lines": data.count(b"\n")}
        atomic.write_text(out / f"{unit['id']}.json", json.dumps(result))
        return {
            "documents": 1,
            "tokens": len(data.split()),
            "bytes": len(data),
            "bad_input": {unit["file"]: {"empty_document": {"count": 1, "samples": ["x:1"]}}},
        }
    parts = sorted(out.glob("count-*.json"))
    total = sum(json.loads(p.read_text())["lines"] for p in parts)
    (out / "total.json").write_text(json.dumps({"lines": total}))
    return {"documents": 0}


def _finalize(plan: units.Plan, stats: list[dict]) -> dict:
    from shardcore.manifest import write_manifest

    manifest = {"total": json.loads((Path(plan.out) / "total.json").read_text())}
    write_manifest(plan.out, manifest)
    return manifest


units.register_stage("test-lines", run_unit=_run_unit, finalize=_finalize)
RECORDED: list[tuple[int, str, dict | None]] = []
RECORDER = "test.lines"


@recorders.register(RECORDER)
def record(*, job, manifest):
    RECORDED.append((job.pk, job.state, manifest))


def _plan(out: Path, n: int = 4) -> units.Plan:
    files = sorted(STDLIB.glob("*.py"))[:n]
    return units.Plan(
        stage="test-lines",
        out=str(out),
        params={},
        phases=[
            [{"id": f"count-{i}", "phase": "count", "file": str(f)} for i, f in enumerate(files)],
            [{"id": "sum", "phase": "sum"}],
        ],
    )


@pytest.fixture
def eager(transactional_db):
    app.conf.task_always_eager = True
    FAIL_ON.clear()
    TAKEN_OVER.clear()
    RECORDED.clear()
    yield
    app.conf.task_always_eager = False
    FAIL_ON.clear()
    TAKEN_OVER.clear()


@pytest.fixture
def held(monkeypatch):
    """Messages are kept here instead of reaching any broker or running eagerly."""
    from workers import tasks

    sent: list[tuple[str, dict]] = []
    for task in (tasks.job_unit_run, tasks.job_finalize):
        monkeypatch.setattr(
            task, "apply_async", lambda kwargs, _n=task.name, **_: sent.append((_n, kwargs))
        )
    return sent


def test_it_runs_every_phase_then_finalizes_and_records(eager, tmp_path):
    job = services.job_create(plan=_plan(tmp_path / "out"), recorder=RECORDER)

    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.log_tail
    assert (job.units_done, job.units_total) == (5, 5)
    files = sorted(STDLIB.glob("*.py"))[:4]
    assert job.bytes == sum(f.stat().st_size for f in files)
    assert job.documents == 4
    assert job.tokens > 0
    expected = sum(f.read_bytes().count(b"\n") for f in files)
    assert (
        json.loads((tmp_path / "out" / "manifest.json").read_text())["total"]["lines"] == expected
    )
    assert [(job.pk, JobState.RUNNING, {"total": {"lines": expected}})] == RECORDED
    assert sum(v["empty_document"]["count"] for v in job.bad_input.values()) == 4
    assert "succeeded" in job.log_tail


def test_it_fails_the_job_with_the_unit_error_and_retries_only_failed_units(eager, tmp_path):
    FAIL_ON.add("count-2")
    job = services.job_create(plan=_plan(tmp_path / "out"), recorder=RECORDER)

    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "unit count-2 failed: ValueError: cannot read" in job.error
    failed = JobUnit.objects.get(job=job, unit_id="count-2")
    assert failed.state == UnitState.FAILED and "broken on purpose" in failed.error
    assert RECORDED[-1][2] is None

    FAIL_ON.clear()
    services.job_retry(job_id=job.pk)

    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.log_tail
    attempts = dict(JobUnit.objects.filter(job=job).values_list("unit_id", "attempts"))
    assert attempts == {"count-0": 1, "count-1": 1, "count-2": 2, "count-3": 1, "sum": 1}
    assert job.units_done == 5
    assert job.error == ""


def test_it_cancels_remaining_units(eager, held, tmp_path, monkeypatch):
    job = services.job_create(plan=_plan(tmp_path / "out"), recorder=RECORDER)
    # Nothing ran: the broker may hold messages, but claims fail once cancelled.
    services.job_cancel(job_id=job.pk)

    assert services.job_unit_execute(
        unit_id=JobUnit.objects.filter(job=job).first().pk, worker="late"
    ) == ("skipped")
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert set(JobUnit.objects.filter(job=job).values_list("state", flat=True)) == {
        UnitState.CANCELLED
    }
    with pytest.raises(services.JobError):
        services.job_cancel(job_id=job.pk)

    monkeypatch.undo()
    services.job_retry(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED


def test_it_skips_a_duplicate_delivery_and_ignores_a_stale_completion(eager, held, tmp_path):
    job = services.job_create(plan=_plan(tmp_path / "out", n=1), recorder=RECORDER)
    unit = JobUnit.objects.get(job=job, unit_id="count-0")

    assert services.job_unit_execute(unit_id=unit.pk, worker="a") == "succeeded"
    assert services.job_unit_execute(unit_id=unit.pk, worker="b") == "skipped"
    unit.refresh_from_db()
    assert (unit.worker, unit.attempts, unit.state) == ("a", 1, UnitState.SUCCEEDED)

    # A worker that died mid-unit leaves the row running; a retry requeues it and the
    # first attempt's completion, should it ever arrive, records nothing.
    summer = JobUnit.objects.get(job=job, unit_id="sum")
    JobUnit.objects.filter(pk=summer.pk).update(state=UnitState.RUNNING, attempts=1, worker="dead")
    stale = JobUnit.objects.get(pk=summer.pk)
    services.job_retry(job_id=job.pk, include_running=True)
    services._unit_succeed(stale, {"documents": 99})
    job.refresh_from_db()
    assert job.documents == 1
    assert services.job_unit_execute(unit_id=summer.pk, worker="c") == "succeeded"
    assert services.job_finalize_execute(job_id=job.pk) == "succeeded"
    assert services.job_finalize_execute(job_id=job.pk) == "skipped"
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert job.units_done == 2


def test_it_ignores_a_late_failure_from_a_worker_whose_claim_was_taken_over(eager, held, tmp_path):
    job = services.job_create(plan=_plan(tmp_path / "out", n=1), recorder=RECORDER)
    unit = JobUnit.objects.get(job=job, unit_id="count-0")
    # A worker claims the unit, then its host is cut off: the unit is queued again and
    # another worker claims it. The first worker's error (its input is unreachable)
    # arrives afterwards.
    cut_off = services._claim(unit.pk, "cut-off")
    services.job_retry(job_id=job.pk, include_running=True)
    rescuer = services._claim(unit.pk, "rescuer")
    assert (cut_off.attempts, rescuer.attempts) == (1, 2)

    services._unit_fail(cut_off, "OSError: Network is unreachable", "")
    unit.refresh_from_db()
    job.refresh_from_db()
    assert (unit.state, unit.worker, unit.error) == (UnitState.RUNNING, "rescuer", "")
    assert job.state == JobState.RUNNING and not job.error

    services._unit_fail(rescuer, "ValueError: broken on purpose", "")
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "broken on purpose" in job.error


def test_a_worker_cut_off_while_it_holds_the_job_row_lets_go_of_it_after_a_lease(
    postgres, eager, held, tmp_path, settings
):
    import threading
    import time

    from django.db import DatabaseError, connection, transaction

    settings.SHARDYARD_UNIT_LEASE = 1
    job = services.job_create(plan=_plan(tmp_path / "out", n=1), recorder=RECORDER)
    holding, outcome = threading.Event(), []

    def cut_off_mid_completion():
        # A completion that takes the job row, then hears nothing more from its worker
        # (as when the worker's host drops off the network), for longer than the lease.
        try:
            with transaction.atomic():
                services.lock_holder_guard()
                Job.objects.select_for_update().get(pk=job.pk)
                holding.set()
                time.sleep(3)
            outcome.append("committed")
        except DatabaseError as exc:
            outcome.append(str(exc))
        finally:
            connection.close()

    worker = threading.Thread(target=cut_off_mid_completion)
    worker.start()
    assert holding.wait(30)
    with pytest.raises(DatabaseError, match="could not obtain lock"), transaction.atomic():
        Job.objects.select_for_update(nowait=True).get(pk=job.pk)

    def free():
        try:
            with transaction.atomic():
                return Job.objects.select_for_update(nowait=True).get(pk=job.pk)
        except DatabaseError:
            return None

    deadline = time.monotonic() + 2.5  # the holder sleeps 3 s; the lease is 1 s
    while not free():
        assert time.monotonic() < deadline, "the row stayed locked past the lease"
        time.sleep(0.1)
    worker.join()
    assert outcome and "idle-in-transaction timeout" in outcome[0], outcome


def test_a_run_whose_claim_was_taken_over_publishes_and_records_nothing(eager, held, tmp_path):
    job = services.job_create(plan=_plan(tmp_path / "out", n=1), recorder=RECORDER)
    unit = JobUnit.objects.get(job=job, unit_id="count-0")
    TAKEN_OVER.add("count-0")

    assert services.job_unit_execute(unit_id=unit.pk, worker="cut-off") == "skipped"
    assert units.unit_result(str(tmp_path / "out"), "count-0") is None  # no marker
    unit.refresh_from_db()
    job.refresh_from_db()
    assert (unit.state, unit.worker, unit.attempts) == (UnitState.RUNNING, "rescuer", 2)
    assert job.units_done == 0 and job.documents == 0 and job.state == JobState.RUNNING


def test_it_refuses_to_retry_a_succeeded_job(eager, tmp_path):
    job = services.job_create(plan=_plan(tmp_path / "out", n=1))
    with pytest.raises(
        services.JobError, match="has already succeeded: it has no failed unit to retry"
    ):
        services.job_retry(job_id=job.pk)


def test_it_reports_progress_for_the_job_page(eager, tmp_path, django_assert_max_num_queries):
    job = services.job_create(plan=_plan(tmp_path / "out"))

    with django_assert_max_num_queries(4):
        detail = selectors.job_detail(job_id=job.pk, units_limit=100)
        assert detail.job.units_done == 5
        assert [u.unit_id for u in detail.units][-1] == "sum"
        assert detail.unit_states == {UnitState.SUCCEEDED: 5}
    assert detail.job.bytes_per_second is None or detail.job.bytes_per_second > 0
    assert detail.failed_units == []


def test_it_merges_bad_input_reports():
    total = merge_bad_input({}, {"a": {"invalid_json": {"count": 2, "samples": ["1"]}}})
    total = merge_bad_input(
        total, [{"file": "a", "reason": "invalid_json", "count": 1, "samples": ["2"]}]
    )
    assert total == {"a": {"invalid_json": {"count": 3, "samples": ["1", "2"]}}}


def test_it_queues_the_first_phase_after_commit(eager, held, tmp_path):
    job = services.job_create(plan=_plan(tmp_path / "out", n=2))
    assert [name for name, _ in held] == ["workers.job_unit_run"] * 2
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED
    assert JobUnit.objects.filter(job=job, state=UnitState.QUEUED).count() == 2
    assert JobUnit.objects.filter(job=job, state=UnitState.PENDING).count() == 1


def test_the_sweep_starts_the_next_phase_when_the_last_success_did_not(
    eager, held, tmp_path, monkeypatch
):
    from webapp.jobs import claims

    job = services.job_create(plan=_plan(tmp_path / "out", n=2), recorder=RECORDER)
    # The worker of the phase's last success dies before it starts the next phase.
    with monkeypatch.context() as patched:
        patched.setattr(claims, "phase_advance", lambda **_: False)
        for unit in JobUnit.objects.filter(job=job, phase=0):
            assert services.job_unit_execute(unit_id=unit.pk, worker="w") == "succeeded"
    job.refresh_from_db()
    assert (job.phase, job.phase_left, job.units_done) == (0, 0, 2)
    held.clear()

    assert [j.pk for j in services.job_reap()] == [job.pk]
    job.refresh_from_db()
    summer = JobUnit.objects.get(job=job, unit_id="sum")
    assert (job.phase, job.phase_left, summer.state) == (1, 1, UnitState.QUEUED)
    assert held == [("workers.job_unit_run", {"unit_id": summer.pk})]
    assert "the sweep started what follows" in job.log_tail
    assert services.job_reap() == []  # nothing stalled any more

"""Migration 0004 splits the plans of jobs made before unit rows carried their specs: each
unit gets its spec and position, the job keeps the plan's header and the count of its
phase's units left, and a job caught mid-phase runs on from there. Backwards, the plan is
put back together."""

from __future__ import annotations

import pytest

from tests.support.migrations import migrate_to, schema_at

BEFORE = [("jobs", "0002_unit_heartbeat")]
AFTER = [("jobs", "0005_unit_index_constraints")]


@pytest.fixture
def old_schema(transactional_db):
    with schema_at(BEFORE) as apps:
        yield apps


def test_it_moves_each_units_spec_out_of_the_plan_and_back(old_schema):
    Job = old_schema.get_model("jobs", "Job")
    JobUnit = old_schema.get_model("jobs", "JobUnit")
    phases = [
        [{"id": "a", "file": "/in/a.jsonl"}, {"id": "b", "file": "/in/b.jsonl"}],
        [{"id": "sum"}],
    ]
    plan = {"stage": "tokenize", "out": "/out", "params": {"k": 1}, "meta": {}, "phases": phases}
    job = Job.objects.create(
        kind="tokenize", plan=plan, output_dir="/out", num_phases=2, units_total=3,
        state="running", phase=0,
    )  # fmt: skip
    JobUnit.objects.create(job=job, unit_id="b", phase=0, state="queued")
    JobUnit.objects.create(
        job=job, unit_id="a", phase=0, state="succeeded",
        stats={"bad_input": {"/in/a.jsonl": {"invalid_json": {"count": 2, "samples": []}}}},
    )  # fmt: skip
    JobUnit.objects.create(job=job, unit_id="sum", phase=1, state="pending")

    apps = migrate_to(AFTER)
    Job = apps.get_model("jobs", "Job")
    JobUnit = apps.get_model("jobs", "JobUnit")

    job = Job.objects.get(pk=job.pk)
    assert job.plan == {"stage": "tokenize", "out": "/out", "params": {"k": 1}, "meta": {}}
    assert job.phase_left == 1  # "b" is left in phase 0
    rows = {u.unit_id: u for u in JobUnit.objects.filter(job=job)}
    # Positions follow the rows' order within each phase, phases in order.
    assert sorted(rows, key=lambda k: rows[k].index) == ["b", "a", "sum"]
    assert rows["a"].spec == phases[0][0] and rows["sum"].spec == phases[1][0]
    assert (rows["a"].bad_lines, rows["b"].bad_lines) == (2, 0)

    apps = migrate_to(BEFORE)
    job = apps.get_model("jobs", "Job").objects.get(pk=job.pk)
    assert job.plan["phases"] == [[phases[0][1], phases[0][0]], [phases[1][0]]]

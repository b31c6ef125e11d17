"""Planning as a job's work (``shardcore.planning``): the plan a deferred planning saves is
the plan made in place, byte for byte; rerunning an interrupted planning writes the same
bytes; a planner's refusal names the work; the planning's scratch goes with the artifact's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardcore import planning, units
from shardcore.errors import EmptySelectionError
from shardcore.pool import plan_pool
from tests.unit import pool_fixtures as pf


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("tokenized")
    return [
        str(pf.write_tokenized(root / "prose", pf.corpus("prose", 300), shard_docs=80)),
        str(pf.write_tokenized(root / "code", pf.corpus("code", 40), shard_docs=15)),
    ]


def _arguments(sources: list[str], out: Path, **kw) -> dict:
    return {"tokenized": sources, "out": str(out), "seq_len": 64, "memory": 1 << 20,
            "shard_size": 100_000, "filter": "kind = 'code'", "seed": 5, **kw}  # fmt: skip


def _saved(out: Path) -> dict[str, bytes]:
    """Every file of ``out`` but the planning's own scratch."""
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and planning.DIR not in str(p.relative_to(out))
    }


def test_a_deferred_planning_saves_the_plan_made_in_place(sources, tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    units.save_plan(plan_pool(**_arguments(sources, here)))
    deferred = planning.deferred(
        planner="shardcore.pool.plan_pool", kwargs=_arguments(sources, there), out=str(there),
        what="planning pool 'there'",
    )  # fmt: skip
    assert deferred.out == str(there / planning.DIR) and deferred.num_units == 1
    manifest = units.run_local(deferred)
    assert manifest["kind"] == "planning" and manifest["plan"] == str(there / units.PLAN_NAME)

    made = units.load_plan(there)
    assert manifest["units"] == made.num_units and manifest["stage"] == "pool"
    # Same files (the plan and its input table); the plan differs only in its output.
    ours, theirs = _saved(here), _saved(there)
    assert sorted(ours) == sorted(theirs) == ["_pass1/inputs.table", units.PLAN_NAME]
    assert ours["_pass1/inputs.table"] == theirs["_pass1/inputs.table"]
    plan_here = json.loads(ours[units.PLAN_NAME])
    plan_there = json.loads(theirs[units.PLAN_NAME])
    assert plan_here.pop("out") == str(here) and plan_there.pop("out") == str(there)
    assert plan_here == plan_there

    # The pool built from the saved plan: the planning's scratch is gone with the pool's.
    built = units.run_local(made)
    assert built["documents"] == 40
    assert not (there / "_pass1").exists()


def test_an_interrupted_planning_runs_again_to_the_same_bytes(sources, tmp_path):
    out = tmp_path / "p"
    deferred = planning.deferred(
        planner="shardcore.pool.plan_pool", kwargs=_arguments(sources, out), out=str(out),
        what="planning pool 'p'",
    )  # fmt: skip
    units.save_plan(deferred)
    units.run_unit(deferred, "plan")
    first = _saved(out)
    # Killed after saving the plan, before its marker: the unit runs again.
    units.marker_path(deferred.out, "plan").unlink()
    (out / units.PLAN_NAME).write_text("{half a plan")
    units.run_unit(deferred, "plan")
    assert _saved(out) == first


def test_a_planners_refusal_names_the_work(sources, tmp_path):
    out = tmp_path / "p"
    deferred = planning.deferred(
        planner="shardcore.pool.plan_pool",
        kwargs=_arguments(sources, out, filter="kind = 'klingon'"),
        out=str(out),
        what="planning pool 'p'",
    )
    with pytest.raises(EmptySelectionError, match=r"planning pool 'p': filter .* selects none"):
        units.run_local(deferred)
    assert not (out / units.PLAN_NAME).exists()
    with pytest.raises(ValueError, match="is not a function"):
        planning.deferred(planner="shardcore.pool.nothing", kwargs={}, out=str(out), what="x")

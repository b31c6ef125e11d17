"""The unit-of-work protocol every long shardcore stage follows (tokenize, pool, mixture).

A stage is split into a ``Plan``: JSON-serializable, made of ordered *phases*, each a list of
independent *units* (a file byte range, an input shard, a bucket...). Every unit of a phase
may run at the same time, in any process or on any host that sees the output directory;
phase k+1 starts when phase k is complete; ``finalize`` then writes the manifest, the
artifact's commit point. So the same plan runs in a local process pool (``run_local``) or as
thousands of Celery tasks, and the output bytes depend on the plan, never on the workers.

Units are idempotent. A unit writes its files under temporary names, renames them, then
writes its completion marker ``_units/<unit id>.done.json`` holding its stats. A rerun of a
finished unit returns the recorded stats and writes nothing: an interrupted job loses
nothing and duplicates nothing when rerun.

A unit's stats are a JSON object for its stage's ``finalize``; the names in ``UnitCounts``
mean the same in every stage, and they are all a runner (the job engine, a progress bar)
reads: a job's documents, tokens, bytes and bad input are the sums of its units' (see
``counts``). A stage that has nothing to count under a name leaves it out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from shardcore import atomic

MARKER_DIR = "_units"
PLAN_NAME = "_plan.json"


class BadReason(TypedDict):
    count: int
    samples: list[str]  # at most a few, each a line of text naming where


class UnitCounts(TypedDict, total=False):
    """The stats names every stage uses for what a job adds up over its units."""

    documents: int  # documents written (each document counted by one unit only)
    tokens: int  # tokens written
    bytes: int  # input bytes read
    bad_lines: int  # input records refused (default: the counts of bad_input)
    bad_input: dict[str, dict[str, BadReason]]  # {file: {reason: BadReason}}


COUNT_NAMES = ("documents", "tokens", "bytes", "bad_lines")


def counts(stats: dict[str, Any]) -> dict[str, int]:
    """A unit's ``UnitCounts`` numbers (0 where the stage leaves one out)."""
    out = {name: int(stats.get(name) or 0) for name in COUNT_NAMES}
    if "bad_lines" not in stats:
        bad = stats.get("bad_input") or {}
        out["bad_lines"] = sum(int(r["count"]) for f in bad.values() for r in f.values())
    return out


@dataclass
class Plan:
    stage: str  # the registered stage name, e.g. "tokenize"
    out: str  # output directory (absolute path or fsspec URL)
    params: dict[str, Any]
    phases: list[list[dict[str, Any]]]  # each unit is a dict with at least a unique "id"
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "out": self.out,
            "params": self.params,
            "phases": self.phases,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        return cls(data["stage"], data["out"], data["params"], data["phases"], data.get("meta", {}))

    def unit(self, unit_id: str) -> dict[str, Any]:
        for phase in self.phases:
            for unit in phase:
                if unit["id"] == unit_id:
                    return unit
        raise KeyError(f"plan for {self.out} has no unit {unit_id!r}")

    @property
    def num_units(self) -> int:
        return sum(len(p) for p in self.phases)


def save_plan(plan: Plan) -> Path:
    out = Path(plan.out)
    out.mkdir(parents=True, exist_ok=True)
    return atomic.write_text(out / PLAN_NAME, json.dumps(plan.to_json(), indent=1, sort_keys=True))


def load_plan(out: str | os.PathLike) -> Plan:
    return Plan.from_json(json.loads((Path(out) / PLAN_NAME).read_text()))


def marker_path(out: str | os.PathLike, unit_id: str) -> Path:
    return Path(out) / MARKER_DIR / f"{unit_id}.done.json"


def unit_result(out: str | os.PathLike, unit_id: str) -> dict[str, Any] | None:
    """The recorded stats of a finished unit, or None if it has not finished."""
    path = marker_path(out, unit_id)
    if not path.exists():
        return None
    return json.loads(path.read_text())


def mark_done(out: str | os.PathLike, unit_id: str, stats: dict[str, Any]) -> None:
    """Record a unit as finished (after its files are renamed into place)."""
    path = marker_path(out, unit_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps(stats, sort_keys=True, default=str))


# stage name -> (run_unit(plan, unit) -> stats, finalize(plan, [stats...]) -> manifest)
_STAGES: dict[str, tuple[Callable[..., dict], Callable[..., dict]]] = {}


def register_stage(
    name: str,
    *,
    run_unit: Callable[[Plan, dict], dict],
    finalize: Callable[[Plan, list[dict]], dict],
) -> None:
    _STAGES[name] = (run_unit, finalize)


def _stage(name: str) -> tuple[Callable[..., dict], Callable[..., dict]]:
    if name not in _STAGES:
        # Stages register on import of their module.
        import importlib

        importlib.import_module(f"shardcore.{name}")
    try:
        return _STAGES[name]
    except KeyError:
        raise KeyError(f"unknown stage {name!r}; known: {sorted(_STAGES)}") from None


def run_unit(plan: Plan, unit_id: str) -> dict[str, Any]:
    """Run one unit unless it already finished; returns its stats either way."""
    done = unit_result(plan.out, unit_id)
    if done is not None:
        return done
    runner, _ = _stage(plan.stage)
    stats = runner(plan, plan.unit(unit_id))
    mark_done(plan.out, unit_id, stats)
    return stats


def finalize(plan: Plan) -> dict[str, Any]:
    """Write the artifact's manifest from the stats of every unit (all must be done)."""
    _, finisher = _stage(plan.stage)
    stats = []
    missing = []
    for phase in plan.phases:
        for unit in phase:
            result = unit_result(plan.out, unit["id"])
            if result is None:
                missing.append(unit["id"])
            stats.append(result)
    if missing:
        raise RuntimeError(
            f"{plan.out}: cannot finalize, {len(missing)} unit(s) unfinished: {missing[:5]}"
        )
    return finisher(plan, stats)


def _run_unit_by_id(plan_json: dict, unit_id: str) -> dict:
    return run_unit(Plan.from_json(plan_json), unit_id)


def run_local(
    plan: Plan,
    *,
    workers: int = 1,
    on_unit_done: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run every phase of ``plan`` in this process (workers=1) or a process pool, then
    finalize. ``on_unit_done(unit, stats)`` is called as units finish (progress bars).

    One pool serves every phase: starting spawned workers costs each about half a
    CPU-second of imports, which a pool per phase would pay again at every phase boundary.
    Within a phase, units that give their size (``"bytes"``) are submitted largest first,
    so a big unit never starts last and leaves the other workers idle at the end of the
    phase (the output does not depend on the order)."""
    save_plan(plan)
    if workers <= 1 or max((len(p) for p in plan.phases), default=0) <= 1:
        for phase in plan.phases:
            for unit in phase:
                stats = run_unit(plan, unit["id"])
                if on_unit_done:
                    on_unit_done(unit, stats)
        return finalize(plan)

    import multiprocessing as mp
    from concurrent.futures import as_completed

    plan_json = plan.to_json()
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        for phase in plan.phases:
            ordered = sorted(phase, key=lambda u: -(u.get("bytes") or 0))  # stable
            futures = {pool.submit(_run_unit_by_id, plan_json, u["id"]): u for u in ordered}
            for fut in as_completed(futures):
                stats = fut.result()
                if on_unit_done:
                    on_unit_done(futures[fut], stats)
    return finalize(plan)

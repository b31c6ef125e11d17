"""Scrub: re-verify built artifacts against their manifests, as a file system scrub re-reads
every block against its checksum, to find corruption that happened at rest (a flipped bit,
a truncated or replaced file) before a training run reads it.

Stage "scrub" of the unit-of-work protocol: one phase, one unit per artifact directory
(``shardcore.verify.verify``: every file, every block, then the kind's content checks).
Units are independent, so a scrub of a large catalog spreads over every worker like any
job. Finalize writes ``manifest.json`` (kind "scrub") with one result per artifact: its
key (the caller's name for it), whether it is intact, what was checked, and the problems
(file, byte offset, message). The scrub judges; the caller decides what to mark.
"""

from __future__ import annotations

import os
from typing import Any

from shardcore import manifest as mf
from shardcore import storage, units, verify

STAGE = "scrub"
KIND = "scrub"
MAX_PROBLEMS = 20  # per artifact: the first ones name the damage; the rest add nothing


def plan_scrub(artifacts: list[dict[str, str]], out: str | os.PathLike) -> units.Plan:
    """``artifacts``: [{"key": "pool:3", "path": "/data/pool/..."}]; ``out``: where the
    scrub's report goes."""
    phase = [
        {"id": f"check-{i:05d}", "key": str(a["key"]), "path": str(a["path"])}
        for i, a in enumerate(artifacts)
    ]
    return units.Plan(STAGE, storage.resolve(out), {}, [phase], {})


def _run_unit(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    report = verify.verify(unit["path"])
    return {
        "key": unit["key"],
        "path": unit["path"],
        "ok": report.ok,
        "files": report.files_checked,
        "bytes": report.bytes_checked,
        "problems": [
            {"path": p.path, "offset": p.offset, "message": p.message}
            for p in report.problems[:MAX_PROBLEMS]
        ],
    }


def _finalize(plan: units.Plan, stats: list[dict[str, Any]]) -> dict[str, Any]:
    manifest = {
        "kind": KIND,
        "fingerprint": "",  # a report, not a data artifact: nothing is built from it
        "files": [],
        "results": stats,
        "checked": len(stats),
        "corrupt": sum(1 for s in stats if not s["ok"]),
        "bytes": sum(int(s["bytes"]) for s in stats),
    }
    mf.write_manifest(plan.out, manifest)
    return mf.read_manifest(plan.out)


def _reads(plan: units.Plan, unit: Any) -> list[str]:
    """Neither a unit nor finalize reads anything of the report's prefix: the artifacts
    checked are read where they are, the results come from the units' stats."""
    return []


units.register_stage(
    STAGE,
    run_unit=_run_unit,
    finalize=_finalize,
    reads=_reads,
    finalize_reads=_reads,
)

"""Stage "mixture" of the unit-of-work protocol, for a service that builds schedules as jobs:
the blend unit writes the pool column and the per-chunk counts (the blend is sequential:
one pass, in memory bounded by a chunk), then units over ranges of chunks write the record
column (and order each window, for a non-blend ordering), and finalize writes the manifest. The bytes are those of ``build_mixture``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shardcore import storage, units
from shardcore.mixture import chunked, ordered
from shardcore.mixture.build import _manifest_write, _schedule_write
from shardcore.mixture.layout import (
    CHUNK_SAMPLES,
    COUNTS_FILE,
    POOL_FILE,
    RECORD_FILE,
    RECORD_UNITS,
    SCHEDULE_UNIT,
    STAGE,
)
from shardcore.mixture.plan import load_pools
from shardcore.mixture.spec import MixtureSpec

BLEND_UNIT = "blend"


def plan_mixture(
    spec: MixtureSpec | Mapping[str, Any],
    out: str | os.PathLike,
    *,
    chunk_samples: int = CHUNK_SAMPLES,
) -> units.Plan:
    """The plan of a schedule build into ``out`` (a directory or an ``s3://`` prefix); pool
    paths must be absolute (or URLs). Checks the spec itself, not its pools (the unit reads
    them). On object storage one unit writes the whole record column (units exchange whole
    files there); locally ``RECORD_UNITS`` units each write a range of chunks."""
    if not isinstance(spec, MixtureSpec):
        spec = MixtureSpec.from_dict(spec)
    spec.validate()
    out = storage.resolve(out)
    record_units = 1 if storage.is_remote(out) else RECORD_UNITS
    params = {
        "spec": spec.to_dict(),
        "chunk_samples": int(chunk_samples),
        "record_units": record_units,
    }
    phases: list[list[dict[str, Any]]] = [
        [{"id": BLEND_UNIT}],
        [{"id": f"records-{k:03d}", "index": k} for k in range(record_units)],
    ]
    return units.Plan(STAGE, out, params, phases)


def _run_unit(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    spec = MixtureSpec.from_dict(plan.params["spec"])
    out = Path(plan.out)
    if unit["id"] == SCHEDULE_UNIT:  # a plan made before the build ran in units
        return _schedule_write(spec, out)
    pools = load_pools(spec)
    chunk = int(plan.params["chunk_samples"])
    record_units = int(plan.params["record_units"])
    if unit["id"] == BLEND_UNIT:
        return chunked.write_pool_column(
            spec, pools, out, chunk_samples=chunk, create_records=record_units > 1
        )
    return chunked.write_records(spec, pools, out, chunk, int(unit["index"]), record_units)


def _finalize(plan: units.Plan, stats: list[dict[str, Any]]) -> dict[str, Any]:
    spec = MixtureSpec.from_dict(plan.params["spec"])
    return _manifest_write(spec, load_pools(spec), Path(plan.out), stats[0])


def _reads(plan: units.Plan, unit: dict[str, Any]) -> list[str]:
    """The files of the schedule a unit reads (on object storage it fetches exactly these
    and lists nothing): the blend unit none (it reads the pools), a record unit the counts
    and the blend's pool column."""
    if unit["id"] in (BLEND_UNIT, SCHEDULE_UNIT):
        return []
    spec = MixtureSpec.from_dict(plan.params["spec"])
    return [COUNTS_FILE, POOL_FILE if spec.order == "blend" else ordered.BLEND_FILE]


def _finalize_reads(plan: units.Plan, stats: list[dict[str, Any]]) -> list[str]:
    """Finalize checksums the schedule's columns."""
    return [POOL_FILE, RECORD_FILE, COUNTS_FILE]


units.register_stage(
    STAGE,
    run_unit=_run_unit,
    finalize=_finalize,
    reads=_reads,
    finalize_reads=_finalize_reads,
    scratch=(ordered.BLEND_FILE,),
)

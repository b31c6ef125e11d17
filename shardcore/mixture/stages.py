"""Stage "mixture" of the unit-of-work protocol."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shardcore import storage, units
from shardcore.mixture.build import _manifest_write, _schedule_write
from shardcore.mixture.layout import SCHEDULE_UNIT, STAGE
from shardcore.mixture.plan import load_pools
from shardcore.mixture.spec import MixtureSpec

# Stage "mixture" of the unit-of-work protocol, for a service that builds schedules as jobs:
# one unit writes the schedule arrays (one blend over the whole budget, which does not
# split), finalize writes the manifest. The bytes are those of ``build_mixture``.


def plan_mixture(spec: MixtureSpec | Mapping[str, Any], out: str | os.PathLike) -> units.Plan:
    """The plan of a schedule build into ``out`` (a directory or an ``s3://`` prefix); pool
    paths must be absolute (or URLs). Checks the spec itself, not its pools (the unit reads
    them)."""
    if not isinstance(spec, MixtureSpec):
        spec = MixtureSpec.from_dict(spec)
    spec.validate()
    params = {"spec": spec.to_dict()}
    return units.Plan(STAGE, storage.resolve(out), params, [[{"id": SCHEDULE_UNIT}]])


def _run_unit(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    return _schedule_write(MixtureSpec.from_dict(plan.params["spec"]), Path(plan.out))


def _finalize(plan: units.Plan, stats: list[dict[str, Any]]) -> dict[str, Any]:
    spec = MixtureSpec.from_dict(plan.params["spec"])
    return _manifest_write(spec, load_pools(spec), Path(plan.out), stats[0])


units.register_stage(STAGE, run_unit=_run_unit, finalize=_finalize)

"""Materialize a mixture: its samples written as physical IndexedDataset shards in
schedule order, for streaming readers (object storage, plain Megatron readers) that cannot
follow a schedule.

Stage "materialize" of the unit-of-work protocol: one phase, one unit per output shard
(a contiguous range of training samples); a unit gathers its samples' records from the
pools (grouped by pool, so each pool is read through one memmap) and writes
``shards/mix-XXXXX.bin/.idx`` (one sequence of seq_len + 1 tokens per sample). Finalize
writes the manifest (kind "materialized": seq_len, shards, cumulative_records, checksums),
the same fields a pool has, so ``shardcore.locate.locate_pool`` resumes in it. Trade-off:
it copies every token once (the mixture itself copies nothing), in exchange for purely
sequential reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shardcore import limits, storage, units, verify
from shardcore import manifest as mf
from shardcore.errors import ManifestError
from shardcore.formats import IndexedWriter
from shardcore.mixture import Mixture
from shardcore.pool import PoolReader

if TYPE_CHECKING:
    from shardcore.executors.base import Executor

STAGE = "materialize"
KIND = "materialized"


def shard_prefix(k: int) -> str:
    return f"shards/mix-{k:05d}"


def plan_materialize(
    mixture: str | os.PathLike, out: str | os.PathLike, *, shard_bytes: int = 64 << 20
) -> units.Plan:
    shard_bytes = limits.size("shard_bytes", shard_bytes)
    mix = Mixture(mixture)
    itemsize = np.dtype(mix.manifest["dtype"]).itemsize
    per_sample = (mix.seq_len + 1) * itemsize
    per_shard = max(1, shard_bytes // per_sample)
    n = mix.num_samples
    phase = [
        {"id": f"shard-{k:05d}", "shard": k, "start": a, "stop": min(n, a + per_shard)}
        for k, a in enumerate(range(0, n, per_shard))
    ]
    mixture = storage.resolve(mixture)
    params = {"mixture": mixture, "shard_bytes": int(shard_bytes)}
    # The pools are read through the mixture's manifest (Pool copies remote ones).
    meta = {"fingerprint": mix.manifest["fingerprint"], "artifacts": [mixture]}
    return units.Plan(STAGE, storage.resolve(out), params, [phase], meta)


def _run_unit(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:

    mix = Mixture(plan.params["mixture"])
    a, b = int(unit["start"]), int(unit["stop"])
    pidx = np.asarray(mix.pool_index[a:b])
    rec = np.asarray(mix.record_index[a:b])
    width = mix.seq_len + 1
    dtype = np.dtype(mix.manifest["dtype"])
    tokens = np.empty((b - a, width), dtype=dtype)
    for i in np.unique(pidx).tolist():
        sel = np.flatnonzero(pidx == i)
        pool = PoolReader(mix.pools[i]["path"])
        entries = mf.files_by_path(pool.manifest)
        cumulative = np.asarray(pool.cumulative, dtype=np.int64)
        shard_of = np.searchsorted(cumulative, rec[sel], side="right") - 1
        for shard in np.unique(shard_of).tolist():
            here = sel[shard_of == shard]
            _check_records(pool, entries, shard, rec[here] - cumulative[shard], width, dtype)
            # Records of a pool shard are fixed-width rows: one fancy-indexed gather.
            rows = np.asarray(pool.reader(shard).tokens).reshape(-1, width)
            tokens[here] = rows[rec[here] - cumulative[shard]]
    rel = shard_prefix(int(unit["shard"]))
    with IndexedWriter(Path(plan.out) / rel, dtype) as w:
        w.add_many(tokens.ravel(), np.full(b - a, width, dtype=np.int64))
    # Its files' manifest entries (block checksums), so that finalize reads no shard.
    files = [verify.file_entry(plan.out, f"{rel}{ext}") for ext in (".bin", ".idx")]
    return {
        "shard": int(unit["shard"]),
        "records": b - a,
        "tokens": int(tokens.size),
        "files": files,
    }


def _check_records(
    pool: PoolReader,
    entries: Mapping[str, dict[str, Any]],
    shard: int,
    rows: np.ndarray,
    width: int,
    dtype: np.dtype,
) -> None:
    """Verify the blocks of the pool shard that hold ``rows`` (and its whole .idx, which
    the reader loads) before copying them: a corrupt pool fails the unit naming the file
    and byte range, and never reaches the copy."""
    prefix = pool.manifest["shards"][shard]["prefix"]
    for ext in (".idx", ".bin"):
        if f"{prefix}{ext}" not in entries:
            raise ManifestError(f"{pool.path}: manifest lists no {prefix}{ext}")
    verify.check_read(pool.path, entries[f"{prefix}.idx"])
    start = np.asarray(rows, dtype=np.int64) * (width * dtype.itemsize)
    verify.check_read(
        pool.path,
        entries[f"{prefix}.bin"],
        np.stack([start, start + width * dtype.itemsize], 1),  # type: ignore[arg-type]
    )


def _finalize(plan: units.Plan, stats: list[dict[str, Any]]) -> dict[str, Any]:
    mix = Mixture(plan.params["mixture"])
    out = Path(plan.out)
    shards, cumulative = [], [0]
    files: list[dict[str, Any]] = []
    for st in sorted(stats, key=lambda s: s["shard"]):
        prefix = shard_prefix(st["shard"])
        shards.append({"prefix": prefix, "records": st["records"], "first_record": cumulative[-1]})
        cumulative.append(cumulative[-1] + st["records"])
        # Block checksums let ``shardyard verify`` name the corrupt byte range; a unit
        # recorded them as it wrote its shard (one recorded before that: read here).
        files += st.get("files") or [
            verify.file_entry(out, f"{prefix}{ext}") for ext in (".bin", ".idx")
        ]
    m = mix.manifest
    manifest = {
        "kind": KIND,
        # The mixture by its fingerprint (a parent), not its location: the same copy
        # made from a mixture on disk or on object storage has one fingerprint.
        "fingerprint": mf.fingerprint(
            KIND, parents=[m["fingerprint"]], params={"shard_bytes": plan.params["shard_bytes"]}
        ),
        "parents": [m["fingerprint"]],
        "mixture": plan.params["mixture"],
        "tokenizer": m.get("tokenizer"),
        "dtype": m["dtype"],
        "seq_len": m["seq_len"],
        "record_tokens": m["seq_len"] + 1,
        "num_records": cumulative[-1],
        "num_tokens": cumulative[-1] * (m["seq_len"] + 1),
        "stages": m["stages"],
        "shards": shards,
        "cumulative_records": cumulative,
        "files": files,
    }
    mf.write_manifest(out, manifest)
    return mf.read_manifest(out)


def _reads(plan: units.Plan, unit: dict[str, Any]) -> list[str]:
    """A unit reads nothing of the copy (the mixture and its pools are its inputs)."""
    return []


def _finalize_reads(plan: units.Plan, stats: Sequence[dict[str, Any]]) -> list[str]:
    """Finalize reads nothing of the copy either (the units' stats hold its files'
    entries), but for units recorded before they did."""
    return [
        f"{shard_prefix(st['shard'])}{ext}"
        for st in stats
        if not st.get("files")
        for ext in (".bin", ".idx")
    ]


units.register_stage(
    STAGE, run_unit=_run_unit, finalize=_finalize, reads=_reads, finalize_reads=_finalize_reads
)


def materialize(
    mixture: str | os.PathLike,
    out: str | os.PathLike,
    *,
    workers: int = 1,
    shard_bytes: int = 64 << 20,
    progress: Callable[[dict, dict], None] | None = None,
    executor: Executor | None = None,
) -> dict[str, Any] | None:
    """Plan and run a materialization, in local processes or on ``executor``; returns the
    manifest (None when the executor only submitted the work)."""
    plan = plan_materialize(mixture, out, shard_bytes=shard_bytes)
    if executor is not None:
        return executor.run(plan, on_unit_done=progress)
    return units.run_local(plan, workers=workers, on_unit_done=progress)

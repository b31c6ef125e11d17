"""Pools: select documents of tokenized sources, hold out a validation slice, shuffle them
globally at document level, pack them into records of seq_len + 1 tokens, write shards.

The stage ``pool`` follows the unit-of-work protocol (``shardcore.units``):

* phase 1, one unit per input shard: select its documents (``shardcore.select``), route
  each to the training or the validation pool by a hash of its identity, draw its bucket
  (``shardcore.shuffle``), and write the shard's selected documents grouped by bucket:
  their metadata (``_pass1/in-XXXXX.docs.arrow``, which holds each document's input row:
  its *reference*) and bucket offsets, and, with ``staging="tokens"`` only, a copy of
  their tokens (``.tokens``);
* phase 2, one unit per bucket: load the bucket's documents in shard order (gathered from
  the input shards by reference with positioned reads, or read from the staged copies),
  order them (``order_bucket``), pack them (``shardcore.pack``) and write one output
  shard ``shards/pool-XXXXX`` (IndexedDataset ``.bin``/``.idx``, ``.segments.npz``,
  ``.docs.parquet``), every file fsynced before the unit is marked done;
* finalize: ``documents.parquet``, checksums, the validation pool's manifest in ``val/``,
  then the pool's ``manifest.json``, the commit point.

Both stagings load the same tokens in the same order into the same packing code, so they
write the same bytes. "references" writes the data once (the output) instead of twice;
"tokens" (the default on network and FUSE file systems) turns pass 2's random reads of
the inputs into sequential reads of a staged copy.

Memory: a pass-2 unit holds one bucket's tokens plus a bounded chunk; K (the number of
buckets) is chosen so that a bucket is about a quarter of ``memory``, and at least enough
buckets for shards of about ``shard_size`` bytes. A pass-1 unit reads its input shard
through np.memmap and holds its per-document metadata plus a bounded chunk. The output
bytes depend on the inputs and parameters only, never on the number of workers or the
staging.

Pool directory::

    manifest.json        kind "pool", counts, shards, cumulative_records, files, ...
    documents.parquet    one row per pool document, in pool order (source, doc_id, ...)
    shards/pool-XXXXX.{bin,idx,segments.npz,docs.parquet}
    val/                 the validation pool, same layout, its own manifest
"""

from __future__ import annotations

from shardcore import units, verify
from shardcore.pool.finalize import finalize_pool, finalize_reads
from shardcore.pool.io import release_memory
from shardcore.pool.layout import (
    DOCUMENTS_NAME,
    KEY_COL,
    KIND,
    PASS1_DIR,
    ROW_COL,
    SHARD_COL,
    SHARDS_DIR,
    SOURCE_COL,
    SOURCE_FP_COL,
    SPLITS,
    STAGE,
    STAGINGS,
    VAL_DIR,
    group_buckets,
    group_rel,
    pass1_rel,
    shard_prefix,
    staging_of,
    val_mask,
)
from shardcore.pool.merge import run_merge
from shardcore.pool.pass1 import run_assign
from shardcore.pool.pass2 import run_bucket
from shardcore.pool.plan import build_pool, plan_pool
from shardcore.pool.reader import PoolReader, check_pool

# pyarrow (and DuckDB, through shardcore.select) are imported inside the functions that
# read or write Parquet/Arrow: a loader process that only reads records through
# ``PoolReader`` and a bucket's pack-and-write loop never need them (about 40 MB of RSS
# per process).

# The reader's earlier name, kept for callers.
Pool = PoolReader

__all__ = [
    "DOCUMENTS_NAME",
    "KEY_COL",
    "KIND",
    "PASS1_DIR",
    "ROW_COL",
    "SHARDS_DIR",
    "SHARD_COL",
    "SOURCE_COL",
    "SOURCE_FP_COL",
    "SPLITS",
    "STAGE",
    "STAGINGS",
    "VAL_DIR",
    "Pool",
    "PoolReader",
    "build_pool",
    "plan_pool",
    "shard_prefix",
    "val_mask",
]


def run_unit(plan: units.Plan, unit: dict) -> dict:
    try:
        if "input" in unit:
            return run_assign(plan, unit)
        if "group" in unit:
            return run_merge(plan, unit)
        return run_bucket(plan, unit)
    finally:
        release_memory()


def unit_reads(plan: units.Plan, unit: dict) -> list[str]:
    """The pool's files a unit reads (on object storage, it fetches exactly these): pass 1
    none (its input shard is an input artifact), a merge unit every input's pass-1 files,
    a pass-2 unit its group's merged files."""
    tokens = staging_of(plan) == "tokens"
    if "input" in unit:
        return []
    if "group" in unit:
        files = [pass1_rel(i) for i in range(len(plan.meta["inputs"]))]
    else:
        gb = plan.meta["splits"][unit["split"]]["first_bucket"] + unit["bucket"]
        files = [group_rel(gb // group_buckets(plan))]
    return [rel for f in files for rel in (f if tokens else f[1:])]


units.register_stage(
    STAGE,
    run_unit=run_unit,
    finalize=finalize_pool,
    reads=unit_reads,
    finalize_reads=finalize_reads,
)
verify.register_check(KIND, check_pool)

"""Pools: select documents of tokenized sources, hold out a validation slice, shuffle them
globally at document level, pack them into records of seq_len + 1 tokens, write shards.

The stage ``pool`` follows the unit-of-work protocol (``shardcore.units``), in phases:

* pass 1, one unit per input shard: select its documents (``shardcore.filters``), route
  each to the training or the validation pool by a hash of its identity, draw its bucket
  (``shardcore.shuffle``), and write the shard's selected documents sorted by bucket into
  one table (``_pass1/in/NNNN/in-NNNNNNN.arrow``: their metadata, each one's bucket,
  input and *reference*, the byte offset of its tokens) and, with ``staging="tokens"``
  only, a copy of their tokens in the same order (``.tokens``);
* the merge, a tree of ``levels`` = ceil(log_64 inputs) levels (``shardcore.pool.merge``):
  a unit reads one bucket range of at most 64 files of the level below (consecutive
  inputs) and writes them as one table sorted by bucket (then input, then input row); the
  last level's ranges are the bucket groups (``_pass1/group/NNNN/...``, and the group's
  staged tokens), so that pass 2 reads one file whatever the number of inputs;
* pass 2, one unit per bucket: its rows of its group's table, ordered (``order_bucket``)
  and packed (``shardcore.pack``); each document is read once, straight into the output
  window where it goes (positioned reads from the input shards, or from the staged
  copy), and the shard ``shards/pool-XXXXX`` (IndexedDataset ``.bin``/``.idx``,
  ``.segments.npz``, ``.docs.parquet``) is written (its tokens with direct I/O,
  ``shardcore.direct``), checksummed as it is written, its files committed together
  and durable before the unit is marked done;
* finalize: ``documents.parquet``, the manifests from the units' checksums (the
  validation pool's in ``val/``, then the pool's ``manifest.json``, the commit point). A
  split of more than 1,000 buckets fans its shards out (``shards/DDDD/pool-XXXXXXX``) and
  keeps its documents table partitioned: the shards' sidecars are the table
  (``"documents_table": "shards"``, read by ``PoolReader.documents``), so its finalize
  reads no shard and writes only the manifest.

Total overhead: pass 1, pass 2 and every merge unit open O(1) files (a merge unit at most
64); the merge opens about levels x max(inputs, fan-in x groups) files in all and
rewrites the documents' metadata once per level (where one merge of every input per group made
inputs x groups reads). Scratch files are fanned out, a thousand per directory.

Both stagings load the same tokens in the same order into the same packing code, so they
write the same bytes. "references" writes the data once (the output) instead of twice;
"tokens" (the default on network and FUSE file systems) turns pass 2's random reads of
the inputs into reads of a local staged copy.

Memory: every unit loads the plan's header, which does not list the inputs: their table
(per input its source, shard, path, selected documents and tokens per split, joined
annotation files) is a file of the plan, ``_pass1/inputs.table`` (``shardcore.pool.inputs``,
written with ``_plan.json``, removed with the scratch by finalize), of which pass 1 reads
its input's row and pass 2 with "references" staging its bucket's inputs' rows; the merge
and pass 2 with "tokens" staging read none. So no unit's memory depends on the number of
inputs (``bench/scale/pool.py``). Plans made before the table (every input in the
header, each split's per-input counts in its entry: a job interrupted across an upgrade)
are still read as they are and build the same bytes.

A pass-2 unit holds its bucket's metadata and two output windows (a bucket whose documents
come from more than 256 inputs: its tokens too, read input by input); K (the number of
buckets) is chosen so that a bucket is about a quarter of ``memory``, and at least enough
buckets for shards of about ``shard_size`` bytes. A merge unit holds about
one group's metadata (groups are sized to a 32nd of ``memory``: its footprint is ~5x that;
a range of an intermediate level holds F ** L / inputs <= 1.3 groups' worth on average,
for inputs of similar sizes). A pass-1 unit reads its input shard through np.memmap and
holds its per-document metadata plus a bounded chunk. The output bytes depend on the
inputs and parameters only, never on the number of workers, the staging, the grouping or
the merge tree.

Pool directory::

    manifest.json        kind "pool", counts, shards, cumulative_records, files, ...
    documents.parquet    one row per pool document, in pool order (source, doc_id, ...);
                         absent where the table is partitioned (the shards' sidecars)
    shards/pool-XXXXX.{bin,idx,segments.npz,docs.parquet}   (shards/DDDD/pool-XXXXXXX.*
                         above 1,000 buckets)
    val/                 the validation pool, same layout, its own manifest

While it is built: ``_plan.json`` and ``_units/`` (the units' markers), and the scratch
``_pass1/`` (the plan's input table, pass 1's and the merge's files; removed by finalize).
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
    bucket_sources,
    merge_children,
    shard_prefix,
    staging_of,
    val_mask,
)
from shardcore.pool.merge import run_merge
from shardcore.pool.pass1 import run_assign
from shardcore.pool.pass2 import run_bucket
from shardcore.pool.plan import build_pool, plan_pool
from shardcore.pool.reader import PoolReader, check_pool

# pyarrow (and DuckDB, through shardcore.filters) are imported inside the functions that
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
        if "group" in unit or "level" in unit:
            return run_merge(plan, unit)
        return run_bucket(plan, unit)
    finally:
        release_memory()


def unit_reads(plan: units.Plan, unit: dict) -> list[str]:
    """The pool's files a unit reads (on object storage, it fetches exactly these): pass 1
    the plan's input table (its input shard is an input artifact), a merge unit the files
    of the level below it that it merges (at most ``MERGE_FAN_IN``), a pass-2 unit its
    group's merged files or, in a pool without a merge, every input's pass-1 files (and
    with "references" staging the input table)."""
    tokens = staging_of(plan) == "tokens"
    table = [plan.meta["inputs_table"]["path"]] if "inputs_table" in plan.meta else []
    if "input" in unit:
        return table
    if "group" in unit or "level" in unit:
        files = merge_children(plan, unit)[2]
    else:
        gb = plan.meta["splits"][unit["split"]]["first_bucket"] + unit["bucket"]
        files = bucket_sources(plan, gb)
    return [
        rel
        for tokens_rel, docs_rel in files
        for rel in ((tokens_rel,) if tokens else ()) + (docs_rel,)
    ] + ([] if tokens or "bucket" not in unit else table)


units.register_stage(
    STAGE,
    run_unit=run_unit,
    finalize=finalize_pool,
    reads=unit_reads,
    finalize_reads=finalize_reads,
    streamed_results=True,
)
verify.register_check(KIND, check_pool)

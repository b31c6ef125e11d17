"""The ``minhash`` annotator of one tokenized source as units, so that no process holds the
corpus: the stage ``annotation`` (``shardcore.annotate.stage``) plans these phases after
its signature units instead of computing the clusters in ``finalize``.

The signature units are the stage's own (``annotate_shard``: the shard's signatures and
exact hashes into ``work/shard-NNNNN``); each then files its bucket rows by partition
(``work/keys/shard-NNNNN``). The bucket units, the rounds over ranges of documents and
their resolve, count and tally units are those of the cross-source stage
(``shardcore.annotate.neardup``, ``shardcore.annotate.components``) on the source's
documents numbered from 0 in shard order; a write unit per shard reads its shard's cluster,
size and rank from the ranges it covers and writes the shard's Parquet file, so
``finalize`` finds every file written and only commits. The columns are those the
annotator's own ``finish`` computes in one process (tested); a plan made before these
phases (one phase) still clusters in ``finalize``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from shardcore import units
from shardcore.annotate import neardup
from shardcore.annotate.artifact import _path, _table, _work_file, _write_parquet
from shardcore.annotate.artifact import plan as artifact_plan
from shardcore.annotate.components import ROUNDS, Components
from shardcore.annotate.dedup import NearDuplicates
from shardcore.npy_rows import read_blocks

WORK = "work"


def phases(shards: list[dict[str, Any]], n: int, params: dict[str, Any]) -> list[list[dict]]:
    """The phases after the signature units of a source of ``n`` documents in ``shards``
    (the artifact plan's), and the plan meta they need."""
    partitions = neardup.partitions_for(n, params)
    write = [{"id": f"write-{s['index']:05d}", "shard": s["index"]} for s in shards]
    return [*neardup.cluster_phases(partitions), write]


def meta(n: int, params: dict[str, Any]) -> dict[str, Any]:
    return {"partitions": neardup.partitions_for(n, params), "rounds": ROUNDS}


def _starts(plan: units.Plan) -> np.ndarray:
    """Each shard's first document (numbered from 0 in shard order), then the total."""
    counts = [s["documents"] for s in _artifact(plan)["shards"]]
    return np.cumsum([0, *counts]).astype(np.int64)


def _artifact(plan: units.Plan) -> dict[str, Any]:
    return artifact_plan(plan.params["tokenized"], _annotator(plan))


def _annotator(plan: units.Plan) -> NearDuplicates:
    return NearDuplicates(**plan.params["params"])


def _components(plan: units.Plan) -> Components:
    parts = plan.meta["partitions"]
    return Components(Path(plan.out) / WORK / "cc", plan.meta["documents"], parts, parts)


def file_shard_keys(plan: units.Plan, shard: int) -> None:
    """After the signature unit of ``shard``: its bucket rows, by partition, a block of
    signatures at a time."""
    out = Path(plan.out)
    work = out / _work_file(shard)
    first = int(_starts(plan)[shard])
    keys = out / WORK / "keys" / f"shard-{shard:05d}"
    sigs = read_blocks(work / "sig.npy", neardup.KEY_BATCH)
    exacts = read_blocks(work / "exact.npy", neardup.KEY_BATCH)
    with neardup.PartitionKeys(keys, _annotator(plan).params, plan.meta["partitions"], first) as k:
        for sig, exact in zip(sigs, exacts, strict=True):
            k.add(sig, exact)


def run_unit(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    """A unit after the signatures: bucket, round, resolve, count, tally or write."""
    kind = unit["id"].split("-", 1)[0]
    if kind == "bucket":
        return _run_bucket(plan, int(unit["partition"]))
    if kind == "write":
        return _run_write(plan, int(unit["shard"]))
    done = neardup.run_on_ranges(_components(plan), unit)
    if done is None:
        raise ValueError(f"annotation: no unit of kind {kind!r} ({unit['id']})")
    return done


def _run_bucket(plan: units.Plan, q: int) -> dict[str, Any]:
    out = Path(plan.out)
    shards = range(len(_starts(plan)) - 1)
    rows = np.concatenate(
        [np.load(out / WORK / "keys" / f"shard-{j:05d}" / f"p{q}.npy") for j in shards]
        or [np.empty(0, neardup.ROW)]
    )
    sigs = [np.load(out / _work_file(j) / "sig.npy", mmap_mode="r") for j in shards]
    exacts = [np.load(out / _work_file(j) / "exact.npy", mmap_mode="r") for j in shards]
    params = _annotator(plan).params
    a, b = neardup.verified_edges(rows, sigs, _starts(plan), params, exacts)
    neardup.file_edges(_components(plan), q, a, b)
    return {"candidates": int(len(rows)), "edges": int(len(a))}


def _run_write(plan: units.Plan, shard: int) -> dict[str, Any]:
    out, ann = Path(plan.out), _annotator(plan)
    entry = _artifact(plan)["shards"][shard]
    lo = int(_starts(plan)[shard])
    cluster, size, rank = _components(plan).cluster_columns(lo, lo + entry["documents"])
    cols = {
        "dup_cluster": cluster,
        "dup_size": size.astype(np.int32),
        "dup_rank": rank.astype(np.int32),
        "exact_hash": np.load(out / _work_file(shard) / "exact.npy"),
    }
    _write_parquet(_table(ann, entry["first_doc_id"], cols, entry["documents"]), out / _path(entry))
    return {"written": int(entry["documents"])}

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
from shardcore.annotate import buckets, neardup
from shardcore.annotate.artifact import _path, _table, _work_file, _write_parquet, file_entry
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
    # declared_reads: every round unit writes the files a later one reads (see
    # ``neardup.range_reads``; the units of a plan without it list the prefix).
    return {
        "partitions": neardup.partitions_for(n, params),
        "rounds": ROUNDS,
        "declared_reads": True,
        # A bucket unit on object storage reads its candidates' signatures and exact hashes
        # by ranges (``buckets.row_files``); a plan without it fetches the files whole.
        "ranged_signatures": True,
    }


def _starts(plan: units.Plan) -> np.ndarray:
    """Each shard's first document (numbered from 0 in shard order), then the total."""
    counts = [s["documents"] for s in _artifact(plan)["shards"]]
    return np.cumsum([0, *counts]).astype(np.int64)


def _artifact(plan: units.Plan) -> dict[str, Any]:
    return artifact_plan(plan.params["tokenized"], _annotator(plan))


def _annotator(plan: units.Plan) -> NearDuplicates:
    return NearDuplicates(**plan.params["params"])


def _components(plan: units.Plan, root: str | None = None) -> Components:
    """The clusters' files under the output (or under ``root``: ``""`` for keys relative
    to it)."""
    parts = plan.meta["partitions"]
    where = Path(plan.out if root is None else root) / WORK / "cc"
    return Components(where, plan.meta["documents"], parts, parts)


def file_shard_keys(plan: units.Plan, shard: int) -> None:
    """After the signature unit of ``shard``: its bucket rows, by partition, a block of
    signatures at a time."""
    out = Path(plan.out)
    work = out / _work_file(shard)
    first = int(_starts(plan)[shard])
    keys = out / WORK / "keys" / f"shard-{shard:05d}"
    sigs = read_blocks(work / "sig.npy", neardup.KEY_BATCH)
    exacts = read_blocks(work / "exact.npy", neardup.KEY_BATCH)
    with buckets.PartitionKeys(keys, _annotator(plan).params, plan.meta["partitions"], first) as k:
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
        or [np.empty(0, buckets.ROW)]
    )
    ranged = bool(plan.meta.get("ranged_signatures"))
    sigs = buckets.row_files(out, [f"{_work_file(j)}/sig.npy" for j in shards], ranged=ranged)
    exacts = buckets.row_files(out, [f"{_work_file(j)}/exact.npy" for j in shards], ranged=ranged)
    params = _annotator(plan).params
    a, b = buckets.verified_edges(rows, sigs, _starts(plan), params, exacts)
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
    final = out / _path(entry)
    final.parent.mkdir(parents=True, exist_ok=True)  # on a host that ran no shard unit
    _write_parquet(_table(ann, entry["first_doc_id"], cols, entry["documents"]), final)
    # Its file's manifest entry, so that finalize reads no shard.
    return {"written": int(entry["documents"]), "file": file_entry(out, _path(entry))}


def reads(plan: units.Plan, unit: dict[str, Any]) -> list[str] | None:
    """The files of the output a unit after the signatures reads: a bucket unit every
    shard's rows of its partition (and, in a plan made before it read them by ranges, the
    signatures and exact hashes), the clusters' units what
    ``neardup.range_reads`` says, a write unit the clusters of its documents' ranges
    (``neardup.cluster_reads``) and its shard's exact hashes."""
    kind = unit["id"].split("-", 1)[0]
    shards = range(len(_starts(plan)) - 1)
    if kind == "bucket":
        q = int(unit["partition"])
        keys = [f"{WORK}/keys/shard-{j:05d}/p{q}.npy" for j in shards]
        if plan.meta.get("ranged_signatures"):  # its candidates' rows read by ranges
            return keys
        return keys + [
            f"{_work_file(j)}/{name}" for j in shards for name in ("sig.npy", "exact.npy")
        ]
    if kind == "write":
        shard = int(unit["shard"])
        lo = int(_starts(plan)[shard])
        hi = lo + _artifact(plan)["shards"][shard]["documents"]
        return [
            *neardup.cluster_reads(_components(plan, ""), lo, hi),
            f"{_work_file(shard)}/exact.npy",
        ]
    return neardup.range_reads(plan, _components(plan, ""), unit)

"""Finalize: per split, the pool's ``documents.parquet``, checksums of every file and the
manifest (the validation pool's first, the main manifest last: the commit point).

The shards' checksums come from the units that wrote them (pass 2). A split of more than
FANOUT buckets keeps its documents table partitioned (its shards' sidecars, read in shard
order by ``PoolReader.documents``): its finalize reads no shard and writes only the
manifest, whatever the pool's size."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

from shardcore import atomic, units
from shardcore import manifest as mf
from shardcore.pool.io import file_entry
from shardcore.pool.layout import (
    DOCUMENTS_NAME,
    KIND,
    PARTITIONED,
    PASS1_DIR,
    SOURCE_COL,
    SOURCE_FP_COL,
    SPLITS,
    VAL_DIR,
    arrow_array,
    arrow_strings,
    as_numpy,
    partitioned,
    shard_prefix,
    split_dir,
)


def finalize_pool(plan: units.Plan, stats: list[dict]) -> dict[str, Any]:
    phase2 = plan.phases[-1]
    by_id = dict(zip([u["id"] for p in plan.phases for u in p], stats, strict=True))
    manifests = {}
    for split in reversed(SPLITS):  # the validation pool first: the main manifest is last
        buckets = [(u["bucket"], by_id[u["id"]]) for u in phase2 if u["split"] == split]
        if split == "val" and not buckets:
            continue
        manifests[split] = _finalize_split(plan, split, buckets)
    shutil.rmtree(Path(plan.out) / PASS1_DIR, ignore_errors=True)
    main = manifests["train"]
    if "val" in manifests:
        main["val"] = {
            "path": VAL_DIR,
            "fingerprint": manifests["val"]["fingerprint"],
            "num_records": manifests["val"]["num_records"],
            "documents": manifests["val"]["documents"],
        }
    mf.write_manifest(plan.out, main)
    return main


def finalize_reads(plan: units.Plan, stats: list[dict]) -> list[str]:
    """The files finalize reads (on object storage, it fetches exactly these): the
    documents sidecar of every shard, for the pool's documents table; none for a split
    whose table stays partitioned."""
    by_id = dict(zip([u["id"] for p in plan.phases for u in p], stats, strict=True))
    keys = []
    for u in plan.phases[-1]:
        n = plan.meta["splits"][u["split"]]["num_buckets"]
        if by_id[u["id"]]["records"] and not partitioned(n):
            base = "" if u["split"] == "train" else f"{VAL_DIR}/"
            keys.append(f"{base}{shard_prefix(u['bucket'], n)}.docs.parquet")
    return keys


def _finalize_split(plan: units.Plan, split: str, buckets: list[tuple[int, dict]]) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta, params = plan.meta, plan.params
    info = meta["splits"][split]
    out_dir = split_dir(plan.out, split)
    out_dir.mkdir(parents=True, exist_ok=True)
    shards, cumulative = [], [0]
    num_docs = num_tokens = padding = 0
    split_table = partitioned(info["num_buckets"])
    with (
        contextlib.nullcontext()
        if split_table
        else atomic.atomic_path(out_dir / DOCUMENTS_NAME) as tmp_docs
    ):
        writer = None
        fps = arrow_strings([s["fingerprint"] for s in meta["sources"]])
        for b, st in buckets:
            if not st["records"]:
                continue
            prefix = shard_prefix(b, info["num_buckets"])
            shards.append(
                {
                    "prefix": prefix,
                    "records": st["records"],
                    "first_record": cumulative[-1],
                    "documents": st["documents"],
                    "first_document": num_docs,
                    "tokens": st["tokens"],
                    "padding": st["padding"],
                }
            )
            cumulative.append(cumulative[-1] + st["records"])
            num_docs += st["documents"]
            num_tokens += st["tokens"]
            padding += st["padding"]
            if split_table:
                continue  # the shards' sidecars are the table: nothing read, nothing written
            with pq.ParquetFile(out_dir / f"{prefix}.docs.parquet") as f:
                table = f.read()
            src = as_numpy(table.column(SOURCE_COL))
            table = table.append_column(SOURCE_FP_COL, fps.take(arrow_array(src)))
            if writer is None:
                writer = pq.ParquetWriter(tmp_docs, table.schema)
            writer.write_table(table.cast(writer.schema))
        if not split_table:
            if writer is None:
                writer = pq.ParquetWriter(tmp_docs, pa.schema([(SOURCE_COL, pa.int32())]))
            writer.close()
    files = _file_entries(out_dir, buckets, documents=not split_table)
    manifest = {
        "kind": KIND,
        "split": split,
        "fingerprint": info["fingerprint"],
        "parents": [s["fingerprint"] for s in meta["sources"]],
        "sources": meta["sources"],
        "params": params,
        "shuffle": {
            "name": params["shuffle"],
            "num_buckets": info["num_buckets"],
            "seed": info["seed"],
            "options": params["shuffle_options"],
        },
        "tokenizer": meta["tokenizer"],
        "dtype": meta["dtype"],
        "seq_len": params["seq_len"],
        "record_tokens": params["seq_len"] + 1,
        "num_records": cumulative[-1],
        "num_tokens": num_tokens,
        "padding_tokens": padding,
        "documents": num_docs,
        "shards": shards,
        "cumulative_records": cumulative,
        "files": files,
    }
    if split_table:
        manifest["documents_table"] = PARTITIONED
    if split == "val":
        mf.write_manifest(out_dir, manifest)
    return manifest


def _file_entries(
    out_dir: Path, buckets: list[tuple[int, dict]], *, documents: bool = True
) -> list[dict]:
    """Every file's manifest entry, in path order: the shards' from their units' stats
    (checksummed where they were written), ``documents.parquet``'s hashed here. Stats
    recorded before units reported their files: every file is hashed here."""
    if not all("files" in st for _, st in buckets):
        files = []
        for path in sorted(out_dir.rglob("*")):
            rel = path.relative_to(out_dir).as_posix()
            if path.is_file() and _is_artifact_file(rel):
                files.append(file_entry(path, rel))
        return files
    files = [e for _, st in buckets for e in st["files"]]
    if documents:
        files.append(file_entry(out_dir / DOCUMENTS_NAME, DOCUMENTS_NAME))
    return sorted(files, key=lambda e: e["path"])


def _is_artifact_file(rel: str) -> bool:
    top = rel.split("/", 1)[0]
    if top in (units.MARKER_DIR, PASS1_DIR, VAL_DIR) or rel.startswith("."):
        return False
    return rel not in (*mf.MANIFEST_FILES, units.PLAN_NAME) and not rel.endswith(".tmp")

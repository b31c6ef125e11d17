"""Pass 1, one unit per input shard: select its documents, route each to the training or
the validation pool, draw its bucket, and write the shard's selected documents sorted by
bucket into one file (their metadata and where their tokens are), with "tokens" staging
also a copy of their tokens in the same order. Nothing it writes depends on how the merge
groups the buckets."""

from __future__ import annotations

import os

import numpy as np

from shardcore import atomic, filters, props, units, verify
from shardcore import manifest as mf
from shardcore.direct import write_all
from shardcore.errors import ManifestError
from shardcore.formats import IndexedReader
from shardcore.pool.inputs import InputTable
from shardcore.pool.io import write_run
from shardcore.pool.layout import (
    BUCKET_COL,
    INPUT_COL,
    KEY_COL,
    OFFSET_COL,
    ROW_COL,
    SHARD_COL,
    SOURCE_COL,
    SPLITS,
    arrow_array,
    chunk_tokens,
    column,
    pass1_paths,
    shuffle_module,
    staging_of,
    val_mask,
)
from shardcore.pool.pass2 import Documents


def run_assign(plan: units.Plan, unit: dict) -> dict:
    meta, params = plan.meta, plan.params
    i = unit["input"]
    inputs = InputTable(plan)
    spec = inputs.spec(i)
    source = meta["sources"][spec["source"]]
    module = shuffle_module(params["shuffle"])
    options = params["shuffle_options"]
    _check_input(source, spec["prefix"])
    reader = IndexedReader(spec["prefix"])
    rows, table = filters.select_shard(
        spec["sidecar"],
        params["filter"],
        props.type_from_text(meta.get("props_type")),
        spec.get("annotations"),
    )
    if len(reader) != _row_count(spec["sidecar"]):
        raise ManifestError(
            f"{spec['prefix']}: {len(reader)} sequences but its sidecar has "
            f"{_row_count(spec['sidecar'])} rows"
        )
    is_val = val_mask(
        source["fingerprint"], column(table, "doc_id", spec["sidecar"]), params["val_fraction"]
    )
    bucket = np.empty(rows.size, dtype=np.int64)
    key = np.empty(rows.size, dtype=np.int64)
    for k, split in enumerate(SPLITS):
        info = meta["splits"][split]
        mask = is_val if k else ~is_val
        if int(mask.sum()) != spec["docs"][k]:
            raise ManifestError(f"{spec['sidecar']}: changed since the pool was planned")
        if not mask.any():
            continue
        b, kk = module.assign(inputs.counts(split), i, info["seed"], info["num_buckets"], **options)
        bucket[mask] = b + info["first_bucket"]
        key[mask] = kk
    order = np.argsort(bucket, kind="stable")
    rows_o = rows[order]
    bucket_o = bucket[order]
    lengths = reader.lengths[rows_o].astype(np.int64)
    if not np.array_equal(lengths, column(table, "n_tokens", spec["sidecar"])[order]):
        raise ManifestError(f"{spec['sidecar']}: n_tokens disagrees with {spec['prefix']}.idx")
    csum = np.concatenate([[0], np.cumsum(lengths)])
    itemsize = reader.dtype.itemsize

    tokens_path, docs_path = pass1_paths(plan.out, i)
    docs_path.parent.mkdir(parents=True, exist_ok=True)
    if staging_of(plan) == "tokens":
        # The selected tokens in row order (by bucket), for the merge to copy range by
        # range. Not fsynced: a temporary as large as the data, deleted by finalize, usually before the
        # kernel writes it back at all; the merge checks its size against the offsets.
        docs_stream = Documents(
            [reader.tokens], np.zeros(rows.size), reader.starts[rows_o], lengths
        )
        buf = np.empty(chunk_tokens(plan), dtype=reader.dtype)
        with atomic.atomic_open(tokens_path, "wb", durable=False, buffering=0) as f:
            for w0 in range(0, docs_stream.total, buf.size):
                view = buf[: min(buf.size, docs_stream.total - w0)]
                docs_stream.fill(view, w0)
                write_all(f, view)
        offsets = csum[:-1] * itemsize
    else:
        # "references": where each document's tokens are in the input (read by pass 2).
        offsets = reader.index.pointers[rows_o].astype(np.int64)

    docs = table.take(arrow_array(order))
    docs = docs.append_column(SOURCE_COL, arrow_array(np.full(rows.size, spec["source"], np.int32)))
    docs = docs.append_column(SHARD_COL, arrow_array(np.full(rows.size, spec["shard"], np.int32)))
    docs = docs.append_column(ROW_COL, arrow_array(rows_o))
    docs = docs.append_column(KEY_COL, arrow_array(key[order]))
    docs = docs.append_column(BUCKET_COL, arrow_array(bucket_o))
    docs = docs.append_column(INPUT_COL, arrow_array(np.full(rows.size, i, np.int32)))
    docs = docs.append_column(OFFSET_COL, arrow_array(offsets))
    write_run(docs_path, docs)
    # Named apart from pass 2's documents/tokens: a job sums its units' documents and
    # tokens, and each document is counted once, when pass 2 writes it.
    return {
        "selected_documents": int(rows.size),
        "selected_tokens": int(csum[-1]),
        "val_documents": int(is_val.sum()),
    }


def _check_input(source: dict, prefix: str) -> None:
    """Verify every block of the input shard pass 1 reads (.idx, .docs.parquet) and pass 2
    gathers from (.bin) against its tokenized manifest, before anything is derived from
    it: a corrupt input fails the unit naming the file and byte range."""
    data = mf.read_manifest(source["path"])
    if "content" in source and mf.content_digest(data) != source["content"]:
        raise ManifestError(f"{source['path']}: its manifest changed since the pool was planned")
    rel = os.path.relpath(prefix, source["path"])
    verify.check_files_read(
        source["path"], data, [f"{rel}{ext}" for ext in (".idx", ".docs.parquet", ".bin")]
    )


def _row_count(sidecar: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(sidecar).metadata.num_rows

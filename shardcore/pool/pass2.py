"""Pass 2, one unit per bucket: load the bucket's documents in arrival order (gathered
from the input shards, or read from pass 1's staged copies), order them, pack them into
records and write one durable output shard."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from shardcore import atomic, pack, units
from shardcore.errors import ManifestError
from shardcore.formats import bin_path, encode_idx, idx_path, read_idx
from shardcore.pool.io import copy_ranges, read_spans, start_writeback, write_all
from shardcore.pool.layout import (
    KEY_COL,
    ROW_COL,
    arrow_array,
    as_numpy,
    chunk_tokens,
    pass1_paths,
    shard_prefix,
    shuffle_module,
    split_dir,
    staging_of,
)


class Documents:
    """Documents concatenated into one stream, in order: document d is
    ``sources[src[d]][starts[d] : starts[d] + lengths[d]]``, preceded by the token
    ``head`` (a BOS) if it is not None. ``fill`` copies any window of the stream, so the
    stream is never materialized: a window is the only buffer."""

    def __init__(
        self,
        sources: list[np.ndarray],
        src: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
        head: int | None = None,
    ):
        self.sources, self.head = sources, head
        self.src = np.asarray(src, dtype=np.int64)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        h = int(head is not None)
        self.out_start = np.zeros(self.lengths.size, dtype=np.int64)
        if self.lengths.size > 1:
            np.cumsum(self.lengths[:-1] + h, out=self.out_start[1:])
        self.out_end = self.out_start + self.lengths + h
        self.total = int(self.out_end[-1]) if self.lengths.size else 0

    def fill(self, view: np.ndarray, w0: int) -> None:
        """Copy stream positions [w0, w0 + view.size) into ``view``; positions past the
        end of the stream are left as they are."""
        w1 = w0 + view.size
        lo = int(np.searchsorted(self.out_end, w0, side="right"))
        hi = int(np.searchsorted(self.out_start, w1, side="left"))
        if lo >= hi:
            return
        first = self.out_start[lo:hi]
        if self.head is not None:
            heads = first[first >= w0]
            view[heads - w0] = self.head
            first = first + 1
        at = np.maximum(first, w0)
        n = np.minimum(first + self.lengths[lo:hi], w1) - at
        src_at = self.starts[lo:hi] + (at - first)
        dst_at = at - w0
        src = self.src[lo:hi]
        if len(self.sources) == 1:
            copy_ranges(view, dst_at, self.sources[0], src_at, n)
            return
        for k in np.unique(src).tolist():
            sel = src == k
            copy_ranges(view, dst_at[sel], self.sources[k], src_at[sel], n[sel])


def _write_records(
    prefix: Path, docs: Documents, width: int, dtype: np.dtype, chunk: int, pad_id: int
) -> int:
    """Write ``docs`` packed into records of ``width`` tokens (the last one padded with
    ``pad_id``) as the IndexedDataset ``prefix`` (one sequence per record; the ``.idx`` is
    ``formats.encode_idx``'s). Both files are durable (fdatasync) before they are renamed
    into place. Returns the number of records."""
    records = -(-docs.total // width)
    end = records * width
    buf = np.empty(max(1, chunk // width) * width, dtype=dtype)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_open(bin_path(prefix), "wb", buffering=0) as f:
        for w0 in range(0, end, buf.size):
            view = buf[: min(buf.size, end - w0)]
            docs.fill(view, w0)
            if w0 + view.size > docs.total:
                view[max(0, docs.total - w0) :] = pad_id
            write_all(f, view)
            start_writeback(f.fileno(), w0 * dtype.itemsize, view.nbytes)
    atomic.write_bytes(idx_path(prefix), encode_idx(dtype, np.full(records, width, dtype=np.int64)))
    return records


def run_bucket(plan: units.Plan, unit: dict) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta, params = plan.meta, plan.params
    split, b = unit["split"], unit["bucket"]
    info = meta["splits"][split]
    gb = info["first_bucket"] + b
    dtype = np.dtype(meta["dtype"])
    module = shuffle_module(params["shuffle"])
    # The bucket's documents in arrival order: from every pass-1 file (in input order).
    parts, tables = [], []
    for i in range(len(meta["inputs"])):
        tokens_path, docs_path, offsets_path = pass1_paths(plan.out, i)
        offsets = np.load(offsets_path, mmap_mode="r")
        d0, d1 = int(offsets[0, gb]), int(offsets[0, gb + 1])
        if d1 > d0:
            parts.append((i, d1 - d0, tokens_path, int(offsets[1, gb]), int(offsets[1, gb + 1])))
            with pa.memory_map(str(docs_path)) as src:
                tables.append(pa.ipc.open_file(src).read_all().slice(d0, d1 - d0))
    if not tables:
        return {"records": 0, "documents": 0, "tokens": 0, "padding": 0}
    docs = pa.concat_tables(tables, promote_options="default")
    del tables
    lengths = as_numpy(docs.column("n_tokens")).astype(np.int64)
    if staging_of(plan) == "references":
        sources, src, starts = _gather_sources(
            meta, parts, as_numpy(docs.column(ROW_COL)), lengths, dtype, chunk_tokens(plan)
        )
    else:
        sources, src, starts = _staged_sources(parts, lengths, dtype)
    keys = as_numpy(docs.column(KEY_COL))
    order = np.asarray(module.order_bucket(keys, info["seed"], b, **params["shuffle_options"]))
    docs = docs.take(arrow_array(order)).drop_columns([KEY_COL])
    bos = params["bos"]
    stream = Documents(
        sources, src[order], starts[order], lengths[order], head=meta["bos_id"] if bos else None
    )
    packing = pack.plan_packing(lengths[order] + int(bos), params["seq_len"])

    prefix = split_dir(plan.out, split) / shard_prefix(b)
    width = params["seq_len"] + 1
    records = _write_records(prefix, stream, width, dtype, chunk_tokens(plan), meta["pad_id"])
    del stream, sources  # the bucket's tokens: freed before the sidecars are written
    if records != packing.num_records:
        raise ManifestError(
            f"{prefix}: wrote {records} records, packing planned {packing.num_records}"
        )
    pack.save_segments(f"{prefix}.segments.npz", packing.segments)
    with atomic.atomic_path(f"{prefix}.docs.parquet") as tmp:
        pq.write_table(docs, tmp)
    # Every rename above is durable (shardcore.atomic) before run_unit writes this unit's
    # completion marker.
    return {
        "records": packing.num_records,
        "documents": int(docs.num_rows),
        "tokens": packing.num_tokens,
        "padding": packing.padding,
        "bytes": _written_bytes(prefix, records * width * dtype.itemsize),
    }


def _written_bytes(prefix, tokens_bytes: int) -> int:
    """The bytes of the shard's files (tokens, index, boundaries, sidecar): what the job
    page counts as written. The token bytes alone where the files cannot be sized."""
    total = 0
    for suffix in (".bin", ".idx", ".segments.npz", ".docs.parquet"):
        try:
            total += os.path.getsize(f"{prefix}{suffix}")
        except OSError:
            return tokens_bytes
    return total


def _gather_sources(
    meta: dict,
    parts: list[tuple],
    rows: np.ndarray,
    lengths: np.ndarray,
    dtype: np.dtype,
    chunk: int,
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The "references" staging: read the bucket's documents from their input shards into one
    array (the bucket's memory), in arrival order. Each input's documents come in
    ascending position, so this is a forward sweep of few, large reads (``read_spans``)."""
    bucket_tokens = np.empty(int(lengths.sum()), dtype=dtype)
    at = d = 0
    for i, n, *_ in parts:
        prefix = meta["inputs"][i]["prefix"]
        index = read_idx(idx_path(prefix))
        r = rows[d : d + n]
        if r.size and (
            r.max() >= index.num_sequences or (index.lengths[r] != lengths[d : d + n]).any()
        ):
            raise ManifestError(f"{prefix}: changed since pass 1 (document lengths differ)")
        size = int(lengths[d : d + n].sum())
        read_spans(
            bin_path(prefix),
            index.pointers[r],
            lengths[d : d + n] * dtype.itemsize,
            bucket_tokens[at : at + size],
            span=chunk * dtype.itemsize,
        )
        at += size
        d += n
    starts = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return [bucket_tokens], np.zeros(lengths.size, dtype=np.int64), starts


def _staged_sources(
    parts: list[tuple], lengths: np.ndarray, dtype: np.dtype
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The "tokens" staging: the bucket's slice of every pass-1 tokens file, memory-mapped
    read-only; the window copies read the documents from there (no bucket-sized copy)."""
    sources = []
    src = np.empty(lengths.size, dtype=np.int64)
    starts = np.empty(lengths.size, dtype=np.int64)
    d = 0
    for k, (_, n, path, t0, t1) in enumerate(parts):
        if Path(path).stat().st_size < t1 * dtype.itemsize:
            raise ManifestError(f"{path}: shorter than its offsets say")
        part = lengths[d : d + n]
        if int(part.sum()) != t1 - t0:
            raise ManifestError(f"{path}: pass-1 offsets disagree with n_tokens")
        sources.append(
            np.memmap(path, dtype=dtype, mode="r", offset=t0 * dtype.itemsize, shape=(t1 - t0,))
            if t1 > t0
            else np.zeros(0, dtype=dtype)
        )
        src[d : d + n] = k
        starts[d] = 0
        np.cumsum(part[:-1], out=starts[d + 1 : d + n])
        d += n
    return sources, src, starts

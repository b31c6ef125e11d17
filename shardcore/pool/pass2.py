"""Pass 2, one unit per bucket: load the bucket's documents in arrival order (their rows
from the bucket group's merged file; their tokens gathered from the input shards, or read
from the group's staged copy), order them, pack them into records and write one durable
output shard, checksummed as it is written."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from shardcore import atomic, pack, units
from shardcore.direct import (
    HashingWriter,
    aligned_empty,
    bytes_entry,
    direct_opener,
    window_items,
)
from shardcore.errors import ManifestError
from shardcore.formats import bin_path, encode_idx, idx_path
from shardcore.pool.inputs import InputTable
from shardcore.pool.io import (
    FileDocuments,
    copy_ranges,
    file_entry,
    read_spans,
    stream_bounds,
    stream_window,
)
from shardcore.pool.layout import (
    INPUT_COL,
    KEY_COL,
    OFFSET_COL,
    SCRATCH_COLS,
    arrow_array,
    as_numpy,
    bucket_sources,
    chunk_tokens,
    shard_prefix,
    shuffle_module,
    split_dir,
    staging_of,
)
from shardcore.pool.merge import read_buckets

if TYPE_CHECKING:
    import pyarrow as pa

# A window of the output stream (two alternate) holds at most this many bytes: each unit's
# fresh windows cost a page fault per 4 KiB, and smaller windows pipeline the gather and
# the direct writes more finely (measured on 2 GB, budget 256 MiB: 2 MiB windows instead
# of 8 MiB took 40% fewer page faults, the same CPU and ~10% less wall time in pass 2).
_WINDOW_BYTES = 2 << 20
# Input files a pass-2 unit holds open at once (well under the usual limit of 1,024
# descriptors); a bucket with documents from more inputs is read input by input.
_MAX_OPEN = 256


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
        self.out_start, self.out_end, self.total = stream_bounds(self.lengths, head)

    def fill(self, view: np.ndarray, w0: int) -> None:
        """Copy stream positions [w0, w0 + view.size) into ``view``; positions past the
        end of the stream are left as they are."""
        window = stream_window(view, w0, self.out_start, self.out_end, self.lengths, self.head)
        if window is None:
            return
        lo, hi, first, at, n = window
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
    prefix: Path,
    rel: str,
    docs: Documents | FileDocuments,
    width: int,
    dtype: np.dtype,
    chunk: int,
    pad_id: int,
    batch: atomic.Batch,
) -> tuple[int, list[dict]]:
    """Write ``docs`` packed into records of ``width`` tokens (the last one padded with
    ``pad_id``) as the IndexedDataset ``prefix`` (one sequence per record; the ``.idx`` is
    ``formats.encode_idx``'s), both under ``batch``'s temporary names. Returns the number of records and the files' manifest entries (named
    ``rel`` + extension), checksummed from the bytes as they are written.

    Two windows alternate: while one is written (and hashed) by a background thread, the
    next is gathered here; both the copy loop and the write release the GIL. The windows
    are whole blocks of direct I/O (``HashingWriter``), not whole records: where records
    and windows end changes no byte of the stream."""
    records = -(-docs.total // width)
    end = records * width
    size = window_items(max(min(chunk, _WINDOW_BYTES // dtype.itemsize), width), dtype.itemsize)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    bufs = [aligned_empty(min(size, max(1, end)), dtype) for _ in range(2)]
    waiting: list = [None, None]
    with open(batch.path(bin_path(prefix)), "wb", buffering=0, opener=direct_opener) as f:
        writer = HashingWriter(f, end * dtype.itemsize)
        try:
            for k, w0 in enumerate(range(0, end, size)):
                j = k % 2
                if waiting[j] is not None:
                    waiting[j].result()
                view = bufs[j][: min(size, end - w0)]
                docs.fill(view, w0)
                if w0 + view.size > docs.total:
                    view[max(0, docs.total - w0) :] = pad_id
                waiting[j] = writer.submit(bufs[j], view.size)
            for w in waiting:
                if w is not None:
                    w.result()  # a failed write raises here
        finally:
            writer.close()
    idx = encode_idx(dtype, np.full(records, width, dtype=np.int64))
    batch.path(idx_path(prefix)).write_bytes(idx)
    return records, [writer.entry(f"{rel}.bin"), bytes_entry(idx, f"{rel}.idx")]


def run_bucket(plan: units.Plan, unit: dict) -> dict:
    meta, params = plan.meta, plan.params
    split, b = unit["split"], unit["bucket"]
    info = meta["splits"][split]
    gb = info["first_bucket"] + b
    dtype = np.dtype(meta["dtype"])
    module = shuffle_module(params["shuffle"])
    # The bucket's documents in arrival order (input, then input row): one slice of its
    # group's merged file, or of each input's pass-1 file in a pool without a merge.
    sources = bucket_sources(plan, gb)
    table, source = _bucket_rows(plan, sources, gb)
    if table.num_rows == 0:
        return {"records": 0, "documents": 0, "tokens": 0, "padding": 0, "files": []}
    docs = table
    lengths = as_numpy(docs.column("n_tokens")).astype(np.int64)
    offsets = as_numpy(docs.column(OFFSET_COL))
    keys = as_numpy(docs.column(KEY_COL))
    order = np.asarray(module.order_bucket(keys, info["seed"], b, **params["shuffle_options"]))
    bos = params["bos"]
    head = meta["bos_id"] if bos else None
    references = staging_of(plan) == "references"
    if references:
        inputs = as_numpy(docs.column(INPUT_COL))
        used, file = np.unique(inputs, return_inverse=True)
        # Only the bucket's inputs' rows of the plan's input table are read.
        input_table = InputTable(plan)
        paths = [bin_path(input_table.prefix(int(i))) for i in used.tolist()]
        del input_table
    stream: Documents | FileDocuments
    if references and len(paths) <= _MAX_OPEN:
        # Each document read once, straight into the output window where it goes.
        stream = FileDocuments(
            paths, file[order], offsets[order], lengths[order], dtype.itemsize, head=head
        )
    else:
        # The bucket read into memory with few, large reads, then copied out in order:
        # from the staged copy (each input's documents of the bucket are one range of it),
        # or from more inputs than this unit may hold open, input by input.
        bucket_tokens = np.empty(int(lengths.sum()), dtype=dtype)
        chunk_bytes = chunk_tokens(plan) * dtype.itemsize
        if references:
            _gather(paths, file, offsets, lengths, bucket_tokens, chunk_bytes)
        else:  # each source's documents of the bucket are one range of its staged tokens
            staged = [Path(plan.out) / tokens_rel for tokens_rel, _ in sources]
            _gather(staged, source, offsets, lengths, bucket_tokens, chunk_bytes)
        starts = np.zeros(lengths.size, dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        stream = Documents(
            [bucket_tokens], np.zeros(lengths.size), starts[order], lengths[order], head=head
        )
        del bucket_tokens
    docs = docs.take(arrow_array(order)).drop_columns(list(SCRATCH_COLS))
    del table
    packing = pack.plan_packing(lengths[order] + int(bos), params["seq_len"])

    rel = shard_prefix(b, info["num_buckets"])
    prefix = split_dir(plan.out, split) / rel
    held = [stream]  # _write_shard drops the last reference once the tokens are written
    del stream
    files = _write_shard(plan, prefix, rel, held, docs, packing)
    # The shard's files are durable (shardcore.atomic.Batch) before run_unit writes this
    # unit's completion marker. The checksums travel in the stats: finalize reads no shard.
    return {
        "records": packing.num_records,
        "documents": int(docs.num_rows),
        "tokens": packing.num_tokens,
        "padding": packing.padding,
        # What the job page counts as written: the shard's files (tokens, index, boundaries,
        # sidecar).
        "bytes": sum(int(f["size"]) for f in files),
        "files": files,
    }


def _write_shard(
    plan: units.Plan,
    prefix: Path,
    rel: str,
    held: list[Documents | FileDocuments],
    docs: pa.Table,
    packing: pack.Packing,
) -> list[dict]:
    """Write the shard ``prefix`` (tokens, index, segments, documents sidecar) from the
    ordered stream ``held[0]`` (taken out of the list: the bucket's tokens, if held, are
    freed before the sidecars are written) and its rows ``docs``; returns the files' manifest entries (named
    ``rel`` + extension). The four files are committed together (``atomic.Batch``): one
    round of syncs for the shard, not one per file and per rename."""
    import pyarrow.parquet as pq

    meta, params = plan.meta, plan.params
    dtype = np.dtype(meta["dtype"])
    width = params["seq_len"] + 1
    stream = held.pop()
    with atomic.Batch() as batch:
        with stream if isinstance(stream, FileDocuments) else contextlib.nullcontext():
            records, files = _write_records(
                prefix, rel, stream, width, dtype, chunk_tokens(plan), meta["pad_id"], batch
            )
        del stream
        if records != packing.num_records:
            raise ManifestError(
                f"{prefix}: wrote {records} records, packing planned {packing.num_records}"
            )
        segments = batch.path(f"{prefix}.segments.npz")
        with open(segments, "wb") as f:  # pack.save_segments's bytes
            np.savez(f, **{k: getattr(packing.segments, k) for k in pack.SEGMENT_FIELDS})
        sidecar = batch.path(f"{prefix}.docs.parquet")
        pq.write_table(docs, sidecar)
        files.append(file_entry(segments, f"{rel}.segments.npz"))
        files.append(file_entry(sidecar, f"{rel}.docs.parquet"))
    return files


def _bucket_rows(
    plan: units.Plan, sources: list[tuple[str, str]], gb: int
) -> tuple[pa.Table, np.ndarray]:
    """Bucket ``gb``'s rows of the documents files ``sources`` (each sorted by bucket),
    concatenated in their order, and the index of the source of each row. Every pass-1
    file has the plan's columns (pass 1 gives each input's properties the pool's type), so
    the rows are those the merge would have written."""
    import pyarrow as pa

    parts, counts = [], []
    for _, docs_rel in sources:
        part = read_buckets(Path(plan.out) / docs_rel, gb, gb + 1)
        parts.append(part)
        counts.append(part.num_rows)
    rows = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    return rows, np.repeat(np.arange(len(sources)), counts)


def _gather(
    paths: list[Path],
    file: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    out: np.ndarray,
    chunk_bytes: int,
) -> None:
    """The "references" staging: read the bucket's documents from their input shards
    (document d from ``paths[file[d]]``) into ``out`` (the bucket's memory), in arrival
    order. A run of documents of one input comes in ascending position, so each is a
    forward sweep of few, large reads (``read_spans``); pass 1 verified the inputs, and a
    shard shorter than its offsets fails the read naming it."""
    itemsize = out.dtype.itemsize
    bounds = [0, *(np.flatnonzero(np.diff(file)) + 1).tolist(), file.size]
    at = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=at[1:])
    for d0, d1 in zip(bounds[:-1], bounds[1:], strict=True):
        read_spans(
            paths[int(file[d0])],
            offsets[d0:d1],
            lengths[d0:d1] * itemsize,
            out[at[d0] : at[d1]],
            span=chunk_bytes,
        )

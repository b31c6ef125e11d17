"""The merge, a tree of units between pass 1 and pass 2 (``layout.merge_shape``): a unit
of level l reads one bucket range of each of at most ``fan_in`` files of level l - 1 (pass
1's at level 1), covering consecutive inputs, and writes them as one file sorted by
bucket (then input, then input row: the arrival order pass 2 orders from). The last
level's ranges are the bucket groups, so that a pass-2 unit reads one file whatever the
number of inputs. A pool of few inputs has no merge (``layout.needs_merge``): its pass-2
units read their bucket's rows from every input's pass-1 file.

Cost: a unit opens ``fan_in`` (<= ``MERGE_FAN_IN``) files and holds about one group's
metadata (a range of F ** (L - l) groups of F ** l inputs: F ** L / inputs groups' worth,
at most ~1.3). Level l opens each file of level l - 1 once per range of level l it
overlaps: about max(inputs, fan_in x groups) files per level, levels x that in all, and
rewrites the documents' metadata once per level (levels = ceil(log_64 inputs)): the total
grows as (inputs + groups) times a log factor, where one merge of every input per group
made inputs x groups reads. Memory: the range's metadata, gathered in slices combined
every ``_COMBINE_EVERY`` files (a plan made before the tree merges every input at once).

With "tokens" staging the unit writes the range's tokens in its row order (every file's
tokens are in its row order, so a bucket's documents from one file are one contiguous
span): one ``os.copy_file_range`` per (bucket, file) span, no copy through this process;
each row's offset is rewritten to point into the new file."""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from shardcore import atomic, units
from shardcore.errors import ManifestError
from shardcore.pool.io import write_run
from shardcore.pool.layout import (
    BUCKET_COL,
    OFFSET_COL,
    arrow_array,
    as_numpy,
    merge_children,
    merge_levels,
    merge_rel,
    staging_of,
)

if TYPE_CHECKING:
    import pyarrow as pa

_COMBINE_EVERY = 256


def bucket_rows(table: pa.Table, lo: int, hi: int) -> tuple[int, int]:
    """Rows [r0, r1) of a table sorted by bucket whose bucket is in [lo, hi), found chunk
    by chunk (a binary search of the memory-mapped column: no copy)."""
    r0 = r1 = 0
    for chunk in table.column(BUCKET_COL).chunks:
        if len(chunk):
            values = np.frombuffer(
                chunk.buffers()[1], dtype=np.int64, count=len(chunk), offset=chunk.offset * 8
            )
            a, b = np.searchsorted(values, [lo, hi]).tolist()
            r0 += a
            r1 += b
    return r0, r1


def read_buckets(path: str | os.PathLike, lo: int, hi: int) -> pa.Table:
    """The rows of buckets [lo, hi) of a run file (pass 1's or a merge's, sorted by
    bucket), copied into memory of their own: one column at a time through a memory map
    whose pages are dropped from this process after each column (they stay cached).

    A page fault on a file mapping maps the whole page-cache folio around it, megabytes on
    file systems with large folios: a bucket's slice read through a map made most of every
    file it touched resident (pass 2 over 10^7 small documents peaked at 570 MB for 23 MB
    of rows). Here the bucket range is found by a binary search, and what stays is the
    rows' own size."""
    import pyarrow as pa

    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    table = pa.ipc.open_file(pa.py_buffer(mapped)).read_all()
    r0, r1 = bucket_rows(table, lo, hi)
    mapped.madvise(mmap.MADV_DONTNEED)
    columns = []
    for column in table.slice(r0, r1 - r0).columns:
        # A copy even of one chunk (concatenating it with an empty slice of itself).
        chunks = column.chunks or [pa.array([], type=column.type)]
        columns.append(pa.concat_arrays([*chunks, chunks[0].slice(0, 0)]))
        mapped.madvise(mmap.MADV_DONTNEED)
    out = pa.Table.from_arrays(columns, schema=table.schema)
    del table, columns, column, chunks
    # Closed now, unless Arrow shares a buffer rather than copying it (a dictionary
    # column's values): then the map lives as long as the rows do, its pages dropped.
    with contextlib.suppress(BufferError):
        mapped.close()
    return out


def run_merge(plan: units.Plan, unit: dict) -> dict:
    import pyarrow as pa

    lo, hi, children = merge_children(plan, unit)
    tokens_out, docs_out = (Path(plan.out) / rel for rel in _unit_rel(plan, unit))
    staged = staging_of(plan) == "tokens"
    itemsize = np.dtype(plan.meta["dtype"]).itemsize
    combined, pending, sources = [], [], []
    empty: Any = None  # an Arrow table
    for k, (tokens_rel, docs_rel) in enumerate(children):
        part = read_buckets(Path(plan.out) / docs_rel, lo, hi)
        if empty is None:
            empty = part.slice(0, 0)
        if not part.num_rows:
            continue
        if staged:
            sources.append(Path(plan.out) / tokens_rel)
            part = part.append_column("__file", arrow_array(np.full(part.num_rows, k, np.int32)))
        pending.append(part)
        if len(pending) >= _COMBINE_EVERY:
            combined.append(pa.concat_tables(pending, promote_options="default").combine_chunks())
            pending = []
    parts = combined + pending
    del combined, pending
    if not parts:
        # An empty range still has its file: the next level (or pass 2) reads it without
        # asking whether it exists.
        docs = empty
    else:
        docs = pa.concat_tables(parts, promote_options="default")  # chunked, no copy
        del parts
        # Stable: each file's rows are sorted by bucket and the files come in input order.
        order = np.argsort(as_numpy(docs.column(BUCKET_COL)), kind="stable")
        docs = docs.take(arrow_array(order))  # the one copy of the range
    docs_out.parent.mkdir(parents=True, exist_ok=True)
    if staged:
        with atomic.atomic_open(tokens_out, "wb", durable=False, buffering=0) as sink:
            if docs.num_rows:
                docs = _copy_tokens(docs, children, sources, itemsize, sink, Path(plan.out))
    write_run(docs_out, docs)
    return {"merged_documents": int(docs.num_rows)}


def _unit_rel(plan: units.Plan, unit: dict) -> tuple[str, str]:
    if "group" in unit:
        return merge_rel(plan, merge_levels(plan)[0], unit["group"], 0)
    return merge_rel(plan, unit["level"], unit["range"], unit["batch"])


def _copy_tokens(
    docs: pa.Table,
    children: list[tuple[str, str]],
    sources: list[Path],
    itemsize: int,
    sink: IO[bytes],
    out: Path,
) -> pa.Table:
    """Append the tokens of ``docs`` (each row's file in column ``__file``, its offset in
    OFFSET_COL) to ``sink`` in row order, coalesced into spans; returns ``docs`` with the
    offsets into ``sink`` and without ``__file``."""
    files = as_numpy(docs.column("__file")).astype(np.int64)
    offsets = as_numpy(docs.column(OFFSET_COL)).astype(np.int64)
    nbytes = as_numpy(docs.column("n_tokens")).astype(np.int64) * itemsize
    new = np.zeros(offsets.size, dtype=np.int64)
    np.cumsum(nbytes[:-1], out=new[1:])
    brk = np.ones(offsets.size, dtype=bool)
    brk[1:] = (files[1:] != files[:-1]) | (offsets[1:] != offsets[:-1] + nbytes[:-1])
    starts = np.flatnonzero(brk)
    ends = np.append(starts[1:], offsets.size)
    span_bytes = new[ends - 1] + nbytes[ends - 1] - new[starts]
    fds = {}
    try:
        for s, n in zip(starts.tolist(), span_bytes.tolist(), strict=True):
            k = int(files[s])
            if k not in fds:
                path = out / children[k][0]
                fd = os.open(path, os.O_RDONLY)
                fds[k] = (fd, path, os.fstat(fd).st_size)
            fd, path, size = fds[k]
            if size < int(offsets[s]) + n:
                raise ManifestError(f"{path}: shorter than its documents' offsets say")
            _copy_range(fd, path, int(offsets[s]), n, sink)
    finally:
        for fd, _, _ in fds.values():
            os.close(fd)
    docs = docs.drop_columns(["__file"])
    return docs.set_column(docs.schema.get_field_index(OFFSET_COL), OFFSET_COL, arrow_array(new))


def _copy_range(fd: int, path: Path, offset: int, nbytes: int, sink: IO[bytes]) -> None:
    """Append ``nbytes`` of the open file ``fd`` (``path``) from ``offset`` to ``sink``."""
    left = nbytes
    while left:
        try:
            n = os.copy_file_range(fd, sink.fileno(), left, offset)
        except OSError:  # across file systems on old kernels: copy through a buffer
            n = os.write(sink.fileno(), os.pread(fd, min(left, 8 << 20), offset))
        if n == 0:
            raise ManifestError(f"{path}: ends before offset {offset}")
        offset += n
        left -= n

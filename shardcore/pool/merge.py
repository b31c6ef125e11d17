"""The merge, one unit per bucket group (a range of consecutive buckets): read the group's
rows from every input's pass-1 file and write them as one file sorted by bucket (then
input, then input row: the arrival order pass 2 orders from), so that a pass-2 unit reads
one file whatever the number of inputs.

Cost: a merge unit reads one contiguous row range of each pass-1 file (a few hundred
microseconds each, most of it opening the file), so the merge does inputs x groups reads
where pass 2 alone did inputs x buckets; the plan makes groups as large as the budget
allows (``group_buckets``). Memory: the group's metadata, gathered in slices that are
combined every ``_COMBINE_EVERY`` inputs (an Arrow table of one row still costs kilobytes
of objects: per input, that would grow with the number of inputs).

With "tokens" staging the group's tokens are copied input after input into one file
(``os.copy_file_range``: no copy through this process), and each row's offset is rewritten
to point into it."""

from __future__ import annotations

import contextlib
import os

import numpy as np

from shardcore import atomic, units
from shardcore.errors import ManifestError
from shardcore.pool.io import read_run, write_run
from shardcore.pool.layout import (
    BUCKET_COL,
    OFFSET_COL,
    arrow_array,
    as_numpy,
    group_paths,
    num_groups,
    pass1_paths,
    read_group,
    staging_of,
)

_COMBINE_EVERY = 256


def run_merge(plan: units.Plan, unit: dict) -> dict:
    import pyarrow as pa

    g = unit["group"]
    tokens_out, docs_out = group_paths(plan.out, g)
    staged = staging_of(plan) == "tokens"
    n_groups = num_groups(plan)
    combined, pending = [], []
    written = 0
    docs_out.parent.mkdir(parents=True, exist_ok=True)
    with (
        atomic.atomic_open(tokens_out, "wb", durable=False, buffering=0)
        if staged
        else contextlib.nullcontext() as sink
    ):
        for i in range(len(plan.meta["inputs"])):
            tokens_path, docs_path, groups_path = pass1_paths(plan.out, i)
            r0, r1, b0, b1 = read_group(groups_path, g, n_groups)
            if r1 == r0:
                continue  # the input has no document in this group: its table is not opened
            table = read_run(docs_path)
            part = table.slice(r0, r1 - r0)
            if staged:
                _copy_range(tokens_path, b0, b1 - b0, sink)
                offsets = as_numpy(part.column(OFFSET_COL)) - b0 + written
                part = part.set_column(
                    part.schema.get_field_index(OFFSET_COL), OFFSET_COL, arrow_array(offsets)
                )
                written += b1 - b0
            pending.append(part)
            if len(pending) >= _COMBINE_EVERY:
                combined.append(
                    pa.concat_tables(pending, promote_options="default").combine_chunks()
                )
                pending = []
        parts = combined + pending
        del combined, pending
        if not parts:
            docs = None
        else:
            docs = pa.concat_tables(parts, promote_options="default")  # chunked, no copy
            del parts
            # Stable: each input's rows are sorted by bucket and the inputs come in order.
            order = np.argsort(as_numpy(docs.column(BUCKET_COL)), kind="stable")
            docs = docs.take(arrow_array(order))  # the one copy of the group
    if docs is None:
        # An empty group still has its file: pass 2 reads it without asking whether it exists.
        docs = read_run(pass1_paths(plan.out, 0)[1]).slice(0, 0)
    write_run(docs_out, docs)
    return {"merged_documents": int(docs.num_rows)}


def _copy_range(path, offset: int, nbytes: int, sink) -> None:
    """Append ``nbytes`` of ``path`` from ``offset`` to the open file ``sink``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if os.fstat(fd).st_size < offset + nbytes:
            raise ManifestError(f"{path}: shorter than its group offsets say")
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
    finally:
        os.close(fd)

"""The tokenize stage's assemble units: the shards whose first token lies in a part, written
from the part chunks that hold their documents.

A shard's tokens are copied from the chunks' ``.bin`` files (just written by the tokenize
units, so still in the page cache) into page-aligned windows and written with direct I/O
(``shardcore.direct``): the tokens reach the disk without a second copy into the page
cache and its writeback, and the shard's checksums are computed from the windows as they
are written, so no file is read back to checksum it. The shard's three files are committed
together (``atomic.Batch``: one round of syncs).
"""

from __future__ import annotations

import bisect
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shardcore import atomic, props, units
from shardcore.direct import (
    DirectReader,
    HashingWriter,
    aligned_empty,
    bytes_entry,
    direct_opener,
    window_items,
)
from shardcore.formats import bin_path, encode_idx, idx_path
from shardcore.verify import file_entry

if TYPE_CHECKING:
    import pyarrow as pa

PARTS_DIR = "_parts"
INDEX_NAME = "index.json"
CHUNK_DOCS = ".docs.arrow"  # a part chunk's documents table (Arrow IPC file)
SHARDS_DIR = "shards"

_WINDOW_BYTES = 8 << 20  # tokens per direct write: two windows alternate


def owned_shards(
    chunks: list[dict[str, Any]], per_shard: int, part: int
) -> list[tuple[int, list[dict[str, Any]]]]:
    """The shards whose first token lies in part ``part``'s chunks (shard k starts at token
    ``k * per_shard``), each with the chunks overlapping its tokens, in order."""
    mine = [c for c in chunks if c["part"] == part]
    if not mine:
        return []
    tok0s = [c["tok0"] for c in chunks]
    lo_tok, hi_tok = mine[0]["tok0"], mine[-1]["tok0"] + mine[-1]["tokens"]
    owned = []
    for k in range(-(-lo_tok // per_shard), -(-hi_tok // per_shard)):
        lo, hi = k * per_shard, (k + 1) * per_shard
        over = []
        for c in chunks[max(bisect.bisect_right(tok0s, lo) - 1, 0) :]:
            if c["tok0"] >= hi:
                break
            if c["tok0"] + c["tokens"] > lo:
                over.append(c)
        owned.append((k, over))
    return owned


def _chunk_docs(stem: Path) -> pa.Table:
    """A part chunk's documents table (Arrow IPC; Parquet from a run begun before)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(f"{stem}{CHUNK_DOCS}")
    if not path.exists() and Path(f"{stem}.docs.parquet").exists():
        # ParquetFile, not read_table: pyarrow.dataset imports pandas.
        with pq.ParquetFile(f"{stem}.docs.parquet") as pf:
            return pf.read()
    with pa.OSFile(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def _write_tokens(
    f: Any, ranges: list[tuple[Path, int, int]], dtype: np.dtype, total: int
) -> HashingWriter:
    """Write the token ranges ``(chunk .bin, first, last)`` back to back into ``f`` (opened
    with ``direct_opener``) through two alternating aligned windows: one is written (and
    hashed) by the writer's thread while the next is read here. Returns the writer, whose
    ``entry`` is the file's manifest entry."""
    size = window_items(min(_WINDOW_BYTES // dtype.itemsize, total), dtype.itemsize)
    bufs = [aligned_empty(min(size, total), dtype) for _ in range(2)]
    waiting: list[Any] = [None, None]
    writer = HashingWriter(f, total * dtype.itemsize)
    reader = DirectReader()
    item = dtype.itemsize
    j = fill = 0
    try:
        for path, first, last in ranges:
            fd = reader.open(path)
            try:
                while first < last:
                    if fill == 0 and waiting[j] is not None:
                        waiting[j].result()
                    take = min(last - first, bufs[j].size - fill)
                    view = bufs[j].data.cast("B")[fill * item : (fill + take) * item]
                    reader.read_into(fd, view, first * item, path)
                    first += take
                    fill += take
                    if fill == bufs[j].size:
                        waiting[j] = writer.submit(bufs[j], fill)
                        j, fill = 1 - j, 0
            finally:
                os.close(fd)
        if fill:
            if waiting[j] is not None:
                waiting[j].result()
            waiting[j] = writer.submit(bufs[j], fill)
        for w in waiting:
            if w is not None:
                w.result()  # a failed write raises here
    finally:
        writer.close()
    return writer


def _write_shard(
    out: Path,
    k: int,
    pieces: list[tuple[dict[str, Any], Path, np.ndarray, np.ndarray, int, int]],
    dtype: np.dtype,
    line_base: list[int],
    cpu: dict[str, float],
) -> dict[str, Any]:
    """Shard ``k`` from its pieces (chunk, stem, lengths, starts, first and last document
    of the chunk in the shard): tokens, index and documents sidecar, committed together."""
    import pyarrow.parquet as pq

    name = f"shard-{k:05d}"
    rel = f"{SHARDS_DIR}/{name}"
    prefix = out / SHARDS_DIR / name
    prefix.parent.mkdir(parents=True, exist_ok=True)
    ranges, lengths, tables = [], [], []
    for c, stem, chunk_lengths, starts, a, b in pieces:
        t0 = int(starts[a] - c["tok0"])
        t1 = int(starts[b - 1] - c["tok0"] + chunk_lengths[b - 1])
        ranges.append((Path(f"{stem}.bin"), t0, t1))
        lengths.append(chunk_lengths[a:b])
        t = _chunk_docs(stem).slice(a, b - a)
        line = props.int64_values(t["line"]) + np.int64(line_base[c["part"]])
        t = t.set_column(t.column_names.index("line"), "line", props.numbers(line))
        doc_ids = np.arange(c["doc0"] + a, c["doc0"] + b, dtype=np.int64)
        tables.append(t.add_column(0, "doc_id", props.numbers(doc_ids)))
    all_lengths = np.concatenate(lengths)
    total = int(all_lengths.sum())
    if total != sum(t1 - t0 for _, t0, t1 in ranges):
        raise RuntimeError(f"{prefix}: the chunks' lengths do not add up to their tokens")
    table = props.concat(tables).combine_chunks()
    with atomic.Batch() as batch:
        c0 = time.process_time()
        with open(batch.path(bin_path(prefix)), "wb", buffering=0, opener=direct_opener) as f:
            writer = _write_tokens(f, ranges, dtype, total)
        cpu["copy"] += time.process_time() - c0
        idx = encode_idx(dtype, all_lengths)
        batch.path(idx_path(prefix)).write_bytes(idx)
        pq.write_table(table, batch.path(out / SHARDS_DIR / f"{name}.docs.parquet"))
    c0 = time.process_time()
    entries = [
        writer.entry(f"{rel}.bin"),
        bytes_entry(idx, f"{rel}.idx"),
        file_entry(out, f"{rel}.docs.parquet"),
    ]
    cpu["checksums"] += time.process_time() - c0
    return {
        "index": k,
        "prefix": rel,
        "documents": int(table.num_rows),
        "tokens": total,
        "first_doc_id": int(table["doc_id"][0].as_py()),
        "files": entries,
    }


def run_assemble(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    out = Path(plan.out)
    dtype = np.dtype(plan.meta["dtype"])
    per_shard = max(plan.params["shard_size"] // dtype.itemsize, 1)
    index = json.loads((out / PARTS_DIR / INDEX_NAME).read_text())
    owned = owned_shards(index["chunks"], per_shard, unit["part"])
    shards: list[dict[str, Any]] = []
    if not owned:
        return {"kind": "assemble", "shards": shards}
    cpu = {"copy": 0.0, "checksums": 0.0}
    unit_cpu0 = time.process_time()
    for k, over in owned:
        lo, hi = k * per_shard, (k + 1) * per_shard
        pieces = []
        for c in over:
            stem = out / PARTS_DIR / c["unit"] / f"c{c['chunk']:05d}"
            lengths = np.load(f"{stem}.len.npy").astype(np.int64)
            starts = c["tok0"] + np.concatenate([[0], np.cumsum(lengths)[:-1]])
            a, b = int(np.searchsorted(starts, lo)), int(np.searchsorted(starts, hi))
            if a < b:
                pieces.append((c, stem, lengths, starts, a, b))
        if pieces:
            shards.append(_write_shard(out, k, pieces, dtype, index["line_base"], cpu))
    total = time.process_time() - unit_cpu0
    stages = {k: round(v, 3) for k, v in cpu.items()}
    stages["sidecars"] = round(max(total - sum(cpu.values()), 0.0), 3)
    return {"kind": "assemble", "shards": shards, "cpu": stages}

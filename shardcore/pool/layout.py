"""Names and paths shared by the pool's passes: the directory layout, the metadata columns,
the validation split of a document, and what a plan says about chunking and staging."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from shardcore import shuffle, units
from shardcore.errors import ManifestError

if TYPE_CHECKING:
    import pyarrow as pa


STAGE = "pool"
KIND = "pool"
PASS1_DIR = "_pass1"
SHARDS_DIR = "shards"
VAL_DIR = "val"
DOCUMENTS_NAME = "documents.parquet"
# The manifest's "documents_table" of a split of more than FANOUT buckets: its documents
# table is its shards' sidecars (``PoolReader.documents``), not one ``documents.parquet``.
PARTITIONED = "shards"
SPLITS = ("train", "val")
# Metadata columns added to each document's sidecar properties.
SOURCE_COL, SHARD_COL, ROW_COL, KEY_COL = "source", "source_shard", "source_row", "__key"
SOURCE_FP_COL = "source_fingerprint"
# Columns of pass 1's and the merge's files only (dropped before pass 2 writes a sidecar):
# each document's global bucket, the input it came from, and the byte offset of its tokens
# (in the input's .bin with "references" staging, in the staged tokens file with "tokens").
BUCKET_COL, INPUT_COL, OFFSET_COL = "__bucket", "__input", "__offset"
SCRATCH_COLS = (KEY_COL, BUCKET_COL, INPUT_COL, OFFSET_COL)
# Files per directory of the scratch and unit files: a directory of millions of entries
# makes every create and lookup in it slow on most file systems (and listings huge).
FANOUT = 1000
STAGINGS = ("references", "tokens")
_MIN_CHUNK_TOKENS = 1 << 14
_MAX_CHUNK_TOKENS = 1 << 22


def val_mask(fingerprint: str, doc_ids: np.ndarray, fraction: float) -> np.ndarray:
    """True for the documents held out for validation: splitmix64 of the document's
    identity (its tokenized source's fingerprint and its doc_id) below ``fraction``.
    Depends on nothing else, so a rebuild with other filters or seeds keeps each
    document on the same side."""
    if fraction <= 0.0:
        return np.zeros(len(doc_ids), dtype=bool)
    salt = np.uint64(xxhash.xxh3_64_intdigest(fingerprint.encode()))
    with np.errstate(over="ignore"):
        z = np.asarray(doc_ids, dtype=np.int64).astype(np.uint64) ^ salt
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53)) < fraction


def val_seed(seed: int) -> int:
    return xxhash.xxh3_64_intdigest(f"{int(seed)}/val".encode()) & ((1 << 63) - 1)


def column(table: pa.Table, name: str, where: str) -> np.ndarray:
    if name not in table.column_names:
        raise ManifestError(f"{where}: sidecar has no column {name!r}")
    return as_numpy(table.column(name))


def as_numpy(col: pa.ChunkedArray) -> np.ndarray:
    """A column as one numpy array; integers without nulls straight from the Arrow buffer
    (read-only): pyarrow's ``to_numpy`` imports pandas on first use, which costs a pool
    process about 0.4 CPU-s and 40 MB."""
    import pyarrow as pa

    arr = col.combine_chunks()
    if pa.types.is_integer(arr.type) and arr.null_count == 0:
        dtype = np.dtype(str(arr.type))
        if not len(arr):
            return np.zeros(0, dtype=dtype)
        return np.frombuffer(
            arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize
        )
    return arr.to_numpy(zero_copy_only=False)


def arrow_array(values: np.ndarray) -> pa.Array:
    """A numpy array of numbers as an Arrow array (no nulls), sharing its memory; built
    from buffers because ``pa.array`` imports pandas on first use."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(values.dtype), values.size, [None, pa.py_buffer(values)]
    )


def arrow_strings(values: list[str]) -> pa.Array:
    """A list of str as an Arrow string array (built from buffers, as ``arrow_array``)."""
    import pyarrow as pa

    data = [v.encode() for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.Array.from_buffers(
        pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    )


def chunk_tokens(plan: units.Plan) -> int:
    return int(min(_MAX_CHUNK_TOKENS, max(_MIN_CHUNK_TOKENS, plan.params["memory"] // 128)))


def fanned(kind: str, i: int) -> str:
    """``kind/<i // FANOUT>/kind-<i>``: the relative name of scratch file ``i`` of a kind,
    FANOUT per directory."""
    return f"{kind}/{i // FANOUT:04d}/{kind}-{i:07d}"


def pass1_rel(i: int) -> tuple[str, str]:
    """Pass 1's files of input ``i``, relative to the pool: with "tokens" staging their
    tokens in row order, and their documents sorted by bucket (Arrow IPC)."""
    base = f"{PASS1_DIR}/{fanned('in', i)}"
    return f"{base}.tokens", f"{base}.arrow"


def group_rel(g: int) -> tuple[str, str]:
    """The merge's files of bucket group ``g``: its documents sorted by bucket (then input,
    then input row) and, with "tokens" staging, their tokens in the same order."""
    base = f"{PASS1_DIR}/{fanned('group', g)}"
    return f"{base}.tokens", f"{base}.arrow"


# The merge is a tree (``merge_shape``): level l in 1..L merges batches of ``fan_in`` files
# of level l - 1 (level 0: pass 1's, one per input) restricted to one bucket *range* of
# ``group_buckets * fan_in ** (L - l)`` buckets; level L's ranges are the bucket groups
# pass 2 reads. Each unit reads ``fan_in`` files and holds about one group's metadata.
MERGE_FAN_IN = 64


def merge_shape(n_inputs: int) -> tuple[int, int]:
    """(levels, fan_in) of the merge of ``n_inputs`` pass-1 files: the fewest levels whose
    fan-in is at most MERGE_FAN_IN, then the smallest fan-in F with F ** levels >= inputs
    (so that a unit's share of the data, F ** levels / inputs groups, stays close to 1)."""
    n = max(1, int(n_inputs))
    levels = 1
    while MERGE_FAN_IN**levels < n:
        levels += 1
    fan_in = max(1, round(n ** (1.0 / levels)) - 1)
    while fan_in**levels < n:
        fan_in += 1
    return levels, fan_in


# Without a merge, each pass-2 unit reads its bucket's rows from every input's pass-1 file
# (a memory map and a binary search of its bucket column): inputs x buckets opens in all,
# where the merge costs one more pass over the documents' metadata (read, sorted, written
# durably). The merge is planned only when a pass-2 unit would open more files than a merge
# unit does (MERGE_FAN_IN) or the opens would add up past this.
DIRECT_OPENS = 1 << 16


def needs_merge(n_inputs: int, n_buckets: int) -> bool:
    """Whether a pool of ``n_inputs`` inputs and ``n_buckets`` buckets (both splits) needs
    the merge between its passes; without it ``merge_levels`` is 0."""
    return n_inputs > MERGE_FAN_IN or n_inputs * n_buckets > DIRECT_OPENS


def bucket_sources(plan: units.Plan, gb: int) -> list[tuple[str, str]]:
    """The files (tokens, documents) holding bucket ``gb``'s documents, in input order: its
    group's merged file, or every input's pass-1 file in a plan without a merge."""
    if merge_levels(plan)[0] == 0:
        return [pass1_rel(i) for i in range(num_inputs(plan))]
    return [group_rel(gb // group_buckets(plan))]


def num_inputs(plan: units.Plan) -> int:
    """The number of input shards (pass-1 units): the rows of the plan's input table
    (``shardcore.pool.inputs``), or the length of its list in a plan made before it."""
    table = plan.meta.get("inputs_table")
    return int(table["rows"]) if table is not None else len(plan.meta["inputs"])


def merge_levels(plan: units.Plan) -> tuple[int, int]:
    """The plan's (levels, fan_in); plans made before the tree merged every input at once."""
    if "merge_levels" not in plan.meta:
        return 1, max(1, num_inputs(plan))
    return int(plan.meta["merge_levels"]), int(plan.meta["merge_fan_in"])


def merge_geometry(plan: units.Plan, level: int) -> tuple[int, int, int]:
    """Level ``level``'s (buckets per range, number of ranges, number of input batches);
    level 0 is pass 1 (one range, one batch per input)."""
    levels, fan_in = merge_levels(plan)
    total = sum(plan.meta["splits"][s]["num_buckets"] for s in SPLITS)
    n = num_inputs(plan)
    if level == 0:
        return max(1, total), 1, n
    span = group_buckets(plan) * fan_in ** (levels - level)
    return span, max(1, -(-total // span)), max(1, -(-n // fan_in**level))


def merge_rel(plan: units.Plan, level: int, rng: int, batch: int) -> tuple[str, str]:
    """The files (tokens, documents) of range ``rng`` and batch ``batch`` at a merge level:
    pass 1's at level 0, the groups' at the last level."""
    levels, _ = merge_levels(plan)
    if level == 0:
        return pass1_rel(batch)
    if level == levels:
        return group_rel(rng)
    index = rng * merge_geometry(plan, level)[2] + batch
    base = f"{PASS1_DIR}/{fanned(f'm{level}', index)}"
    return f"{base}.tokens", f"{base}.arrow"


def merge_units(plan: units.Plan, level: int) -> list[dict]:
    """The units of merge level ``level`` (the last level's keep the one-level ids)."""
    levels, _ = merge_levels(plan)
    _, ranges, batches = merge_geometry(plan, level)
    if level == levels:
        return [{"id": f"merge-{g:05d}", "group": g} for g in range(num_groups(plan))]
    return [
        {"id": f"merge{level}-{r:05d}-{a:05d}", "level": level, "range": r, "batch": a}
        for r in range(ranges)
        for a in range(batches)
    ]


def merge_children(plan: units.Plan, unit: dict) -> tuple[int, int, list[tuple[str, str]]]:
    """A merge unit's bucket range [lo, hi) and the files it reads (level - 1's, in input
    order)."""
    levels, fan_in = merge_levels(plan)
    if "group" in unit:
        level, rng, batch = levels, unit["group"], 0
    else:
        level, rng, batch = unit["level"], unit["range"], unit["batch"]
    span, _, _ = merge_geometry(plan, level)
    _, _, child_batches = merge_geometry(plan, level - 1)
    parent = 0 if level == 1 else rng // fan_in
    first = batch * fan_in
    files = [
        merge_rel(plan, level - 1, parent, b)
        for b in range(first, min(first + fan_in, child_batches))
    ]
    return rng * span, (rng + 1) * span, files


def pass1_paths(out: str, i: int) -> tuple[Path, Path]:
    a, b = pass1_rel(i)
    return Path(out) / a, Path(out) / b


def num_groups(plan: units.Plan) -> int:
    total = sum(plan.meta["splits"][s]["num_buckets"] for s in SPLITS)
    return -(-total // group_buckets(plan)) if total else 0


def group_buckets(plan: units.Plan) -> int:
    return int(plan.meta["group_buckets"])


def staging_of(plan: units.Plan) -> str:
    # Plans saved before staging existed always staged tokens.
    return plan.meta.get("staging", "tokens")


def split_dir(out: str, split: str) -> Path:
    return Path(out) if split == "train" else Path(out) / VAL_DIR


def partitioned(num_buckets: int) -> bool:
    """Whether a split of ``num_buckets`` buckets fans its shards out and keeps its
    documents table partitioned (the shards' sidecars)."""
    return num_buckets > FANOUT


def shard_prefix(b: int, num_buckets: int = 0) -> str:
    """Bucket ``b``'s shard, relative to its split's directory: ``shards/pool-XXXXX`` in a
    split of at most FANOUT buckets, else fanned out, FANOUT per directory
    (``shards/DDDD/pool-XXXXXXX``). Readers follow the manifest's prefixes."""
    if not partitioned(num_buckets):
        return f"{SHARDS_DIR}/pool-{b:05d}"
    return f"{SHARDS_DIR}/{b // FANOUT:04d}/pool-{b:07d}"


def shuffle_module(name: str) -> ModuleType:
    return shuffle.get_shuffle(name)

"""Pools: select documents of tokenized sources, hold out a validation slice, shuffle them
globally at document level, pack them into records of seq_len + 1 tokens, write shards.

The stage ``pool`` follows the unit-of-work protocol (``shardcore.units``):

* phase 1, one unit per input shard: select its documents (``shardcore.select``), route
  each to the training or the validation pool by a hash of its identity, draw its bucket
  (``shardcore.shuffle``), and write the shard's selected documents grouped by bucket:
  their metadata (``_pass1/in-XXXXX.docs.arrow``, which holds each document's input row:
  its *reference*) and bucket offsets, and, with ``staging="tokens"`` only, a copy of
  their tokens (``.tokens``);
* phase 2, one unit per bucket: load the bucket's documents in shard order (gathered from
  the input shards by reference with positioned reads, or read from the staged copies),
  order them (``order_bucket``), pack them (``shardcore.pack``) and write one output
  shard ``shards/pool-XXXXX`` (IndexedDataset ``.bin``/``.idx``, ``.segments.npz``,
  ``.docs.parquet``), every file fsynced before the unit is marked done;
* finalize: ``documents.parquet``, checksums, the validation pool's manifest in ``val/``,
  then the pool's ``manifest.json``, the commit point.

Both stagings load the same tokens in the same order into the same packing code, so they
write the same bytes. "references" writes the data once (the output) instead of twice;
"tokens" (the default on network and FUSE file systems) turns pass 2's random reads of
the inputs into sequential reads of a staged copy.

Memory: a pass-2 unit holds one bucket's tokens plus a bounded chunk; K (the number of
buckets) is chosen so that a bucket is about a quarter of ``memory``, and at least enough
buckets for shards of about ``shard_size`` bytes. A pass-1 unit reads its input shard
through np.memmap and holds its per-document metadata plus a bounded chunk. The output
bytes depend on the inputs and parameters only, never on the number of workers or the
staging.

Pool directory::

    manifest.json        kind "pool", counts, shards, cumulative_records, files, ...
    documents.parquet    one row per pool document, in pool order (source, doc_id, ...)
    shards/pool-XXXXX.{bin,idx,segments.npz,docs.parquet}
    val/                 the validation pool, same layout, its own manifest
"""

from __future__ import annotations

import bisect
import mmap
import os
import shutil
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from shardcore import manifest as mf
from shardcore import pack, shuffle, units, verify
from shardcore.errors import InputError, ManifestError
from shardcore.formats import IndexedReader, bin_path, encode_idx, idx_path, read_idx

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow (and DuckDB, through shardcore.select) are imported inside the functions that
# read or write Parquet/Arrow: a loader process that only reads records through ``Pool``
# and a bucket's pack-and-write loop never need them (about 40 MB of RSS per process).

STAGE = "pool"
KIND = "pool"
PASS1_DIR = "_pass1"
SHARDS_DIR = "shards"
VAL_DIR = "val"
DOCUMENTS_NAME = "documents.parquet"
SPLITS = ("train", "val")
# Metadata columns added to each document's sidecar properties.
SOURCE_COL, SHARD_COL, ROW_COL, KEY_COL = "source", "source_shard", "source_row", "__key"
SOURCE_FP_COL = "source_fingerprint"
STAGINGS = ("references", "tokens")
_MIN_CHUNK_TOKENS = 1 << 14
_MAX_CHUNK_TOKENS = 1 << 22


# --------------------------------------------------------------------------- inputs


def _load_tokenized(path: str) -> dict[str, Any]:
    data = mf.read_manifest(path)
    if data.get("kind") != "tokenized":
        raise InputError(f"{path}: a pool reads tokenized sources, this is {data.get('kind')!r}")
    for key in ("fingerprint", "tokenizer", "dtype", "shards"):
        if key not in data:
            raise ManifestError(f"{path}: tokenized manifest has no {key!r}")
    return data


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


def _val_seed(seed: int) -> int:
    return xxhash.xxh3_64_intdigest(f"{int(seed)}/val".encode()) & ((1 << 63) - 1)


def parse_size(text: str | int) -> int:
    """'256MB', '1G', '64m', '1048576' -> bytes (powers of 1024)."""
    if isinstance(text, int):
        return text
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if s and s[-1] in mult:
            return int(float(s[:-1]) * mult[s[-1]])
        return int(s)
    except ValueError:
        raise InputError(f"cannot read size {text!r} (examples: 256MB, 1G, 1048576)") from None


# --------------------------------------------------------------------------- planning


def plan_pool(
    tokenized: list[str],
    out: str,
    *,
    seq_len: int,
    filter: str | None = None,
    shuffle: str = "exact",
    seed: int = 0,
    memory: int = 1 << 30,
    val_fraction: float = 0.0,
    bos: bool = False,
    shard_size: int = 64 << 20,
    shuffle_options: dict | None = None,
    staging: str = "auto",
    allow_empty: bool = False,
) -> units.Plan:
    """The plan of a pool build: phase 1 one unit per input shard, phase 2 one unit per
    bucket (training buckets, then validation buckets). Reads the sidecars once to count
    the selected documents (errors in the filter surface here, before any work).

    ``staging`` is what pass 1 writes for pass 2: ``"references"`` (each document's input
    row, a few bytes; pass 2 gathers the tokens from the memory-mapped inputs),
    ``"tokens"`` (a copy of the tokens grouped by bucket, read sequentially by pass 2: for
    inputs where random reads are slow) or ``"auto"`` (references unless an input is on a
    network or FUSE file system).

    A filter that selects no document is an error unless ``allow_empty``."""
    from shardcore import props, select

    module = _shuffle_module(shuffle)
    if staging not in STAGINGS + ("auto",):
        raise InputError(f"staging must be auto, {' or '.join(STAGINGS)}; got {staging!r}")
    if not tokenized:
        raise InputError("a pool needs at least one tokenized source")
    if seq_len < 1:
        raise InputError(f"seq_len must be >= 1, got {seq_len}")
    if not 0.0 <= val_fraction < 1.0:
        raise InputError(f"val_fraction must be in [0, 1), got {val_fraction}")
    if memory < (1 << 20):
        raise InputError(f"memory budget {memory} bytes is below the 1 MiB minimum")
    if shard_size < 1:
        raise InputError(f"shard_size must be positive, got {shard_size}")
    options = dict(shuffle_options or {})
    sources, inputs, loaded = [], [], []
    tokenizer = dtype = None
    for path in tokenized:
        path = os.path.abspath(path)
        data = _load_tokenized(path)
        if tokenizer is None:
            tokenizer, dtype = data["tokenizer"], data["dtype"]
        elif data["tokenizer"].get("fingerprint") != tokenizer.get("fingerprint"):
            raise InputError(
                f"{path}: tokenizer {data['tokenizer'].get('spec')!r} differs from the first "
                f"source's {tokenizer.get('spec')!r}; a pool has one tokenizer"
            )
        loaded.append((path, data))
    # One type for each property over every input, so that a filter reads a property
    # absent from one source as NULL there and every pass writes the same schema.
    props_type = select.sidecars_props_type(
        [f"{os.path.join(p, sh['prefix'])}.docs.parquet" for p, d in loaded for sh in d["shards"]]
    )
    for s, (path, data) in enumerate(loaded):
        # "content": what the input's bytes are (its checksums), for the fingerprint and for
        # pass 1 to check that the manifest it verifies against is the one planned with.
        sources.append(
            {"path": path, "fingerprint": data["fingerprint"], "content": mf.content_digest(data)}
        )
        for j, shard in enumerate(data["shards"]):
            prefix = os.path.join(path, shard["prefix"])
            sidecar = f"{prefix}.docs.parquet"
            rows, table = select.select_shard(sidecar, filter, props_type)
            is_val = val_mask(data["fingerprint"], _column(table, "doc_id", sidecar), val_fraction)
            n_tokens = _column(table, "n_tokens", sidecar).astype(np.int64) + int(bos)
            inputs.append(
                {
                    "source": s,
                    "shard": j,
                    "prefix": prefix,
                    "sidecar": sidecar,
                    "docs": [int((~is_val).sum()), int(is_val.sum())],
                    "tokens": [int(n_tokens[~is_val].sum()), int(n_tokens[is_val].sum())],
                }
            )
    if bos and tokenizer.get("bos_id") is None:
        raise InputError(f"bos=True but tokenizer {tokenizer.get('spec')!r} has no BOS token")
    itemsize = np.dtype(dtype).itemsize
    params = {
        "seq_len": int(seq_len),
        "filter": filter,
        "shuffle": shuffle,
        "seed": int(seed),
        "memory": int(memory),
        "val_fraction": float(val_fraction),
        "bos": bool(bos),
        "shard_size": int(shard_size),
        "shuffle_options": options,
    }
    if not allow_empty and not any(sum(i["docs"]) for i in inputs):
        total = sum(int(sh["documents"]) for _, d in loaded for sh in d["shards"])
        raise InputError(
            f"filter {filter!r} selects none of the {total} documents of "
            f"{len(loaded)} tokenized source(s); an empty pool is built only when allowed "
            "(--allow-empty)"
        )
    parents = [s["fingerprint"] for s in sources]
    contents = [s["content"] for s in sources]
    splits = {}
    first_bucket = 0
    for k, split in enumerate(SPLITS):
        counts = np.array([i["docs"][k] for i in inputs], dtype=np.int64)
        total_bytes = sum(i["tokens"][k] for i in inputs) * itemsize
        min_buckets = max(-(-total_bytes // max(1, memory // 4)), -(-total_bytes // shard_size), 1)
        n_buckets = module.num_buckets(counts, min_buckets, **options) if counts.sum() else 0
        splits[split] = {
            "counts": counts.tolist(),
            "num_buckets": int(n_buckets),
            "first_bucket": first_bucket,
            "seed": int(seed) if split == "train" else _val_seed(seed),
            "fingerprint": mf.fingerprint(
                KIND, parents=parents, params={**params, "split": split, "inputs": contents}
            ),
        }
        first_bucket += n_buckets
    phase1 = [{"id": f"assign-{i:05d}", "input": i} for i in range(len(inputs))]
    phase2 = [
        {"id": f"{split}-bucket-{b:05d}", "split": split, "bucket": b}
        for split in SPLITS
        for b in range(splits[split]["num_buckets"])
    ]
    if staging == "auto":
        staging = "tokens" if any(_on_network_fs(s["path"]) for s in sources) else "references"
    meta = {
        # Not a parameter: both stagings write the same bytes (same assignment, same
        # permutation, same packing code), so the mode is kept out of the fingerprint and
        # the manifest, like the number of workers. A rebuild with the other mode is the
        # same artifact.
        "staging": staging,
        "props_type": props.type_to_text(props_type),
        "sources": sources,
        "inputs": inputs,
        "splits": splits,
        "tokenizer": tokenizer,
        "dtype": str(np.dtype(dtype)),
        "pad_id": int(tokenizer["eos_id"]),
        "bos_id": tokenizer.get("bos_id"),
    }
    return units.Plan(STAGE, os.path.abspath(out), params, [phase1, phase2], meta)


def build_pool(
    tokenized: list[str],
    out: str,
    *,
    workers: int = 1,
    progress=None,
    **kwargs,
) -> dict[str, Any]:
    """Plan and run a pool build locally; returns the pool's manifest. ``progress(unit,
    stats)`` is called as units finish."""
    plan = plan_pool(tokenized, out, **kwargs)
    return units.run_local(plan, workers=workers, on_unit_done=progress)


# File system types whose random reads cost a network round trip (NFS, SMB, object stores
# mounted through FUSE): pass 2 reads a staged copy there instead of gathering documents.
_NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs")


def _on_network_fs(path: str) -> bool:
    """True if ``path`` is on a network or FUSE file system (per /proc/mounts; False where
    that cannot be read)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    real, best, fstype = os.path.realpath(path), "", ""
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, fields[2]
    return fstype in _NETWORK_FS or fstype.startswith("fuse")


def _shuffle_module(name: str):
    return shuffle.get_shuffle(name)


def _column(table: pa.Table, name: str, where: str) -> np.ndarray:
    if name not in table.column_names:
        raise ManifestError(f"{where}: sidecar has no column {name!r}")
    return table.column(name).to_numpy()


def _chunk_tokens(plan: units.Plan) -> int:
    return int(min(_MAX_CHUNK_TOKENS, max(_MIN_CHUNK_TOKENS, plan.params["memory"] // 128)))


# --------------------------------------------------------------------------- gathering

# A document part of at least this many tokens is copied as one slice (one memcpy); shorter
# ones are gathered together through one index array per source. Measured on 167,000
# documents of ~300 tokens: a slice copy costs about what an index of 64 tokens does
# (building the index is most of a gather's cost), so all-index gathering took 3x the CPU
# of slices, and a threshold of 64 beat 256 by ~10%.
_SLICE_TOKENS = 64
_SYNC_FILE_RANGE_WRITE = 2


class _Documents:
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
        long = n >= _SLICE_TOKENS
        for k, d, s, m in zip(
            src[long].tolist(),
            dst_at[long].tolist(),
            src_at[long].tolist(),
            n[long].tolist(),
            strict=True,
        ):
            view[d : d + m] = self.sources[k][s : s + m]
        short = ~long & (n > 0)
        if short.any():
            for k in np.unique(src[short]).tolist():
                sel = short & (src == k)
                view[pack.ranges(dst_at[sel], n[sel])] = self.sources[k][
                    pack.ranges(src_at[sel], n[sel])
                ]


def _write_all(f, arr: np.ndarray) -> None:
    view = memoryview(arr).cast("B")
    while view.nbytes:
        view = view[f.write(view) :]


def _load_sync_file_range():
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux / not glibc: no early writeback
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


_sync_file_range = _load_sync_file_range()


def _start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing a just-written range to disk now, without waiting:
    the disk works while the next window is gathered, so the final fdatasync has little
    left to wait for. A hint only; durability comes from the fdatasync."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)


def _fsync_path(path: str | os.PathLike) -> None:
    """fsync a file or a directory (a directory: to make the renames in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_records(
    prefix: Path, docs: _Documents, width: int, dtype: np.dtype, chunk: int, pad_id: int
) -> int:
    """Write ``docs`` packed into records of ``width`` tokens (the last one padded with
    ``pad_id``) as the IndexedDataset ``prefix`` (one sequence per record; the ``.idx`` is
    ``formats.encode_idx``'s). Both files are durable (fdatasync) before they are renamed
    into place. Returns the number of records."""
    records = -(-docs.total // width)
    end = records * width
    buf = np.empty(max(1, chunk // width) * width, dtype=dtype)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    tmp_bin, tmp_idx = Path(f"{bin_path(prefix)}.tmp"), Path(f"{idx_path(prefix)}.tmp")
    try:
        with open(tmp_bin, "wb", buffering=0) as f:
            for w0 in range(0, end, buf.size):
                view = buf[: min(buf.size, end - w0)]
                docs.fill(view, w0)
                if w0 + view.size > docs.total:
                    view[max(0, docs.total - w0) :] = pad_id
                _write_all(f, view)
                _start_writeback(f.fileno(), w0 * dtype.itemsize, view.nbytes)
            os.fdatasync(f.fileno())
        with open(tmp_idx, "wb") as f:
            f.write(encode_idx(dtype, np.full(records, width, dtype=np.int64)))
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp_bin.unlink(missing_ok=True)
        tmp_idx.unlink(missing_ok=True)
        raise
    os.replace(tmp_bin, bin_path(prefix))
    os.replace(tmp_idx, idx_path(prefix))
    return records


# --------------------------------------------------------------------------- pass 1


def _pass1_paths(out: str, i: int) -> tuple[Path, Path, Path]:
    base = Path(out) / PASS1_DIR / f"in-{i:05d}"
    return (
        base.with_name(base.name + ".tokens"),
        base.with_name(base.name + ".docs.arrow"),
        base.with_name(base.name + ".offsets.npy"),
    )


def _run_assign(plan: units.Plan, unit: dict) -> dict:
    import pyarrow as pa

    from shardcore import props, select

    meta, params = plan.meta, plan.params
    i = unit["input"]
    spec = meta["inputs"][i]
    source = meta["sources"][spec["source"]]
    module = _shuffle_module(params["shuffle"])
    options = params["shuffle_options"]
    _check_input(source, spec["prefix"])
    reader = IndexedReader(spec["prefix"])
    rows, table = select.select_shard(
        spec["sidecar"], params["filter"], props.type_from_text(meta.get("props_type"))
    )
    if len(reader) != _row_count(spec["sidecar"]):
        raise ManifestError(
            f"{spec['prefix']}: {len(reader)} sequences but its sidecar has "
            f"{_row_count(spec['sidecar'])} rows"
        )
    is_val = val_mask(
        source["fingerprint"], _column(table, "doc_id", spec["sidecar"]), params["val_fraction"]
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
        counts = np.asarray(info["counts"], dtype=np.int64)
        b, kk = module.assign(counts, i, info["seed"], info["num_buckets"], **options)
        bucket[mask] = b + info["first_bucket"]
        key[mask] = kk
    total_buckets = sum(meta["splits"][s]["num_buckets"] for s in SPLITS)
    order = np.argsort(bucket, kind="stable")
    rows_o = rows[order]
    lengths = reader.lengths[rows_o].astype(np.int64)
    if not np.array_equal(lengths, _column(table, "n_tokens", spec["sidecar"])[order]):
        raise ManifestError(f"{spec['sidecar']}: n_tokens disagrees with {spec['prefix']}.idx")
    doc_offsets = np.searchsorted(bucket[order], np.arange(total_buckets + 1), side="left")
    tok_offsets = np.zeros(total_buckets + 1, dtype=np.int64)
    csum = np.concatenate([[0], np.cumsum(lengths)])
    tok_offsets[:] = csum[doc_offsets]

    tokens_path, docs_path, offsets_path = _pass1_paths(plan.out, i)
    tokens_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tokens_path.with_name(tokens_path.name + ".tmp")
    if _staging(plan) == "tokens":
        # The selected tokens grouped by bucket, for pass 2 to read sequentially. Not
        # fsynced: a temporary as large as the data, deleted by finalize, usually before the
        # kernel writes it back at all; pass 2 checks its size against the offsets.
        docs_stream = _Documents(
            [reader.tokens], np.zeros(rows.size), reader.starts[rows_o], lengths
        )
        buf = np.empty(_chunk_tokens(plan), dtype=reader.dtype)
        with open(tmp, "wb", buffering=0) as f:
            for w0 in range(0, docs_stream.total, buf.size):
                view = buf[: min(buf.size, docs_stream.total - w0)]
                docs_stream.fill(view, w0)
                _write_all(f, view)
    # With "references" staging, the metadata below is all pass 2 needs: each document's
    # input row (ROW_COL) and length, grouped by bucket.

    docs = table.take(pa.array(order))
    docs = docs.append_column(SOURCE_COL, pa.array(np.full(rows.size, spec["source"], np.int32)))
    docs = docs.append_column(SHARD_COL, pa.array(np.full(rows.size, spec["shard"], np.int32)))
    docs = docs.append_column(ROW_COL, pa.array(rows_o))
    docs = docs.append_column(KEY_COL, pa.array(key[order]))
    # The metadata and offsets are small: fsynced, so that this unit's completion marker
    # never points at files a crash could have lost.
    tmp_docs = docs_path.with_name(docs_path.name + ".tmp")
    with pa.OSFile(str(tmp_docs), "wb") as sink, pa.ipc.new_file(sink, docs.schema) as w:
        w.write_table(docs)
    _fsync_path(tmp_docs)
    tmp_off = offsets_path.with_name(offsets_path.name + ".tmp.npy")
    with open(tmp_off, "wb") as f:
        np.save(f, np.stack([doc_offsets.astype(np.int64), tok_offsets]))
        f.flush()
        os.fsync(f.fileno())
    if tmp.exists():
        os.replace(tmp, tokens_path)
    os.replace(tmp_docs, docs_path)
    os.replace(tmp_off, offsets_path)
    _fsync_path(tokens_path.parent)
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


def _staging(plan: units.Plan) -> str:
    # Plans saved before staging existed always staged tokens.
    return plan.meta.get("staging", "tokens")


def _row_count(sidecar: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(sidecar).metadata.num_rows


# --------------------------------------------------------------------------- pass 2


def _split_dir(out: str, split: str) -> Path:
    return Path(out) if split == "train" else Path(out) / VAL_DIR


def shard_prefix(b: int) -> str:
    return f"{SHARDS_DIR}/pool-{b:05d}"


def _run_bucket(plan: units.Plan, unit: dict) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta, params = plan.meta, plan.params
    split, b = unit["split"], unit["bucket"]
    info = meta["splits"][split]
    gb = info["first_bucket"] + b
    dtype = np.dtype(meta["dtype"])
    module = _shuffle_module(params["shuffle"])
    # The bucket's documents in arrival order: from every pass-1 file (in input order).
    parts, tables = [], []
    for i in range(len(meta["inputs"])):
        tokens_path, docs_path, offsets_path = _pass1_paths(plan.out, i)
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
    lengths = docs.column("n_tokens").to_numpy().astype(np.int64)
    if _staging(plan) == "references":
        sources, src, starts = _gather_sources(
            meta, parts, docs.column(ROW_COL).to_numpy(), lengths, dtype, _chunk_tokens(plan)
        )
    else:
        sources, src, starts = _staged_sources(parts, lengths, dtype)
    keys = docs.column(KEY_COL).to_numpy()
    order = np.asarray(module.order_bucket(keys, info["seed"], b, **params["shuffle_options"]))
    docs = docs.take(pa.array(order)).drop_columns([KEY_COL])
    bos = params["bos"]
    stream = _Documents(
        sources, src[order], starts[order], lengths[order], head=meta["bos_id"] if bos else None
    )
    packing = pack.plan_packing(lengths[order] + int(bos), params["seq_len"])

    split_dir = _split_dir(plan.out, split)
    prefix = split_dir / shard_prefix(b)
    width = params["seq_len"] + 1
    records = _write_records(prefix, stream, width, dtype, _chunk_tokens(plan), meta["pad_id"])
    if records != packing.num_records:
        raise ManifestError(
            f"{prefix}: wrote {records} records, packing planned {packing.num_records}"
        )
    pack.save_segments(f"{prefix}.segments.npz", packing.segments)
    tmp = Path(f"{prefix}.docs.parquet.tmp")
    pq.write_table(docs, tmp)
    _fsync_path(tmp)
    os.replace(tmp, f"{prefix}.docs.parquet")
    # The renames above are durable before run_unit writes this unit's completion marker.
    _fsync_path(prefix.parent)
    return {
        "records": packing.num_records,
        "documents": int(docs.num_rows),
        "tokens": packing.num_tokens,
        "padding": packing.padding,
    }


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
    ascending position, so this is a forward sweep of few, large reads (``_read_spans``)."""
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
        _read_spans(
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


# Documents closer than this in a file are read with one read (through a scratch buffer)
# rather than one read each: a system call costs about as much as copying 16 KiB.
_GAP_BYTES = 16 << 10


def _read_spans(
    path: Path, offsets: np.ndarray, nbytes: np.ndarray, out: np.ndarray, *, span: int
) -> None:
    """Read the byte ranges ``[offsets[k], offsets[k] + nbytes[k])`` (ascending) of ``path``
    back to back into ``out``, with positioned reads of at most ``span`` bytes through a
    scratch buffer (a range longer than that is read straight into ``out``) (no memory map: its fault-around
    would map, and count in RSS, far more than the documents). Read-ahead is turned off
    for the file: the reads say exactly what is needed."""
    dst = memoryview(out).cast("B")
    offsets = np.asarray(offsets, dtype=np.int64)
    nbytes = np.asarray(nbytes, dtype=np.int64)
    # Gather whole tokens, not bytes, when every range is token-aligned (always, for
    # IndexedDataset pointers): an index per token is itemsize times fewer than per byte.
    unit = out.dtype.itemsize
    if unit > 1 and ((offsets % unit).any() or (nbytes % unit).any()):
        unit = 1
    gather_dtype = out.dtype if unit > 1 else np.uint8
    ends = offsets + nbytes
    # Runs of ranges with gaps under _GAP_BYTES, each at most ``span`` bytes long.
    breaks = np.flatnonzero(offsets[1:] - ends[:-1] > _GAP_BYTES) + 1
    bounds = [0, *breaks.tolist(), offsets.size]
    scratch = None
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        at = 0
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            while lo < hi:
                # The longest prefix of the run within one span (at least one range).
                stop = lo + 1
                limit = int(offsets[lo]) + span
                stop = max(stop, int(np.searchsorted(ends[lo:hi], limit, side="right")) + lo)
                first, last = int(offsets[lo]), int(ends[stop - 1])
                want = int(nbytes[lo:stop].sum())
                if last - first == want:  # contiguous: straight into place
                    _pread_into(fd, dst[at : at + want], first, path)
                else:
                    if scratch is None or scratch.nbytes < last - first:
                        scratch = np.empty(span, dtype=np.uint8)
                    _pread_into(fd, memoryview(scratch)[: last - first], first, path)
                    _gather(
                        scratch[: last - first].view(gather_dtype),
                        (offsets[lo:stop] - first) // unit,
                        nbytes[lo:stop] // unit,
                        np.frombuffer(dst[at : at + want], dtype=gather_dtype),
                    )
                at += want
                lo = stop
    finally:
        os.close(fd)


def _gather(src: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
    """``out`` = the ranges ``src[starts[k] : starts[k] + lengths[k]]`` back to back. Ranges
    of at least _SLICE_TOKENS items are copied as slices (one memcpy each: under 1 us per
    range, cheaper than an index of that many items); the shorter ones together through
    one index array."""
    ends = np.cumsum(lengths)
    at = ends - lengths
    long = lengths >= _SLICE_TOKENS
    for d, s, m in zip(
        at[long].tolist(), starts[long].tolist(), lengths[long].tolist(), strict=True
    ):
        out[d : d + m] = src[s : s + m]
    short = ~long
    if short.any():
        out[pack.ranges(at[short], lengths[short])] = src[
            pack.ranges(starts[short], lengths[short])
        ]


def _pread_into(fd: int, view: memoryview, offset: int, path: Path) -> None:
    while view.nbytes:
        n = os.preadv(fd, [view], offset)
        if n == 0:
            raise ManifestError(f"{path}: ends before offset {offset}; changed since pass 1?")
        view, offset = view[n:], offset + n


def _staged_sources(
    parts: list[tuple], lengths: np.ndarray, dtype: np.dtype
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The "tokens" staging: the bucket's slice of every pass-1 tokens file, read sequentially
    straight into one array (the bucket's memory)."""
    bucket_tokens = np.empty(int(lengths.sum()), dtype=dtype)
    at = 0
    for _, _, path, t0, t1 in parts:
        with open(path, "rb") as f:
            f.seek(t0 * dtype.itemsize)
            view = memoryview(bucket_tokens[at : at + t1 - t0]).cast("B")
            if f.readinto(view) != view.nbytes:
                raise ManifestError(f"{path}: shorter than its offsets say")
        at += t1 - t0
    if at != bucket_tokens.size:
        raise ManifestError(f"{parts[0][2].parent}: pass-1 offsets disagree with n_tokens")
    starts = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return [bucket_tokens], np.zeros(lengths.size, dtype=np.int64), starts


# --------------------------------------------------------------------------- finalize


def _run_unit(plan: units.Plan, unit: dict) -> dict:
    if "input" in unit:
        return _run_assign(plan, unit)
    return _run_bucket(plan, unit)


def _finalize(plan: units.Plan, stats: list[dict]) -> dict[str, Any]:
    phase2 = plan.phases[1]
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


def _finalize_split(plan: units.Plan, split: str, buckets: list[tuple[int, dict]]) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta, params = plan.meta, plan.params
    info = meta["splits"][split]
    split_dir = _split_dir(plan.out, split)
    split_dir.mkdir(parents=True, exist_ok=True)
    shards, cumulative = [], [0]
    num_docs = num_tokens = padding = 0
    tmp_docs = split_dir / f".{DOCUMENTS_NAME}.tmp"
    writer = None
    fps = pa.array([s["fingerprint"] for s in meta["sources"]])
    for b, st in buckets:
        if not st["records"]:
            continue
        prefix = shard_prefix(b)
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
        table = pq.read_table(split_dir / f"{prefix}.docs.parquet")
        src = table.column(SOURCE_COL).to_numpy()
        table = table.append_column(SOURCE_FP_COL, fps.take(pa.array(src)))
        if writer is None:
            writer = pq.ParquetWriter(tmp_docs, table.schema)
        writer.write_table(table.cast(writer.schema))
    if writer is None:
        writer = pq.ParquetWriter(tmp_docs, pa.schema([(SOURCE_COL, pa.int32())]))
    writer.close()
    os.replace(tmp_docs, split_dir / DOCUMENTS_NAME)
    files = []
    for path in sorted(split_dir.rglob("*")):
        rel = path.relative_to(split_dir).as_posix()
        if path.is_file() and _is_artifact_file(rel):
            files.append(_file_entry(path, rel))
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
    if split == "val":
        mf.write_manifest(split_dir, manifest)
    return manifest


def _file_entry(path: Path, rel: str) -> dict[str, Any]:
    """``verify.file_entry``'s entry (size, xxh3, per-block xxh3), hashed through mmap so
    that checksumming needs no read buffer."""
    size = path.stat().st_size
    block = verify.block_size_for(size)
    if size == 0:
        return {
            "path": rel,
            "size": 0,
            "xxh3": xxhash.xxh3_64_hexdigest(b""),
            "block_size": block,
            "blocks": "",
        }
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        view = memoryview(m)
        try:
            whole = xxhash.xxh3_64_hexdigest(view)
            blocks = "".join(
                xxhash.xxh3_64_hexdigest(view[i : i + block]) for i in range(0, size, block)
            )
        finally:
            view.release()
    return {"path": rel, "size": size, "xxh3": whole, "block_size": block, "blocks": blocks}


def _is_artifact_file(rel: str) -> bool:
    top = rel.split("/", 1)[0]
    if top in (units.MARKER_DIR, PASS1_DIR, VAL_DIR) or rel.startswith("."):
        return False
    return rel not in (mf.MANIFEST_NAME, units.PLAN_NAME) and not rel.endswith(".tmp")


units.register_stage(STAGE, run_unit=_run_unit, finalize=_finalize)


def _check_pool(root: Path, manifest: dict[str, Any]) -> list[verify.Problem]:
    """``shardyard verify``'s pool checks: every shard is an IndexedDataset of records of
    exactly ``record_tokens`` tokens, its segments cover each record exactly, and the
    shard counts add up to the manifest's cumulative records."""
    problems: list[verify.Problem] = []
    width = int(manifest["record_tokens"])
    cumulative = [0]
    for shard in manifest.get("shards", []):
        rel = shard["prefix"]
        try:
            reader = IndexedReader(root / rel)
            seg = pack.load_segments(root / f"{rel}.segments.npz")
        except Exception as exc:  # FormatError, OSError, a damaged .npz: all are findings
            problems.append(verify.Problem(rel, None, f"unreadable: {exc}"))
            continue
        if len(reader) != shard["records"]:
            problems.append(
                verify.Problem(
                    f"{rel}.idx", 18, f"{len(reader)} records, manifest says {shard['records']}"
                )
            )
        bad = np.flatnonzero(reader.lengths != width)
        if bad.size:
            problems.append(
                verify.Problem(
                    f"{rel}.idx",
                    34 + 4 * int(bad[0]),
                    f"record {int(bad[0])} has {int(reader.lengths[bad[0]])} tokens, not {width}",
                )
            )
        per_record = (
            np.add.reduceat(seg.seg_length.astype(np.int64), seg.seg_record_offsets[:-1])
            if seg.num_records
            else np.zeros(0)
        )
        if seg.num_records != len(reader) or (per_record != width).any():
            problems.append(
                verify.Problem(
                    f"{rel}.segments.npz", None, "segments do not cover the records exactly"
                )
            )
        cumulative.append(cumulative[-1] + len(reader))
    if cumulative != manifest.get("cumulative_records"):
        problems.append(
            verify.Problem("manifest.json", None, "cumulative_records disagree with the shards")
        )
    return problems


verify.register_check(KIND, _check_pool)


# --------------------------------------------------------------------------- reading


class Pool:
    """A built pool, read through np.memmap. Records are numbered 0..num_records-1 in
    pool order across shards."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.manifest = mf.read_manifest(self.path)
        if self.manifest.get("kind") != KIND:
            raise ManifestError(f"{self.path}: not a pool (kind {self.manifest.get('kind')!r})")
        self.cumulative = list(self.manifest["cumulative_records"])
        self._readers: dict[int, IndexedReader] = {}
        self._segments: dict[int, pack.Segments] = {}

    @property
    def num_records(self) -> int:
        return int(self.manifest["num_records"])

    @property
    def seq_len(self) -> int:
        return int(self.manifest["seq_len"])

    @property
    def num_shards(self) -> int:
        return len(self.manifest["shards"])

    def __len__(self) -> int:
        return self.num_records

    def reader(self, shard: int) -> IndexedReader:
        if shard not in self._readers:
            self._readers[shard] = IndexedReader(
                self.path / self.manifest["shards"][shard]["prefix"]
            )
        return self._readers[shard]

    def segments(self, shard: int) -> pack.Segments:
        if shard not in self._segments:
            prefix = self.manifest["shards"][shard]["prefix"]
            self._segments[shard] = pack.load_segments(self.path / f"{prefix}.segments.npz")
        return self._segments[shard]

    def _where(self, i: int) -> tuple[int, int]:
        if not 0 <= i < self.num_records:
            raise IndexError(f"{self.path}: record {i} out of range [0, {self.num_records})")
        shard = bisect.bisect_right(self.cumulative, i) - 1
        return shard, i - self.cumulative[shard]

    def record(self, i: int) -> np.ndarray:
        """Record ``i``: seq_len + 1 tokens (a read-only view)."""
        shard, r = self._where(int(i))
        return self.reader(shard)[r]

    def records(self, start: int, stop: int) -> np.ndarray:
        """Records [start, stop) as an array of shape (stop - start, seq_len + 1)."""
        width = self.seq_len + 1
        if not 0 <= start <= stop <= self.num_records:
            raise IndexError(
                f"{self.path}: records [{start}, {stop}) out of [0, {self.num_records}]"
            )
        parts = []
        i = start
        while i < stop:
            shard, r = self._where(i)
            n = min(stop - i, self.cumulative[shard + 1] - i)
            tokens = self.reader(shard).tokens[r * width : (r + n) * width]
            parts.append(np.asarray(tokens).reshape(n, width))
            i += n
        if not parts:
            return np.zeros((0, width), dtype=np.dtype(self.manifest["dtype"]))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def boundaries(self, i: int) -> dict[str, np.ndarray]:
        """Segments of record ``i``: ``start``, ``length``, ``doc`` (pool document index,
        -1 for padding) and ``doc_offset`` (token offset within that document)."""
        shard, r = self._where(int(i))
        seg = self.segments(shard).of_record(r)
        first = self.manifest["shards"][shard]["first_document"]
        seg["doc"] = np.where(seg["doc"] >= 0, seg["doc"] + first, -1)
        return seg

    @cached_property
    def documents(self) -> pa.Table:
        import pyarrow.parquet as pq

        return pq.read_table(self.path / DOCUMENTS_NAME)

    def main_documents(self) -> np.ndarray:
        """Per record, the pool document contributing most of its tokens."""
        parts = []
        for shard, info in enumerate(self.manifest["shards"]):
            local = self.segments(shard).main_document()
            parts.append(np.where(local >= 0, local + info["first_document"], -1))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def record_labels(self, property: str) -> np.ndarray:
        """Per record, the value of ``property`` of its main document (see
        ``document_values`` for the names)."""
        return self.document_values(property)[self.main_documents()]

    def document_values(self, name: str) -> np.ndarray:
        """Per pool document, a property: the user's by its own name (dotted for nested
        fields), Shardyard's as ``_doc.<column>`` (``_doc.source`` is the index of the
        tokenized source in the manifest's ``sources``), or by the bare column name when
        no user property has it. Nested values are given as JSON text."""
        import pyarrow as pa

        from shardcore import props

        docs = self.documents
        facts = [c for c in docs.column_names if c != props.PROPS]
        col = None
        if name.startswith(props.FACTS + "."):
            fact = name[len(props.FACTS) + 1 :]
            col = docs.column(fact) if fact in facts else None
        else:
            col = props.column(docs, name)
            if col is None and name in facts:
                col = docs.column(name)
        if col is None:
            known = props.names(props.props_type(docs.schema)) + [
                f"{props.FACTS}.{c}" for c in facts
            ]
            raise InputError(f"{self.path}: unknown property {name!r} (known: {', '.join(known)})")
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        return props.as_text_if_nested(col).to_numpy(zero_copy_only=False)

    def locate(self, sample: int | None = None, tokens: int | None = None) -> dict[str, int]:
        from shardcore.resume import locate_pool

        return locate_pool(self.manifest, sample=sample, tokens=tokens)

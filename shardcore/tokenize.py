"""The tokenize stage: source files -> a tokenized source (IndexedDataset shards, one
sequence per document, plus a Parquet sidecar per shard and a manifest).

Three phases of independent units (``shardcore.units``):

1. ``tokenize`` units, one per segment: a whole file, or a ``unit_bytes`` byte range of a
   plain ``.jsonl`` (ranges own the lines that start in them). A unit streams its
   segment in batches, encodes each batch with one tokenizer call, appends EOS (and BOS)
   with numpy, and writes *chunks* under ``_parts/<unit>/``: raw tokens, lengths and a
   sidecar. Chunks are flushed every few million tokens, so memory stays bounded whatever
   the file size.
2. one ``index`` unit: reads the stats of every tokenize unit once and writes the chunk
   index (global token and document offset of every chunk, line offsets per segment).
3. ``assemble`` units, one per tokenize unit: documents are numbered in source order and
   shard k holds the documents whose first token falls in ``[k, k+1) * shard_size`` of the
   concatenated output. Unit j writes the shards whose range starts inside part j, reading
   later parts when a shard spans them. Shard cuts therefore depend only on the data and
   ``shard_size``, never on how units or workers were scheduled: the bytes are identical
   for any number of workers. A document longer than a shard makes the next index empty;
   shard names keep k, so a name may be skipped.

``finalize`` merges the units' bad-input reports (line numbers made absolute by adding the
line counts of a file's earlier segments), writes the manifest (the commit point) and
removes ``_parts``.
"""

from __future__ import annotations

import bisect
import ctypes
import itertools
import json
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from shardcore import atomic, direct, kernels, limits, props, storage, units
from shardcore.encoders import DEFAULT_ENGINE, DEFAULT_TOKENIZER, check_engine, load_tokenizer
from shardcore.errors import InputError
from shardcore.formats import token_dtype
from shardcore.inputs import list_inputs
from shardcore.manifest import fingerprint, write_manifest
from shardcore.readers import (
    BadInput,
    Document,
    Rows,
    SegmentStats,
    read_segment_rows,
    splittable,
    utf8_sizes,
)
from shardcore.tokenize_assemble import (
    CHUNK_DOCS,
    INDEX_NAME,
    PARTS_DIR,
    owned_shards,
    run_assemble,
)

STAGE = "tokenize"
KIND = "tokenized"

_BATCH_CHARS = 1 << 20  # text per tokenizer call: amortizes call overhead, bounds memory
_CHUNK_TOKENS = 8 << 20  # tokens per part chunk before it is flushed to disk
_CHUNK_DOCS = 200_000
# Mean tokens a document from which _place's numpy path copies a slice per document (a
# loop step costs about what a masked assignment of this many tokens does).
_SLICE_TOKENS = 1024
_CHUNK_SLACK = 1 << 20  # room for one more batch (~1 MB of text) in a chunk's buffer
# A finished unit's chunk buffer, by dtype, for the process's next unit: a fresh one costs
# its pages' first touch (~2 ms per 10 MB) on every unit.
_SPARE_BUFFERS: dict[str, np.ndarray] = {}
_spare_lock = threading.Lock()


def _chunk_buffer(dtype: np.dtype) -> np.ndarray:
    with _spare_lock:
        spare = _SPARE_BUFFERS.pop(dtype.str, None)
    return spare if spare is not None else direct.aligned_empty(_CHUNK_TOKENS + _CHUNK_SLACK, dtype)


def plan_tokenize(
    inputs: list[str],
    out: str,
    *,
    tokenizer: str = DEFAULT_TOKENIZER,
    engine: str = DEFAULT_ENGINE,
    text_field: str = "text",
    txt_mode: str = "file",
    shard_size: int = 256 << 20,
    bos: bool = False,
    strict: bool = False,
    unit_bytes: int = 64 << 20,
    storage_options: dict[str, Any] | None = None,
) -> units.Plan:
    """Plan the tokenization of ``inputs`` into the directory ``out`` (stage "tokenize")."""
    if txt_mode not in ("file", "line"):
        raise InputError(f"txt_mode must be 'file' or 'line', got {txt_mode!r}")
    shard_size = limits.size("shard_size", shard_size, 1024)
    unit_bytes = limits.size("unit_bytes", unit_bytes)
    storage_options = dict(storage_options or {})
    # Planning needs the tokenizer's facts only: the fast engine is loaded here just when it
    # was required (so that an unavailable one fails now); "auto" never fails.
    tok = load_tokenizer(
        tokenizer, "gigatoken" if check_engine(engine) == "gigatoken" else "reference"
    )
    if bos and tok.bos_id is None:
        raise InputError(f"tokenizer {tokenizer!r} has no BOS token; tokenize without bos")
    files = list_inputs(list(inputs), storage_options)
    phase1: list[dict[str, Any]] = []
    for fi, f in enumerate(files):
        size = f["size"]
        if size and size > unit_bytes and splittable(f["url"], txt_mode):
            for start in range(0, size, unit_bytes):
                end = min(start + unit_bytes, size)
                phase1.append({"file_index": fi, "start": start, "end": end})
        else:
            phase1.append({"file_index": fi, "start": 0, "end": None})
    for i, u in enumerate(phase1):
        u["id"] = f"tok-{i:06d}"
        f = files[u["file_index"]]
        u["bytes"] = (u["end"] - u["start"]) if u["end"] is not None else (f["size"] or 0)
    index = [{"id": "index", "index": True, "bytes": 0}]
    phase3 = [{"id": f"asm-{i:06d}", "part": i, "bytes": 0} for i in range(len(phase1))]
    dtype = token_dtype(tok.vocab_size)
    params = {
        "inputs": [f["url"] for f in files],
        "tokenizer": tokenizer,
        "engine": engine,
        "text_field": text_field,
        "txt_mode": txt_mode,
        "shard_size": int(shard_size),
        "bos": bool(bos),
        "strict": bool(strict),
        "unit_bytes": int(unit_bytes),
    }
    meta = {
        "files": files,
        "tokenizer": tok.describe(),
        "dtype": dtype.name,
        "total_bytes": sum(f["size"] or 0 for f in files),
        "storage_options": storage_options,
    }
    return units.Plan(STAGE, storage.resolve(out), params, [phase1, index, phase3], meta)


def tokenize(
    inputs: list[str],
    out: str,
    *,
    workers: int = 1,
    progress: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Tokenize ``inputs`` into ``out`` and return the manifest (plan + units.run_local).
    ``options`` are those of ``plan_tokenize``; ``progress(unit, stats)`` is called per unit."""
    plan = plan_tokenize(inputs, out, **options)
    return units.run_local(plan, workers=workers, on_unit_done=progress)


# ---------------------------------------------------------------- phase 1: tokenize


class _Bad:
    """Per-reason counts and the first samples of one segment's bad input."""

    def __init__(self) -> None:
        self.reasons: dict[str, dict[str, Any]] = {}

    def add(self, bad: BadInput) -> None:
        r = self.reasons.setdefault(bad.reason, {"count": 0, "samples": []})
        r["count"] += 1
        if len(r["samples"]) < units.BAD_SAMPLES_PER_REASON:
            r["samples"].append({"line": bad.line, "message": bad.message, "excerpt": bad.excerpt})

    def bad_input(self, file: str) -> dict[str, dict[str, units.BadReason]]:
        """``units.UnitCounts.bad_input`` of the segment (lines counted within it)."""
        if not self.reasons:
            return {}
        return {
            file: {
                reason: {"count": r["count"], "samples": [_sample_text(s) for s in r["samples"]]}
                for reason, r in self.reasons.items()
            }
        }


def _sample_text(sample: dict[str, Any]) -> str:
    where = "" if sample["line"] is None else f"segment line {sample['line']}: "
    excerpt = f" | {sample['excerpt']}" if sample.get("excerpt") else ""
    return f"{where}{sample['message']}{excerpt}"


def _line_base(url: str, start: int, storage_options: dict) -> int:
    """Lines before the first line of the segment starting at byte ``start`` > 0 (only
    computed to name a line in a --strict error). That line follows the first newline at
    or after ``start - 1``, so it is preceded by the newlines of [0, start - 1) plus one."""
    import fsspec

    count = 0
    with fsspec.open(url, "rb", **storage_options) as f:
        left = start - 1
        while left > 0:
            block = f.read(min(left, 8 << 20))
            if not block:
                break
            count += block.count(b"\n")
            left -= len(block)
    return count + 1


_NO_PROPS: dict[str, Any] = {}


class _Batch:
    """Documents for one tokenizer call, as columns."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.props: list[dict[str, Any]] = []
        self.lines: list[int] = []
        self.offsets: list[int | None] = []
        self.chars = 0

    def append(self, d: Document) -> None:
        self.texts.append(d.text)
        self.props.append(d.props)
        self.lines.append(d.line)
        self.offsets.append(d.byte_offset)
        self.chars += len(d.text)

    def take(self, rows: Rows, cum: list[int], at: int, limit: int) -> int:
        """Take ``rows``' documents from ``at`` until the batch holds ``limit`` characters
        (or the rows end); ``cum`` is the rows' cumulative lengths from 0. Returns where
        it stopped."""
        stop = min(bisect.bisect_left(cum, cum[at] + limit - self.chars, lo=at + 1), len(cum) - 1)
        self.texts += rows.texts[at:stop]
        if rows.props is None:  # the same empty dict for each: read, never changed, here
            self.props += itertools.repeat(_NO_PROPS, stop - at)
        else:
            self.props += rows.props[at:stop]
        self.lines += rows.lines[at:stop]
        self.offsets += rows.offsets[at:stop]
        self.chars += cum[stop] - cum[at]
        return stop


class _PartWriter:
    """Buffers tokenized documents and flushes them as chunks of one unit's part.

    A batch's documents are placed (with their EOS, and BOS) straight into one page-aligned
    buffer, and a chunk's tokens go from it to the disk with direct I/O
    (``direct.write_file``): no concatenation of batches, and no copy into the page cache,
    whose cost on a fresh file varied from 0.5 to 2.5 ns a byte between runs. The assemble
    units read the chunks back once."""

    def __init__(self, directory: Path, dtype: np.dtype, file: str, eos: int, bos: int | None):
        self.dir = directory
        self.dtype = dtype
        self.file = file
        self.eos, self.bos = eos, bos
        self.chunks: list[dict[str, int]] = []
        self.cpu = {"chunk_tokens": 0.0, "chunk_sidecars": 0.0, "place": 0.0}
        self.buf = _chunk_buffer(dtype)
        self._reset()

    def _reset(self) -> None:
        self.fill = 0
        self.lengths: list[np.ndarray] = []
        self.lines: list[int] = []
        self.offsets: list[int | None] = []
        self.nbytes: list[int] = []
        self.props: list[dict[str, Any]] = []

    def add(self, flat: np.ndarray, lengths: np.ndarray, rows: _Batch, sizes: list[int]) -> int:
        """Add the encoded documents ``flat`` (cut by ``lengths``, without EOS or BOS),
        their source rows and their texts' UTF-8 sizes; returns the tokens added."""
        extra = 1 + (self.bos is not None)
        n = int(flat.size) + extra * int(lengths.size)
        if self.fill + n > self.buf.size:
            self.flush()
        if n > self.buf.size:  # one batch larger than a chunk: a buffer of its own
            self.buf = direct.aligned_empty(n, self.dtype)
        c0 = time.process_time()
        out = self.buf[self.fill : self.fill + n]
        self.lengths.append(_place(out, flat, lengths, self.eos, self.bos))
        self.cpu["place"] += time.process_time() - c0
        self.fill += n
        self.lines += rows.lines
        self.offsets += rows.offsets
        self.nbytes += sizes
        self.props += rows.props
        if self.fill >= _CHUNK_TOKENS or len(self.lines) >= _CHUNK_DOCS:
            self.flush()
        return n

    def flush(self) -> None:
        if not self.lines:
            return
        import pyarrow as pa

        c0 = time.process_time()
        self.dir.mkdir(parents=True, exist_ok=True)
        stem = self.dir / f"c{len(self.chunks):05d}"
        lengths = np.concatenate(self.lengths).astype(np.int32)
        direct.write_file(f"{stem}.bin", self.buf, self.fill)
        np.save(f"{stem}.len.npy", lengths)
        c1 = time.process_time()
        self.cpu["chunk_tokens"] += c1 - c0
        n = len(self.lines)
        if self.offsets.count(None):  # Parquet rows have no byte offset
            has_offset = np.fromiter((o is not None for o in self.offsets), dtype=bool, count=n)
            offsets = np.fromiter((o or 0 for o in self.offsets), dtype=np.int64, count=n)
        else:
            has_offset, offsets = None, np.array(self.offsets, dtype=np.int64)
        cols = {  # built from numpy (props.numbers): pa.array would import pandas
            "file": props.repeated_string(self.file, n),
            "line": props.numbers(np.array(self.lines, dtype=np.int64)),
            "byte_offset": props.numbers(offsets, has_offset),
            "n_tokens": props.numbers(lengths),
            "n_bytes": props.numbers(np.array(self.nbytes, dtype=np.int64)),
        }
        user = props.to_arrow(self.props)
        if user is not None:
            cols[props.PROPS] = user
        # Arrow IPC: the assemble unit reads it back as it was, without decoding Parquet.
        table = pa.table(cols)
        with pa.OSFile(f"{stem}{CHUNK_DOCS}", "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)
        self.cpu["chunk_sidecars"] += time.process_time() - c1
        self.chunks.append({"documents": n, "tokens": self.fill})
        self._reset()

    def close(self) -> None:
        """Flush the last chunk and leave the buffer to the process's next unit."""
        self.flush()
        if self.buf.size == _CHUNK_TOKENS + _CHUNK_SLACK:
            with _spare_lock:
                _SPARE_BUFFERS[self.dtype.str] = self.buf


_PLACE_SOURCE = r"""
#include <stdint.h>
#include <string.h>

/* Documents back to back, each as [BOS] + tokens + EOS. */
#define PLACE(NAME, T)                                                                    \
    void NAME(const uint32_t *flat, const int64_t *lengths, int64_t n, T *out,            \
              int64_t eos, int64_t bos, int32_t has_bos) {                                \
        for (int64_t d = 0; d < n; d++) {                                                 \
            if (has_bos) *out++ = (T)bos;                                                 \
            int64_t k = lengths[d];                                                       \
            for (int64_t i = 0; i < k; i++) out[i] = (T)flat[i];                          \
            out += k;                                                                     \
            flat += k;                                                                    \
            *out++ = (T)eos;                                                              \
        }                                                                                 \
    }
PLACE(sy_place_32, int32_t)
PLACE(sy_place_16, uint16_t)
"""


def _place_kernel() -> Any:
    """The compiled placement (None without a C compiler: numpy then places)."""
    lib = kernels.compile_kernel("tokenize_place", _PLACE_SOURCE)
    if lib is not None and not getattr(lib, "_sy_typed", False):
        u32 = np.ctypeslib.ndpointer(np.uint32, flags="C")
        i64 = np.ctypeslib.ndpointer(np.int64, flags="C")
        for name, t in (("sy_place_32", np.int32), ("sy_place_16", np.uint16)):
            fn = getattr(lib, name)
            fn.argtypes = [u32, i64, ctypes.c_int64, np.ctypeslib.ndpointer(t, flags="C")]
            fn.argtypes += [ctypes.c_int64, ctypes.c_int64, ctypes.c_int32]
            fn.restype = None
        lib._sy_typed = True  # type: ignore[attr-defined]  # a mark on the loaded library
    return lib


def _place(
    out: np.ndarray, flat: np.ndarray, lengths: np.ndarray, eos: int, bos: int | None
) -> np.ndarray:
    """Write the encoded documents (``flat``, cut by ``lengths``) back to back into
    ``out``, each as [BOS] + tokens + EOS; returns their new lengths. One pass of compiled
    code (a copy at memory speed whatever the documents' lengths); without a compiler,
    long documents are copied a slice each and short ones by one masked assignment."""
    extra = 1 + (bos is not None)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    out_lengths = lengths + extra
    fn = None
    if flat.dtype == np.uint32 and out.flags.c_contiguous and out.dtype in (np.int32, np.uint16):
        lib = _place_kernel()
        if lib is not None:
            fn = lib.sy_place_32 if out.dtype == np.int32 else lib.sy_place_16
    if fn is not None:
        if int(lengths.sum()) != flat.size or out.size < flat.size + extra * lengths.size:
            raise ValueError("_place: lengths do not cut flat, or out is too small")
        flat = np.ascontiguousarray(flat)
        fn(flat, lengths, lengths.size, out, eos, bos or 0, bos is not None)
        return out_lengths
    if flat.dtype.itemsize == out.dtype.itemsize:
        flat = flat.view(out.dtype)  # ids are below 2**31: the same values, copied not cast
    ends = np.cumsum(out_lengths)
    if flat.size >= _SLICE_TOKENS * lengths.size:  # long documents: one slice copy each
        head = int(bos is not None)
        starts = (ends - out_lengths).tolist()
        at = 0
        for start, n in zip(starts, lengths.tolist(), strict=True):
            out[start + head : start + head + n] = flat[at : at + n]
            at += n
        out[ends - 1] = eos
        if bos is not None:
            out[ends - out_lengths] = bos
        return out_lengths
    keep = np.ones(out.size, dtype=bool)
    keep[ends - 1] = False
    out[ends - 1] = eos
    if bos is not None:
        starts = ends - out_lengths
        keep[starts] = False
        out[starts] = bos
    out[keep] = flat
    return out_lengths


def _run_tokenize(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    p, meta = plan.params, plan.meta
    file = meta["files"][unit["file_index"]]["url"]
    so = meta.get("storage_options") or {}
    tok = load_tokenizer(p["tokenizer"], p.get("engine", DEFAULT_ENGINE))
    if tok.fingerprint != meta["tokenizer"]["fingerprint"]:
        raise InputError(f"tokenizer {p['tokenizer']!r} changed since the plan was made")
    dtype = np.dtype(meta["dtype"])
    eos, bos = tok.eos_id, (tok.bos_id if p["bos"] else None)
    part_dir = Path(plan.out) / PARTS_DIR / unit["id"]
    if part_dir.exists():  # a crashed earlier attempt: start clean
        shutil.rmtree(part_dir)
    writer = _PartWriter(part_dir, dtype, file, eos, bos)
    seg = SegmentStats()
    bad = _Bad()
    batch = _Batch()
    documents = tokens = text_bytes = 0
    encode_cpu = 0.0
    unit_cpu0 = time.process_time()
    ref_docs0 = getattr(tok, "reference_documents", 0)
    reloads0 = getattr(tok, "reloads", 0)

    def run_batch() -> None:
        nonlocal batch, documents, tokens, text_bytes, encode_cpu
        c0 = time.process_time()
        flat, lengths = tok.encode_flat(batch.texts)
        encode_cpu += time.process_time() - c0
        # Counted after the tokenizer has read the texts: it made their UTF-8, which
        # CPython keeps and str.encode copies (the first encoding costs 7x more).
        sizes = utf8_sizes(batch.texts)
        tokens += writer.add(flat, lengths, batch, sizes)
        documents += len(batch.texts)
        text_bytes += sum(sizes)
        batch = _Batch()

    start, end = unit["start"], unit["end"]
    for item in read_segment_rows(
        file,
        start=start,
        end=end,
        text_field=p["text_field"],
        txt_mode=p["txt_mode"],
        storage_options=so,
        stats=seg,
    ):
        if isinstance(item, Rows):
            at = 0
            cum = list(itertools.accumulate(map(len, item.texts), initial=0))
            while at < len(item.texts):
                at = batch.take(item, cum, at, _BATCH_CHARS)
                if batch.chars >= _BATCH_CHARS:
                    run_batch()
            continue
        if isinstance(item, BadInput):
            if p["strict"]:
                line = item.line
                if line is not None and start:
                    line += _line_base(file, start, so)
                raise InputError(item.describe(file, line))
            bad.add(item)
            continue
        batch.append(item)
        if batch.chars >= _BATCH_CHARS:
            run_batch()
    if batch.texts:
        run_batch()
    writer.close()
    return {
        "kind": "tokenize",
        "file_index": unit["file_index"],
        "start": start,
        "documents": documents,
        "tokens": tokens,
        "text_bytes": text_bytes,
        "lines": seg.lines,
        "blank_lines": seg.blank_lines,
        "bytes": unit["bytes"],
        "chunks": writer.chunks,
        # CPU in the tokenizer call itself: the rest of the unit is pipeline overhead.
        "encode_cpu_seconds": round(encode_cpu, 3),
        "engine": tok.engine,
        # Documents the fast engine handed to the reference (they spell a special token).
        "reference_documents": getattr(tok, "reference_documents", 0) - ref_docs0,
        "engine_reloads": getattr(tok, "reloads", 0) - reloads0,
        # CPU seconds by stage; "read_parse" (reading, decompressing, JSON parsing,
        # extracting text and properties) is what the others leave of the unit's CPU.
        "cpu": _stage_cpu(
            time.process_time() - unit_cpu0,
            {"encode": encode_cpu, **writer.cpu},
            rest="read_parse",
        ),
        "bad": bad.reasons,  # for finalize: samples with their segment line numbers
        "bad_lines": sum(r["count"] for r in bad.reasons.values()),
        "bad_input": bad.bad_input(file),
    }


def _stage_cpu(total: float, parts: dict[str, float], *, rest: str) -> dict[str, float]:
    out = {k: round(v, 3) for k, v in parts.items()}
    out[rest] = round(max(total - sum(parts.values()), 0.0), 3)
    return out


# ---------------------------------------------------------------- phase 2: assemble


def _chunk_index(plan: units.Plan) -> tuple[list[dict[str, Any]], list[int]]:
    """Every chunk of every part in source order, with its global token and document
    start, plus the line offset of each part within its file."""
    chunks, line_base = [], []
    tok_pos = doc_pos = 0
    lines_seen: dict[int, int] = {}
    for unit in plan.phases[0]:
        st = units.unit_result(plan.out, unit["id"])
        if st is None:
            raise RuntimeError(f"{plan.out}: unit {unit['id']} has not finished")
        fi = st["file_index"]
        line_base.append(lines_seen.get(fi, 0))
        lines_seen[fi] = lines_seen.get(fi, 0) + st["lines"]
        for ci, c in enumerate(st["chunks"]):
            chunks.append(
                {
                    "part": len(line_base) - 1,
                    "unit": unit["id"],
                    "chunk": ci,
                    "tok0": tok_pos,
                    "doc0": doc_pos,
                    **c,
                }
            )
            tok_pos += c["tokens"]
            doc_pos += c["documents"]
    return chunks, line_base


def _run_index(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    """Read every tokenize unit's stats once and write the chunk index the assemble units
    share (so each of them reads one file, not one marker per unit)."""
    chunks, line_base = _chunk_index(plan)
    path = Path(plan.out) / PARTS_DIR / INDEX_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps({"chunks": chunks, "line_base": line_base}))
    return {"kind": "index", "chunks": len(chunks)}


def _reads(plan: units.Plan, unit: dict[str, Any]) -> list[str]:
    """The files of the output a unit reads (on object storage it fetches exactly these and
    lists nothing): a tokenize unit none, the index unit the markers of the tokenize units,
    an assemble unit the chunk index and the chunks its shards take documents from."""
    if unit.get("index"):
        return [units.marker_key(u["id"]) for u in plan.phases[0]]
    if "part" not in unit:
        return []
    index_key = f"{PARTS_DIR}/{INDEX_NAME}"
    index = json.loads(storage.open_store(plan.out).read_bytes(index_key))
    per_shard = max(plan.params["shard_size"] // np.dtype(plan.meta["dtype"]).itemsize, 1)
    stems = dict.fromkeys(
        f"{PARTS_DIR}/{c['unit']}/c{c['chunk']:05d}"
        for _, over in owned_shards(index["chunks"], per_shard, unit["part"])
        for c in over
    )
    return [index_key] + [f"{s}{ext}" for s in stems for ext in (".len.npy", ".bin", CHUNK_DOCS)]


def _finalize_reads(plan: units.Plan, stats: list[dict[str, Any]]) -> list[str]:
    """Finalize reads the units' stats only."""
    return []


def _run_unit(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    if "part" in unit:
        return run_assemble(plan, unit)
    if unit.get("index"):
        return _run_index(plan, unit)
    return _run_tokenize(plan, unit)


# ---------------------------------------------------------------- finalize


def _finalize(plan: units.Plan, stats: list[dict[str, Any]]) -> dict[str, Any]:
    files = plan.meta["files"]
    tok_stats = [s for s in stats if s["kind"] == "tokenize"]
    asm_stats = [s for s in stats if s["kind"] == "assemble"]
    per_file: list[dict[str, Any]] = [
        {
            "file": f["url"],
            "size": f["size"],
            "fingerprint": f["fingerprint"],
            "documents": 0,
            "tokens": 0,
            "lines": 0,
            "blank_lines": 0,
        }
        for f in files
    ]
    bad_input: dict[str, dict[str, Any]] = {}
    for st in tok_stats:
        pf = per_file[st["file_index"]]
        base = pf["lines"]
        for key in ("documents", "tokens", "lines", "blank_lines"):
            pf[key] += st[key]
        for reason, r in st["bad"].items():
            samples = [
                {
                    "file": pf["file"],
                    "line": s["line"] + base if s["line"] is not None else None,
                    "message": s["message"],
                    "excerpt": s["excerpt"],
                }
                for s in r["samples"]
            ]
            units.add_bad_input(bad_input, pf["file"], reason, r["count"], samples)
    shards = sorted((sh for s in asm_stats for sh in s["shards"]), key=lambda sh: sh["index"])
    file_entries = sorted((fe for sh in shards for fe in sh["files"]), key=lambda fe: fe["path"])
    tok = plan.meta["tokenizer"]
    # The engine never changes the ids, so it is not part of the fingerprint.
    skip = ("strict", "unit_bytes", "inputs", "engine")
    params = {k: v for k, v in plan.params.items() if k not in skip}
    fp_params = {**params, "tokenizer": tok["fingerprint"], "dtype": plan.meta["dtype"]}
    parents = [f["fingerprint"] for f in files]
    totals = {
        "documents": sum(s["documents"] for s in tok_stats),
        "tokens": sum(s["tokens"] for s in tok_stats),
        "bytes": sum(s["text_bytes"] for s in tok_stats),
        "bad_documents": sum(r["count"] for f in bad_input.values() for r in f.values()),
    }
    manifest = {
        "kind": KIND,
        "fingerprint": fingerprint(KIND, parents=parents, params=fp_params),
        "parents": parents,
        "params": plan.params,
        "tokenizer": tok,
        "dtype": plan.meta["dtype"],
        "totals": totals,
        "inputs": per_file,
        "files": file_entries,
        "shards": [{k: v for k, v in sh.items() if k != "files"} for sh in shards],
        "bad_input": bad_input,
        "engine": {
            "requested": plan.params.get("engine", DEFAULT_ENGINE),
            "used": sorted({s.get("engine", "reference") for s in tok_stats}),
            "reference_documents": sum(s.get("reference_documents", 0) for s in tok_stats),
        },
    }
    write_manifest(plan.out, manifest)
    shutil.rmtree(Path(plan.out) / PARTS_DIR, ignore_errors=True)
    return manifest


units.register_stage(
    STAGE,
    run_unit=_run_unit,
    finalize=_finalize,
    reads=_reads,
    finalize_reads=_finalize_reads,
    scratch=(f"{PARTS_DIR}/",),
)

"""Flagged reads: at which training sample, and so at which step, a run first read
some documents.

The order is exact (a trainer reading Shardyard's order: the Megatron index cache, the
exact OLMo-core export, ``shardcore.loader``, a materialized copy), so the books can say
what a run actually read when, not only which pools it could have read:

1. ``flagged_records``: the records of a pool that hold any token of the given pool
   documents (rows of the pool's documents table), as sorted indices (8 bytes a
   flagged record, nothing per record of the pool), from the segment arrays of the
   shards holding them only (on object storage, those files alone, each checked);
2. ``first_sample``: the first training sample of a mixture whose (pool, record) is such
   a record, from the per-chunk counts or scanning the schedule in chunks (bounded
   memory; on object storage by checked ranges, never a copy of the schedule);
   (``flagged_samples``: how many samples of a range read one, for a run that read only
   that range of the mixture before or after switching version);
3. ``step_of_sample``: the step that read sample k, from the run's progress reports (step,
   consumed samples): the first report past k bounds it, and when the samples per step are
   constant between the two reports around k, the step is exact.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from shardcore import manifest as mf
from shardcore import storage
from shardcore.errors import InputError
from shardcore.mixture import POOL_FILE, RECORD_FILE
from shardcore.mixture.chunked import npy_offset
from shardcore.mixture.reader import IndexSet, Mixture, flagged_indices, sorted_distinct
from shardcore.pack import Segments, load_segments

_CHUNK = 1 << 22


def flagged_records(pool_path: str | os.PathLike, doc_rows: np.ndarray) -> np.ndarray:
    """The records of the pool (sorted indices) that hold any token of the documents
    ``doc_rows`` (pool document indices, i.e. rows of the documents table). Reads the
    manifest and the segment arrays of the shards holding one of the rows; a pool on
    object storage is read the same way, each file checked against the manifest."""

    manifest = mf.read_manifest(pool_path, kind="pool")
    rows = sorted_distinct(doc_rows)
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    cumulative = manifest["cumulative_records"]
    # Only the shards that hold one of the rows are read (found in the table's columns).
    firsts = np.asarray(mf.shard_column(manifest, "first_document"), dtype=np.int64)
    counts = np.asarray(mf.shard_column(manifest, "documents"), dtype=np.int64)
    holder = np.searchsorted(firsts, rows, side="right") - 1
    inside = (holder >= 0) & (rows < firsts[np.maximum(holder, 0)] + counts[np.maximum(holder, 0)])
    found = []
    wanted = IndexSet(rows)
    files = mf.files_by_path(manifest) if storage.is_remote(pool_path) else None
    for k in np.unique(holder[inside]).tolist():
        first = int(firsts[k])
        seg = _segments(pool_path, files, f"{mf.shard_prefix(manifest, k)}.segments.npz")
        doc = seg.seg_doc.astype(np.int64)
        hit = (doc >= 0) & wanted(doc + first)
        if not hit.any():
            continue
        record = np.repeat(np.arange(seg.num_records), np.diff(seg.seg_record_offsets))
        found.append(int(cumulative[k]) + np.unique(record[hit]))
    return np.concatenate(found).astype(np.int64) if found else np.zeros(0, dtype=np.int64)


def _segments(pool_path: str | os.PathLike, files: Mapping | None, rel: str) -> Segments:
    """One shard's segment arrays: a local pool's file, or a remote pool's object (``files``:
    its manifest's entries by path) read whole and checked against its entry (a changed
    object is an error naming it)."""
    if files is None:
        return load_segments(os.path.join(pool_path, rel))
    entry = files.get(rel)
    if entry is None:
        raise InputError(f"{pool_path}: its manifest lists no {rel}")
    return load_segments(io.BytesIO(storage.read_checked(str(pool_path), entry)))


def first_sample(
    mixture_dir: str | os.PathLike, records: Mapping[int, np.ndarray], *, start: int = 0
) -> int | None:
    """The first training sample (from ``start``) whose record is flagged, ``records``
    mapping a pool's index in the mixture manifest to its flagged records (sorted indices,
    or a per-record mask: ``flagged_indices``); None if no
    sample of the mixture reads one. A schedule with per-chunk counts read in blend order
    answers without a scan (``Mixture.first_read``); else the schedule is scanned."""
    found = Mixture(mixture_dir, ranged=True).first_read(records, start=start)
    if found is not NotImplemented:
        return found
    for hits in _flagged_chunks(mixture_dir, records, start, None):
        if hits.size:
            return int(hits[0])
    return None


def flagged_samples(
    mixture_dir: str | os.PathLike,
    records: Mapping[int, np.ndarray],
    *,
    start: int = 0,
    stop: int | None = None,
) -> tuple[int, int | None]:
    """How many training samples in [``start``, ``stop``) read a flagged record, and the
    first of them (None if none): a run that read only that range of the mixture (before
    it switched version, or after) read exactly these."""
    count, first = 0, None
    for found in _flagged_chunks(mixture_dir, records, start, stop):
        if found.size and first is None:
            first = int(found[0])
        count += int(found.size)
    return count, first


def _flagged_chunks(
    mixture_dir: str | os.PathLike,
    records: Mapping[int, np.ndarray],
    start: int,
    stop: int | None,
) -> Iterator[np.ndarray]:
    """The schedule in [``start``, ``stop``) (None: its end) read ``_CHUNK`` samples at a
    time: per chunk, the samples (indices in the schedule) whose record is flagged. Nothing
    when no record is."""

    flagged = {int(p): IndexSet(flagged_indices(m)) for p, m in records.items()}
    flagged = {p: ids for p, ids in flagged.items() if ids.ids.size}
    if not flagged:
        return
    read = _schedule_reader(mixture_dir)
    stop = read.total if stop is None else min(int(stop), read.total)
    for a in range(int(start), stop, _CHUNK):
        b = min(a + _CHUNK, stop)
        p, r = read(a, b)
        hit = np.zeros(p.size, dtype=bool)
        for i, ids in flagged.items():
            sel = p == i
            if sel.any():
                hit[sel] = ids(r[sel])
        yield a + np.flatnonzero(hit)


class _schedule_reader:
    """Samples [a, b) of a schedule's two columns: a local mixture's read from its files
    (not memory-mapped: the pass holds one chunk, whatever the length), a remote one's by
    checked ranges (``Mixture(ranged=True)``)."""

    def __init__(self, mixture_dir: str | os.PathLike):
        self.remote = storage.is_remote(mixture_dir)
        if self.remote:
            mix = Mixture(mixture_dir, ranged=True)
            self.pools, self.records = mix.pool_index, mix.record_index
            self.total = mix.num_samples
            return
        self.pool_path = os.path.join(mixture_dir, POOL_FILE)
        self.record_path = os.path.join(mixture_dir, RECORD_FILE)
        self.pool_at, self.pool_dtype, self.total = npy_offset(self.pool_path)
        self.record_at, self.record_dtype, _ = npy_offset(self.record_path)

    def __call__(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        if self.remote:
            return np.asarray(self.pools[a:b]), np.asarray(self.records[a:b])
        at = self.pool_at + a * self.pool_dtype.itemsize
        p = np.fromfile(self.pool_path, self.pool_dtype, b - a, offset=at)
        at = self.record_at + a * self.record_dtype.itemsize
        return p, np.fromfile(self.record_path, self.record_dtype, b - a, offset=at)


def step_of_sample(sample: int, reports: Iterable[tuple[int, int]]) -> dict[str, Any]:
    """When a run read training sample ``sample`` (0-based), from its progress reports
    ``(step, consumed_samples)``: ``{"read": True, "step", "exact", "after_step",
    "by_step"}`` or, if no report has consumed it yet, ``{"read": False,
    "consumed_samples", "step"}`` (the run's current position)."""
    points = sorted({(int(s), int(c)) for s, c in reports})
    prev_step, prev_consumed = 0, 0
    for step, consumed in points:
        if consumed > sample:
            steps, samples = step - prev_step, consumed - prev_consumed
            exact = steps > 0 and samples % steps == 0
            out = {"read": True, "after_step": prev_step, "by_step": step, "exact": exact}
            out["step"] = (
                prev_step + (sample - prev_consumed) // (samples // steps) + 1 if exact else step
            )
            return out
        prev_step, prev_consumed = step, consumed
    return {"read": False, "consumed_samples": prev_consumed, "step": prev_step}

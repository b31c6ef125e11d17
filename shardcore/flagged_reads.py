"""Flagged reads: at which training sample, and so at which step, a run first read
some documents.

The order is exact (a trainer reading Shardyard's order: the Megatron index cache, the
exact OLMo-core export, ``shardcore.loader``, a materialized copy), so the books can say
what a run actually read when, not only which pools it could have read:

1. ``flagged_records``: the records of a pool that hold any token of the given pool
   documents (rows of the pool's ``documents.parquet``), from the per-record segment
   arrays, vectorized per shard;
2. ``first_sample``: the first training sample of a mixture whose (pool, record) is such
   a record, scanning the schedule's memory-mapped arrays in chunks (bounded memory);
   (``flagged_samples``: how many samples of a range read one, for a run that read only
   that range of the mixture before or after switching version);
3. ``step_of_sample``: the step that read sample k, from the run's progress reports (step,
   consumed samples): the first report past k bounds it, and when the samples per step are
   constant between the two reports around k, the step is exact.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from shardcore import artifact_cache
from shardcore import manifest as mf
from shardcore.errors import InputError
from shardcore.mixture import POOL_FILE, RECORD_FILE
from shardcore.mixture.chunked import npy_offset
from shardcore.mixture.reader import Mixture
from shardcore.pack import load_segments

_CHUNK = 1 << 22


def flagged_records(pool_path: str | os.PathLike, doc_rows: np.ndarray) -> np.ndarray:
    """Per record of the pool, whether it holds any token of the documents ``doc_rows``
    (pool document indices, i.e. rows of ``documents.parquet``). A pool on object storage
    is read from a checked local copy."""

    pool_path = artifact_cache.local_artifact(pool_path)
    manifest = mf.read_manifest(pool_path)
    if manifest.get("kind") != "pool":
        raise InputError(f"{pool_path}: not a pool (kind {manifest.get('kind')!r})")
    out = np.zeros(int(manifest["num_records"]), dtype=bool)
    rows = np.unique(np.asarray(doc_rows, dtype=np.int64))
    if rows.size == 0:
        return out
    cumulative = manifest["cumulative_records"]
    # Only the shards that hold one of the rows are read (found in the table's columns).
    firsts = np.asarray(mf.shard_column(manifest, "first_document"), dtype=np.int64)
    counts = np.asarray(mf.shard_column(manifest, "documents"), dtype=np.int64)
    holder = np.searchsorted(firsts, rows, side="right") - 1
    inside = (holder >= 0) & (rows < firsts[np.maximum(holder, 0)] + counts[np.maximum(holder, 0)])
    for k in np.unique(holder[inside]).tolist():
        first = int(firsts[k])
        prefix = mf.shard_prefix(manifest, k)
        seg = load_segments(os.path.join(pool_path, f"{prefix}.segments.npz"))
        doc = seg.seg_doc.astype(np.int64)
        hit = (doc >= 0) & np.isin(doc + first, rows)
        if not hit.any():
            continue
        record = np.repeat(np.arange(seg.num_records), np.diff(seg.seg_record_offsets))
        out[int(cumulative[k]) + np.unique(record[hit])] = True
    return out


def first_sample(
    mixture_dir: str | os.PathLike, records: Mapping[int, np.ndarray], *, start: int = 0
) -> int | None:
    """The first training sample (from ``start``) whose record is flagged, ``records``
    mapping a pool's index in the mixture manifest to its per-record mask; None if no
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

    mixture_dir = artifact_cache.local_artifact(mixture_dir)  # a checked local copy of a remote one
    # Read chunk by chunk (not memory-mapped): the pass holds one chunk, whatever the length.
    pool_path = os.path.join(mixture_dir, POOL_FILE)
    record_path = os.path.join(mixture_dir, RECORD_FILE)
    pool_at, pool_dtype, total = npy_offset(pool_path)
    record_at, record_dtype, _ = npy_offset(record_path)
    stop = total if stop is None else min(int(stop), total)
    masks = {int(p): np.asarray(m, dtype=bool) for p, m in records.items() if np.any(m)}
    if not masks:
        return
    for a in range(int(start), stop, _CHUNK):
        b = min(a + _CHUNK, stop)
        p = np.fromfile(pool_path, pool_dtype, b - a, offset=pool_at + a * pool_dtype.itemsize)
        r = np.fromfile(
            record_path, record_dtype, b - a, offset=record_at + a * record_dtype.itemsize
        )
        hit = np.zeros(p.size, dtype=bool)
        for i, mask in masks.items():
            sel = p == i
            if sel.any():
                hit[sel] = mask[r[sel]]
        yield a + np.flatnonzero(hit)


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

"""Writing a schedule in chunks of samples, in memory bounded by the chunk.

1. ``write_pool_column`` (one unit): the blend of every stage, run range by range over
   the chunk grid, each range continuing from the counts the previous one left (the
   blend's whole state, so the result is the single-pass schedule byte for byte); it
   writes the pool column and, per pool, its samples before each chunk boundary
   (``COUNTS_FILE``). With a non-blend ordering the blend's column goes to
   ``ordered.BLEND_FILE`` and the units below write the ordered one.
2. ``write_records`` (units over contiguous ranges of chunks): for each sample of a chunk,
   its pool's read number (what the run read of the pool before, plus its samples before
   the chunk from the counts, plus its rank among the chunk's samples of that pool), and
   the record that read number takes (``shardcore.mixture.permute``: computed, not
   stored); with a non-blend ordering, each window of the chunk is then ordered
   (``shardcore.mixture.ordered``). Rewriting a range writes the same bytes, so a unit can
   be rerun.

The arrays are written with positioned writes (never memory-mapped for writing), so a
unit's resident memory is its chunk's arrays, whatever the length of the schedule.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shardcore import atomic, blend
from shardcore.errors import InputError
from shardcore.mixture import ordered, permute
from shardcore.mixture.layout import (
    CHUNK_SAMPLES,
    COUNTS_FILE,
    POOL_FILE,
    RECORD_FILE,
    SAMPLE_BYTES,
    SCHEDULE_DIR,
)
from shardcore.mixture.plan import (
    PoolInfo,
    _check_repetitions,
    _continued_epochs,
    _stage_weights,
    plan_epochs,
)
from shardcore.mixture.spec import MixtureSpec
from shardcore.npy_rows import read_header


def stage_fact(
    name: str, start: int, n: int, seq_len: int, weights: np.ndarray, counts: np.ndarray
) -> dict[str, Any]:
    """A stage's entry in the mixture manifest: where it starts and how long it is, in
    samples and in tokens, its pools' weights and how many samples each pool gives it."""
    return {
        "name": name,
        "first_sample": start,
        "num_samples": n,
        "first_token": start * seq_len,
        "num_tokens": n * seq_len,
        "weights": weights.tolist(),
        "samples_per_pool": counts.tolist(),
    }


def npy_create(path: Path, dtype: npt.DTypeLike, n: int) -> int:
    """An .npy file of ``n`` values (the header ``np.save`` writes, then a sparse body);
    returns the body's byte offset."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f,
            {
                "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                "fortran_order": False,
                "shape": (int(n),),
            },
        )
        offset = f.tell()
        f.truncate(offset + int(n) * np.dtype(dtype).itemsize)
    return offset


def npy_offset(path: str | os.PathLike) -> tuple[int, np.dtype, int]:
    """The body offset, dtype and length of a 1-d .npy file."""
    with open(path, "rb") as f:
        shape, _, dtype = read_header(f)
        return f.tell(), dtype, int(shape[0])


def npy_read(path: Path, a: int, b: int) -> np.ndarray:
    """Values [a, b) of a 1-d .npy file, read (not mapped)."""
    offset, dtype, _ = npy_offset(path)
    return np.fromfile(path, dtype=dtype, count=b - a, offset=offset + a * dtype.itemsize)


def _pwrite(fd: int, offset: int, arr: np.ndarray) -> None:
    view = np.ascontiguousarray(arr).data.cast("B")
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _check_disk(out: Path, samples: int, pools: int, *, ordered: bool = False) -> None:
    # An ordered build keeps the blend's pool column (2 bytes a sample) until it ends.
    need = samples * (SAMPLE_BYTES + 2 * ordered) + (samples // CHUNK_SAMPLES + 2) * pools * 8
    free = shutil.disk_usage(out).free
    if need > free:
        raise InputError(
            f"{out}: the schedule of {samples:,} samples takes {need / 2**30:,.1f} GiB on "
            f"disk ({SAMPLE_BYTES} bytes per sample); {free / 2**30:,.1f} GiB are free there"
        )


def write_pool_column(
    spec: MixtureSpec,
    pools: list[PoolInfo],
    out: Path,
    *,
    chunk_samples: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    create_records: bool = True,
) -> dict[str, Any]:
    """Phase 1 of a build (see the module): the pool column (the blend's: for a non-blend
    ordering in ``ordered.BLEND_FILE``) and ``COUNTS_FILE`` in ``out``, and
    (``create_records``) the files the record units write, sized and still empty.
    Returns the build's facts for the manifest."""
    chunk = int(chunk_samples or CHUNK_SAMPLES)
    if chunk < 1:
        raise InputError(f"chunk_samples: must be positive, got {chunk}")
    plan_epochs(spec, pools)  # fail fast on repetitions and tiny budgets, before any work
    stages = _stage_weights(spec, pools)
    total = sum(n for _, n, _ in stages)
    (out / SCHEDULE_DIR).mkdir(parents=True, exist_ok=True)
    _check_disk(out, total, len(pools), ordered=spec.order != "blend")
    num_chunks = -(-total // chunk)
    seq_len = int(pools[0].manifest["seq_len"])
    read, _, _ = _continued_epochs(spec, pools)
    counts = np.zeros((num_chunks + 1, len(pools)), dtype=np.int64)
    cum = np.zeros(len(pools), dtype=np.int64)
    buf_d = np.empty(min(chunk, total), dtype=np.int16)
    buf_s = np.empty(min(chunk, total), dtype=np.int64)
    facts = []
    blend_column = POOL_FILE if spec.order == "blend" else ordered.BLEND_FILE
    with atomic.atomic_path(out / blend_column) as tmp:
        offset = npy_create(Path(tmp), np.int16, total)
        fd = os.open(tmp, os.O_WRONLY)
        try:
            start = 0
            for name, n, w in stages:
                used = np.flatnonzero(w > 0)
                wn = blend.normalize(w[used])
                local = np.zeros(used.size, dtype=np.int64)  # the blend's state in the stage
                done = 0
                while done < n:
                    g = start + done
                    stop = min(start + n, (g // chunk + 1) * chunk)
                    d, s = buf_d[: stop - g], buf_s[: stop - g]
                    blend.blend_range(wn, done, local, (d, s))
                    here = used[d].astype(np.int16)
                    _pwrite(fd, offset + 2 * g, here)
                    cum += np.bincount(here, minlength=len(pools))
                    done += stop - g
                    if stop % chunk == 0:
                        counts[stop // chunk] = cum
                    if progress is not None:
                        progress(name, done, n)
                got = np.zeros(len(pools), dtype=np.int64)
                got[used] = local
                zero = np.flatnonzero((w > 0) & (got == 0))
                if zero.size:
                    raise InputError(
                        f"tokens: budget too small: pool {pools[int(zero[0])].key!r} gets no "
                        f"sample in stage {name!r}"
                    )
                facts.append(stage_fact(name, start, n, seq_len, w, got))
                start += n
            os.fsync(fd)
        finally:
            os.close(fd)
    counts[-1] = cum
    _check_repetitions(spec, pools, cum + read, read)
    _save_counts(out, counts)
    if create_records:
        for rel, dtype in _unit_files(spec):
            with atomic.atomic_path(out / rel) as tmp:
                npy_create(Path(tmp), dtype, total)
    return {
        "samples": int(total),
        "tokens": int(total) * seq_len,
        "pool_samples": [int(c) for c in cum],
        "stages": facts,
        "chunk_samples": int(chunk),
    }


def _unit_files(spec: MixtureSpec) -> list[tuple[str, type]]:
    """The columns the record units write: the records, and for a non-blend ordering the
    ordered pool column too."""
    files: list[tuple[str, type]] = [(RECORD_FILE, np.int64)]
    if spec.order != "blend":
        files.append((POOL_FILE, np.int16))
    return files


def _save_counts(out: Path, counts: np.ndarray) -> None:
    with atomic.atomic_open(out / COUNTS_FILE) as f:
        np.save(f, counts)


def chunk_records(
    pool_col: np.ndarray,
    base: np.ndarray,
    pools: list[PoolInfo],
    keys: list[list[int]],
    algorithms: list[str],
) -> np.ndarray:
    """The record column of one chunk: ``base`` per pool is its read number at the
    chunk's first sample; a sample's read number adds its rank among the chunk's samples
    of its pool."""
    order = np.argsort(pool_col, kind="stable")  # int16: a radix sort
    bounds = np.searchsorted(pool_col[order], np.arange(len(pools) + 1))
    out = np.empty(pool_col.size, dtype=np.int64)
    for i, p in enumerate(pools):
        a, b = int(bounds[i]), int(bounds[i + 1])
        if a == b:
            continue
        consumed = int(base[i]) + np.arange(b - a, dtype=np.int64)
        seed, key = keys[i]
        out[order[a:b]] = permute.records_for(seed, key, p.num_records, consumed, algorithms[i])
    return out


def write_records(
    spec: MixtureSpec, pools: list[PoolInfo], out: Path, chunk: int, unit: int, units: int
) -> dict[str, Any]:
    """Phase 2 of a build (see the module): the record column (and for a non-blend
    ordering the ordered pool column) over the ``unit``-th of ``units`` contiguous ranges of
    chunks (creating the files when one unit writes it all)."""
    counts = np.load(out / COUNTS_FILE)
    num_chunks = counts.shape[0] - 1
    source = out / (POOL_FILE if spec.order == "blend" else ordered.BLEND_FILE)
    _, _, total = npy_offset(source)
    targets = []
    for rel, dtype in _unit_files(spec):
        path = out / rel
        if not path.exists() or path.stat().st_size < total * np.dtype(dtype).itemsize:
            if units != 1:
                raise InputError(f"{path}: missing; the blend unit creates it first")
            npy_create(path, dtype, total)
        targets.append((path, npy_offset(path)[0]))
    read, keys, algorithms = _continued_epochs(spec, pools)
    order = ordered.WindowOrder(spec, pools, chunk) if spec.order != "blend" else None
    lo, hi = num_chunks * unit // units, num_chunks * (unit + 1) // units
    fds = [os.open(path, os.O_WRONLY) for path, _ in targets]
    try:
        for c in range(lo, hi):
            a, b = c * chunk, min(total, (c + 1) * chunk)
            col = npy_read(source, a, b)
            rec = chunk_records(col, read + counts[c], pools, keys, algorithms)
            if order is not None:
                order.apply(col, rec, a)
            for (_, offset), fd, arr in zip(targets, fds, (rec, col), strict=False):
                _pwrite(fd, offset + arr.itemsize * a, arr)
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    return {"chunks": [lo, hi]}


def remove_blend_column(out: Path) -> None:
    """Once the manifest is written, the blend's column an ordered build kept is not needed."""
    (out / ordered.BLEND_FILE).unlink(missing_ok=True)

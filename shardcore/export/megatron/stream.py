"""The Megatron export's per-sample work in chunks of samples, in memory bounded by a chunk
and the number of shard prefixes, whatever the number of samples.

``SampleSource`` gives, per sample of a mixture (or a materialized mixture), its shard
prefix (an index into every shard of its pools) and its sequence in that prefix, a range of
samples at a time. ``write_indices`` writes megatron-core's index arrays for a stage from
it, with positioned writes into files laid out as ``np.save`` lays them out (the same
bytes ``shardcore.export.megatron.gpt_indices`` and the blend arrays give): one pass counts
each prefix's samples (so every file is sized first), a second writes the blend's
(dataset index, dataset-sample index) rows and appends each prefix's records to its
document index; the padding rows (repeats that training never reads) are then written
from what is already on disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shardcore import atomic
from shardcore import manifest as mf
from shardcore.mixture import KIND as MIXTURE
from shardcore.mixture import POOL_FILE, RECORD_FILE, Mixture
from shardcore.mixture.chunked import npy_read

CHUNK = 1 << 22  # samples per pass step
BLOCK = 1 << 22  # rows per write of the generated (sample, shuffle) indices


def shard_prefixes(
    root: str | os.PathLike, manifest: Mapping[str, Any]
) -> tuple[list[str], np.ndarray]:
    prefixes = [os.path.abspath(os.path.join(root, s["prefix"])) for s in manifest["shards"]]
    records = np.array([int(s["records"]) for s in manifest["shards"]], dtype=np.int64)
    return prefixes, np.concatenate([[0], np.cumsum(records)])


class SampleSource:
    """Per sample: (prefix index, sequence in that prefix), computed range by range."""

    def __init__(self, path: str | os.PathLike, manifest: Mapping[str, Any]):
        mf.check_kind(manifest, (MIXTURE, "materialized"), path)
        self.prefixes: list[str] = []
        if manifest.get("kind") == "materialized":
            self.prefixes, cum = shard_prefixes(path, manifest)
            self.cums, self.offsets, self.mix = [cum], [0], None
            self.num_samples = int(cum[-1])
            return
        self.mix = Mixture(path)
        self.num_samples = self.mix.num_samples
        self.cums, self.offsets = [], []
        for pool in self.mix.pools:
            pool_prefixes, cum = shard_prefixes(pool["path"], mf.read_manifest(pool["path"]))
            self.offsets.append(len(self.prefixes))
            self.cums.append(cum)
            self.prefixes.extend(pool_prefixes)

    def chunk(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Samples [a, b): prefix index (int32) and sequence in that prefix (int64)."""
        if self.mix is None:
            i = np.arange(a, b, dtype=np.int64)
            shard = np.searchsorted(self.cums[0], i, side="right") - 1
            return shard.astype(np.int32), i - self.cums[0][shard]
        # Read, not mapped: mapped pages of the schedule would stay in the resident set.
        pidx = npy_read(Path(self.mix.path) / POOL_FILE, a, b)  # (a local copy)
        rec = npy_read(Path(self.mix.path) / RECORD_FILE, a, b).astype(np.int64, copy=False)
        d = np.empty(b - a, dtype=np.int32)
        local = np.empty(b - a, dtype=np.int64)
        for p in np.unique(pidx).tolist():
            sel = np.flatnonzero(pidx == p)
            shard = np.searchsorted(self.cums[p], rec[sel], side="right") - 1
            d[sel] = self.offsets[p] + shard
            local[sel] = rec[sel] - self.cums[p][shard]
        return d, local

    def ranges(self, a: int, b: int, chunk: int = CHUNK) -> Iterator[tuple[int, int]]:
        for s in range(a, b, chunk):
            yield s, min(b, s + chunk)


def stage_counts(
    source: SampleSource, bounds: Sequence[int], chunk: int = CHUNK
) -> list[np.ndarray]:
    """Per prefix, its samples in [bounds[k], bounds[k + 1]) for each k: one pass."""
    out = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        counts = np.zeros(len(source.prefixes), dtype=np.int64)
        for s, e in source.ranges(a, b, chunk):
            counts += np.bincount(source.chunk(s, e)[0], minlength=len(source.prefixes))
        out.append(counts)
    return out


# --------------------------------------------------------------------------- .npy files


class NpyFile:
    """An .npy file of a fixed shape written by ranges of rows (the header ``np.save``
    writes, then the body), under a temporary name until ``commit``."""

    def __init__(self, path: Path, dtype: Any, shape: tuple[int, ...]):
        self.path, self.dtype, self.shape = Path(path), np.dtype(dtype), shape
        self.tmp = atomic.temp_path(self.path)
        self.row = int(np.prod(shape[1:], dtype=np.int64)) * self.dtype.itemsize
        with open(self.tmp, "wb") as f:
            np.lib.format.write_array_header_1_0(
                f,
                {
                    "descr": np.lib.format.dtype_to_descr(self.dtype),
                    "fortran_order": False,
                    "shape": shape,
                },
            )
            self.offset = f.tell()
            f.truncate(self.offset + self.row * int(shape[0]))
        # No descriptor kept open: a stage may list tens of thousands of prefixes.

    def write(self, first_row: int, rows: np.ndarray) -> None:
        view = np.ascontiguousarray(rows, dtype=self.dtype).data.cast("B")
        at, done = self.offset + first_row * self.row, 0
        fd = os.open(self.tmp, os.O_WRONLY)
        try:
            while done < len(view):
                done += os.pwrite(fd, view[done:], at + done)
        finally:
            os.close(fd)

    def read(self, first_row: int, n: int) -> np.ndarray:
        fd = os.open(self.tmp, os.O_RDONLY)
        try:
            data = os.pread(fd, n * self.row, self.offset + first_row * self.row)
        finally:
            os.close(fd)
        return np.frombuffer(data, dtype=self.dtype).reshape((n, *self.shape[1:]))

    def commit(self) -> None:
        fd = os.open(self.tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        self.tmp.unlink(missing_ok=True)


def _cyclic_tail(f: NpyFile, have: int, total: int) -> None:
    """Rows [have, total) of ``f`` repeat rows [0, have) cyclically (``np.resize``)."""
    j = have
    while j < total:
        n = min(have, total - j, BLOCK)
        src = j % have
        n = min(n, have - src)
        f.write(j, f.read(src, n))
        j += n


def _gpt_files(cache: Path, base: str, n: int, seq_len: int) -> dict[str, NpyFile]:
    """The three GPTDataset index files of a prefix holding n document-index entries, as
    ``export_megatron.gpt_indices`` shapes them; the sample and shuffle indices written."""
    wide = max(2 * n, seq_len + 1) > np.iinfo(np.int32).max
    total = 2 * n - 1
    sdtype = np.int64 if total >= np.iinfo(np.uint32).max - 1 else np.uint32
    files = {
        "document_index": NpyFile(cache / f"{base}-document_index.npy", np.int32, (n,)),
        "sample_index": NpyFile(
            cache / f"{base}-sample_index.npy", np.int64 if wide else np.int32, (2 * n, 2)
        ),
        "shuffle_index": NpyFile(cache / f"{base}-shuffle_index.npy", sdtype, (total,)),
    }
    for a in range(0, n, BLOCK):
        b = min(n, a + BLOCK)
        k = np.arange(a, b, dtype=np.int64)
        rows = np.empty((2 * (b - a), 2), dtype=np.int64)
        rows[0::2, 0], rows[0::2, 1] = k, 0
        rows[1::2, 0], rows[1::2, 1] = k, seq_len
        files["sample_index"].write(2 * a, rows)
        files["shuffle_index"].write(a, k * 2)
        if b <= n - 1:
            files["shuffle_index"].write(n + a, k * 2)
        elif a < n - 1:
            files["shuffle_index"].write(n + a, k[: n - 1 - a] * 2)
    return files


def write_indices(
    cache: Path,
    bases: Sequence[str],
    blend_base: str | None,
    blend_size: int,
    num_samples: Sequence[int],
    source: SampleSource,
    used: np.ndarray,
    total: int,
    seq_len: int,
    chunk: int = CHUNK,
) -> None:
    """The index arrays for samples [0, ``total``) of ``source``, whose prefixes ``used``
    (global indices, in data-args order) are keyed ``bases[k]`` (GPTDataset, asked for
    ``num_samples[k]`` samples) and the blend ``blend_base`` (``blend_size`` rows; None:
    one prefix, no BlendedDataset). Files appear under their names when complete."""
    remap = np.full(len(source.prefixes), -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    counts = np.zeros(used.size, dtype=np.int64)
    for a, b in source.ranges(0, total, chunk):
        counts += np.bincount(remap[source.chunk(a, b)[0]], minlength=used.size)
    sizes = [
        max(int(c), -(-(int(s) + 1) // 2), 1) for c, s in zip(counts, num_samples, strict=True)
    ]
    opened: list[NpyFile] = []
    try:
        blend = None
        if blend_base is not None:
            blend = {
                "dataset_index": NpyFile(
                    cache / f"{blend_base}-dataset_index.npy", np.int16, (blend_size,)
                ),
                "dataset_sample_index": NpyFile(
                    cache / f"{blend_base}-dataset_sample_index.npy", np.int64, (blend_size,)
                ),
            }
            opened += blend.values()
        docs = []
        for k in range(used.size):
            files = _gpt_files(cache, bases[k], sizes[k], seq_len)
            opened += files.values()
            docs.append(files)
        running = np.zeros(used.size, dtype=np.int64)
        for a, b in source.ranges(0, total, chunk):
            d, local = source.chunk(a, b)
            d = remap[d]
            order = np.argsort(d, kind="stable")
            sorted_d = d[order]
            edges = np.searchsorted(sorted_d, np.arange(used.size + 1))
            rank = np.empty(b - a, dtype=np.int64)
            for k in np.flatnonzero(np.diff(edges)).tolist():
                lo, hi = int(edges[k]), int(edges[k + 1])
                rows = order[lo:hi]
                rank[rows] = running[k] + np.arange(hi - lo)
                docs[k]["document_index"].write(int(running[k]), local[rows].astype(np.int32))
                running[k] += hi - lo
            if blend is not None:
                blend["dataset_index"].write(a, d.astype(np.int16))
                blend["dataset_sample_index"].write(a, rank)
        for k in range(used.size):
            if counts[k] == 0:  # listed for the key only: any record serves as padding
                docs[k]["document_index"].write(0, np.zeros(sizes[k], dtype=np.int32))
            else:
                _cyclic_tail(docs[k]["document_index"], int(counts[k]), sizes[k])
        if blend is not None:
            for f in blend.values():  # past train_samples: never read
                _cyclic_tail(f, total, blend_size)
    except BaseException:
        for f in opened:
            f.discard()
        raise
    for f in opened:
        f.commit()

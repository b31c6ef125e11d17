"""Reading a built mixture, and the continuation of a run that switches from it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import NotImplementedType
from typing import Any

import numpy as np

from shardcore import manifest as mf
from shardcore import storage
from shardcore.errors import InputError
from shardcore.mixture import permute
from shardcore.mixture.layout import COUNTS_FILE, KIND, POOL_FILE, RECORD_FILE
from shardcore.pool import PoolReader
from shardcore.storage import artifact_cache
from shardcore.storage import ranged as ranged_columns


def flagged_indices(records: Any) -> np.ndarray:
    """A pool's flagged records as sorted distinct int64 indices, given the indices (8 bytes
    a flagged record) or a per-record mask (a byte a record of the pool)."""
    a = np.asarray(records)
    if a.dtype == bool:
        return np.flatnonzero(a)
    return sorted_distinct(a)


def sorted_distinct(values: Any) -> np.ndarray:
    """``values`` as sorted distinct int64: nothing done when they already are, else a sort
    and the neighbours compared (numpy's ``unique`` hashes, several times slower on many
    millions of integers)."""
    a = np.asarray(values).astype(np.int64, copy=False).ravel()
    if a.size < 2 or bool(np.all(a[1:] > a[:-1])):
        return a
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))]


class IndexSet:
    """Sorted distinct indices, asked which of many values are among them: by a bit table
    over [0, largest] when that is no larger than the indices' own array (one in 64 or more
    present; a lookup is two array reads), else by binary search of the values in sorted
    order. Built once, asked batch after batch."""

    def __init__(self, indices: Any):
        self.ids = sorted_distinct(indices)
        self.top = int(self.ids[-1]) + 1 if self.ids.size else 0
        self.bits: np.ndarray | None = None
        if self.ids.size and self.ids[0] >= 0 and self.top <= 64 * self.ids.size:
            self.bits = np.zeros((self.top + 7) // 8, dtype=np.uint8)
            np.bitwise_or.at(self.bits, self.ids >> 3, (1 << (self.ids & 7)).astype(np.uint8))

    def __call__(self, values: Any) -> np.ndarray:
        """Per item of ``values``, whether it is one of the indices."""
        values = np.asarray(values).astype(np.int64, copy=False)
        if not self.ids.size:
            return np.zeros(values.shape, dtype=bool)
        if self.bits is not None:
            inside = (values >= 0) & (values < self.top)
            v = np.where(inside, values, 0)
            return inside & ((self.bits[v >> 3] >> (v & 7).astype(np.uint8)) & 1).astype(bool)
        flat = values.ravel()
        order = np.argsort(flat, kind="stable")
        ordered = flat[order]
        at = np.minimum(np.searchsorted(self.ids, ordered), self.ids.size - 1)
        out = np.empty(flat.shape, dtype=bool)
        out[order] = self.ids[at] == ordered
        return out.reshape(values.shape)


class Mixture:
    """A built mixture: ``sample(i) -> (pool index, record)`` by memmap, O(1)."""

    def __init__(self, path: str | os.PathLike, *, ranged: bool = False):
        """A mixture on object storage is read from a checked local copy of it, or, with
        ``ranged`` (for questions about a few samples: locate, resume, epochs, first
        reads), by checked ranges of its schedule (``shardcore.storage.ranged``): the
        per-chunk counts and the blocks that hold the samples asked for."""
        self.pool_index: Any
        self.record_index: Any
        self.path: Path | str
        if ranged and storage.is_remote(path):
            self.path = storage.resolve(path)
            self.manifest = mf.read_manifest(self.path, kind=KIND)
            files = mf.files_by_path(self.manifest)
            self.pool_index = ranged_columns.RangedColumn(self.path, files[POOL_FILE])
            self.record_index = ranged_columns.RangedColumn(self.path, files[RECORD_FILE])
            self.chunk_samples = self._chunk_samples()
            self.counts = (
                ranged_columns.load_checked(self.path, files[COUNTS_FILE])
                if self.chunk_samples
                else None
            )
            return
        self.path = Path(artifact_cache.local_artifact(path))
        self.manifest = mf.read_manifest(self.path, kind=KIND)
        self.pool_index = np.load(self.path / POOL_FILE, mmap_mode="r")
        self.record_index = np.load(self.path / RECORD_FILE, mmap_mode="r")
        self.chunk_samples = self._chunk_samples()
        self.counts = (
            np.load(self.path / COUNTS_FILE, mmap_mode="r") if self.chunk_samples else None
        )

    def _chunk_samples(self) -> int:
        """Format 2: the chunk of the per-pool counts before each chunk boundary (0: format
        1, no counts)."""
        return int((self.manifest.get("schedule") or {}).get("chunk_samples", 0))

    def reads_before(self, sample: int) -> np.ndarray:
        """Per pool, how many of samples [0, ``sample``) read it: the counts at the nearer
        chunk boundary and one pass over the samples between (at most half a chunk of the
        pool column; format 1: a pass over the whole prefix)."""
        sample = min(max(int(sample), 0), self.num_samples)
        if self.counts is None:
            base, start = np.zeros(len(self.pools), dtype=np.int64), 0
        else:
            c = sample // self.chunk_samples
            base, start = np.array(self.counts[c], dtype=np.int64), c * self.chunk_samples
            stop = min(start + self.chunk_samples, self.num_samples)
            if stop - sample < sample - start:  # nearer the next boundary: count back from it
                after = np.asarray(self.pool_index[sample:stop], dtype=np.int64)
                ahead = np.array(self.counts[c + 1], dtype=np.int64)
                return ahead - np.bincount(after, minlength=len(self.pools))
        part = np.asarray(self.pool_index[start:sample], dtype=np.int64)
        return base + np.bincount(part, minlength=len(self.pools))

    def sample_of_read(self, pool: int, j: int) -> int | None:
        """The sample that is pool ``pool``'s ``j``-th (0-based) in this schedule; None
        when it has fewer. The chunk holding it comes from the counts; one pass over it."""
        pool, j = int(pool), int(j)
        if j < 0:
            raise InputError(f"read {j}: must be >= 0")
        if self.counts is None:
            where = np.flatnonzero(np.asarray(self.pool_index) == pool)
            return int(where[j]) if j < where.size else None
        col = np.asarray(self.counts[:, pool])
        if j >= int(col[-1]):
            return None
        c = int(np.searchsorted(col, j, side="right")) - 1
        a = c * self.chunk_samples
        part = np.asarray(self.pool_index[a : min(a + self.chunk_samples, self.num_samples)])
        return a + int(np.flatnonzero(part == pool)[j - int(col[c])])

    @property
    def num_samples(self) -> int:
        return int(self.manifest["num_samples"])

    @property
    def seq_len(self) -> int:
        return int(self.manifest["seq_len"])

    @property
    def pools(self) -> list[dict[str, Any]]:
        return self.manifest["pools"]

    def __len__(self) -> int:
        return self.num_samples

    def sample(self, i: int) -> tuple[int, int]:
        i = int(i)
        if not 0 <= i < self.num_samples:
            raise IndexError(f"{self.path}: sample {i} out of range [0, {self.num_samples})")
        return int(self.pool_index[i]), int(self.record_index[i])

    def tokens(self, i: int) -> np.ndarray:
        """The seq_len + 1 tokens of sample i, read from its pool."""

        p, r = self.sample(i)
        return PoolReader(self.pools[p]["path"]).record(r)

    def epoch_starts(self, stop: int | None = None) -> list[dict[str, int]]:
        """Where a pool's epoch starts among samples [0, ``stop``): ``{"pool": index,
        "epoch": e, "sample": s}`` for each e >= 1 (counting, for a continued pool, the
        records the run read before), sample s being the first of the e-th pass over the
        pool's records. Each found from the per-chunk counts and one pass over its chunk
        (format 1: one pass over the int16 pool column)."""
        stop = self.num_samples if stop is None else min(int(stop), self.num_samples)
        if self.counts is None:
            return self._epoch_starts_scan(stop)
        out = []
        for i, p in enumerate(self.pools):
            n, before = int(p["num_records"]), int(p.get("first_read", 0))
            # The j-th sample of the pool here is its (before + j)-th read overall.
            for j in range((-before) % n, int(p["samples"]), n):
                if before + j == 0:
                    continue
                s = self.sample_of_read(i, j)
                if s is None or s >= stop:
                    break
                out.append({"pool": i, "epoch": (before + j) // n, "sample": s})
        return sorted(out, key=lambda e: (e["sample"], e["pool"]))

    def _epoch_starts_scan(self, stop: int) -> list[dict[str, int]]:
        """``epoch_starts`` of a format-1 schedule: one pass over the pool column."""
        pidx = np.asarray(self.pool_index[:stop])
        out = []
        for i, p in enumerate(self.pools):
            n, before = int(p["num_records"]), int(p.get("first_read", 0))
            where = np.flatnonzero(pidx == i)
            first = (-before) % n
            for j in range(first, where.size, n):
                if before + j > 0:
                    out.append({"pool": i, "epoch": (before + j) // n, "sample": int(where[j])})
        return sorted(out, key=lambda e: (e["sample"], e["pool"]))

    def first_read(
        self, records: Mapping[int, np.ndarray], *, start: int = 0
    ) -> int | None | NotImplementedType:
        """The first sample (from ``start``) reading a record flagged in ``records`` (pool
        index -> its flagged records, ``flagged_indices``), computed without scanning the schedule when it reads
        each pool in its read order (format 2, blend order): per pool, the flagged
        records' positions in each epoch it reads (the inverse permutation), the
        smallest read number at or after ``start``, its sample from the counts. None
        when no sample reads one; ``NotImplemented`` when the schedule must be scanned."""
        if self.counts is None or self.manifest.get("order") != "blend":
            return NotImplemented
        below = self.reads_before(start)
        best = None
        for i, given in records.items():
            flagged = flagged_indices(given)
            if flagged.size == 0:
                continue
            p = self.pools[int(i)]
            n, before = int(p["num_records"]), int(p.get("first_read", 0))
            lo, hi = before + int(below[int(i)]), before + int(p["samples"])  # read numbers
            if lo >= hi:
                continue
            seed, key = p.get("epoch_key", [int(self.manifest["spec"]["seed"]), int(i)])
            algorithm = p.get("permutation", permute.NUMPY)
            for e in range(lo // n, (hi - 1) // n + 1):
                t = e * n + permute.positions_of(seed, key, n, e, flagged, algorithm)
                t = t[(t >= lo) & (t < hi)]
                if t.size:
                    s = self.sample_of_read(int(i), int(t.min()) - before)
                    if s is not None:  # always: read t.min() is below the pool's reads
                        best = s if best is None else min(best, s)
                    break
        return best

    def labels(self, property: str) -> np.ndarray:
        """Per sample: ``"pool"`` its pool key, ``"stage"`` its stage name, else the
        property of its record's main document (``PoolReader.record_labels``)."""
        pidx = np.asarray(self.pool_index)
        if property == "pool":
            keys = np.array([p["key"] for p in self.pools], dtype=object)
            return keys[pidx].astype(str)
        if property == "stage":
            out = np.empty(self.num_samples, dtype=object)
            for st in self.manifest["stages"]:
                out[st["first_sample"] : st["first_sample"] + st["num_samples"]] = st["name"]
            return out.astype(str)

        rec = np.asarray(self.record_index)
        out = np.empty(self.num_samples, dtype=object)
        for i, p in enumerate(self.pools):
            sel = pidx == i
            out[sel] = PoolReader(p["path"]).record_labels(property)[rec[sel]]
        return out


def continuation(previous: str | os.PathLike, sample: int) -> dict[str, Any]:
    """The ``continues`` of a mixture that a run switches to after reading samples
    [0, ``sample``) of the mixture at ``previous``: per pool of it, how many of its records
    the run has read by then (what the previous schedule took before ``sample``, plus what
    it continued from), the key of its epoch permutations and their algorithm. The
    per-chunk counts and at most a chunk of the pool column (format 1: the prefix)."""
    prev = Mixture(previous, ranged=True)
    sample = int(sample)
    if not 0 <= sample <= prev.num_samples:
        raise InputError(
            f"continue at sample {sample}: {prev.path} has samples [0, {prev.num_samples}]"
        )
    counts = prev.reads_before(sample)
    out = []
    for i, p in enumerate(prev.pools):
        out.append(
            {
                "path": os.path.abspath(p["path"]),
                "read": int(p.get("first_read", 0)) + int(counts[i]),
                "epoch_key": list(p.get("epoch_key", [int(prev.manifest["spec"]["seed"]), i])),
                # A schedule built before the permutation was recorded used numpy's.
                "permutation": p.get("permutation", permute.NUMPY),
            }
        )
    return {"mixture": str(prev.manifest["fingerprint"]), "sample": sample, "pools": out}

"""Reading a built mixture, and the continuation of a run that switches from it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from shardcore import manifest as mf
from shardcore import storage
from shardcore.errors import InputError, ManifestError
from shardcore.mixture.layout import KIND, POOL_FILE, RECORD_FILE


class Mixture:
    """A built mixture: ``sample(i) -> (pool index, record)`` by memmap, O(1)."""

    def __init__(self, path: str | os.PathLike):
        # A mixture on object storage is read from a checked local copy.
        self.path = Path(storage.local_artifact(path))
        self.manifest = mf.read_manifest(self.path)
        if self.manifest.get("kind") != KIND:
            raise ManifestError(f"{self.path}: not a mixture (kind {self.manifest.get('kind')!r})")
        self.pool_index = np.load(self.path / POOL_FILE, mmap_mode="r")
        self.record_index = np.load(self.path / RECORD_FILE, mmap_mode="r")

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
        from shardcore.pool import PoolReader

        p, r = self.sample(i)
        return PoolReader(self.pools[p]["path"]).record(r)

    def epoch_starts(self, stop: int | None = None) -> list[dict[str, int]]:
        """Where a pool's epoch starts among samples [0, ``stop``): ``{"pool": index,
        "epoch": e, "sample": s}`` for each e >= 1 (counting, for a continued pool, the
        records the run read before), sample s being the first of the e-th pass over the
        pool's records. One pass over the int16 pool column."""
        stop = self.num_samples if stop is None else min(int(stop), self.num_samples)
        pidx = np.asarray(self.pool_index[:stop])
        out = []
        for i, p in enumerate(self.pools):
            n, before = int(p["num_records"]), int(p.get("first_read", 0))
            where = np.flatnonzero(pidx == i)
            # The j-th sample of the pool here is its (before + j)-th read overall.
            first = (-before) % n
            for j in range(first, where.size, n):
                if before + j > 0:
                    out.append({"pool": i, "epoch": (before + j) // n, "sample": int(where[j])})
        return sorted(out, key=lambda e: (e["sample"], e["pool"]))

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
        from shardcore.pool import PoolReader

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
    it continued from) and the key of its epoch permutations. One pass over the int16
    pool column of the schedule prefix."""
    prev = Mixture(previous)
    sample = int(sample)
    if not 0 <= sample <= prev.num_samples:
        raise InputError(
            f"continue at sample {sample}: {prev.path} has samples [0, {prev.num_samples}]"
        )
    counts = np.bincount(
        np.asarray(prev.pool_index[:sample], dtype=np.int64), minlength=len(prev.pools)
    )
    out = []
    for i, p in enumerate(prev.pools):
        out.append(
            {
                "path": os.path.abspath(p["path"]),
                "read": int(p.get("first_read", 0)) + int(counts[i]),
                "epoch_key": list(p.get("epoch_key", [int(prev.manifest["spec"]["seed"]), i])),
            }
        )
    return {"mixture": str(prev.manifest["fingerprint"]), "sample": sample, "pools": out}

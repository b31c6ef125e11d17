"""Random access to the samples of any artifact in training: ``Samples`` gives sample i of a
pool, a mixture or a materialized mixture as its seq_len + 1 tokens (np.memmap views of a
pool or materialized mixture's records; a mixture's schedule names the (pool, record)),
``Segments`` the samples of a run that switched mixture version (``shardcore.loader``
explains segments), ``PoolReader`` the pool-only reader with batch iteration."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardcore import manifest as mf
from shardcore import storage
from shardcore.errors import InputError
from shardcore.formats import IndexedReader
from shardcore.mixture import Mixture
from shardcore.pool import Pool
from shardcore.storage import artifact_cache, shard_cache

KINDS = ("pool", "materialized", "mixture")


def _integer(name: str, value: Any, *, minimum: int = 0) -> int:
    """``value`` as an int >= ``minimum``, or an InputError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InputError(f"{name}: {value!r} is not an integer")
    if value < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


class _Records:
    """Fixed-width records of a pool or a materialized mixture, numbered across shards."""

    def __init__(self, path: str | os.PathLike, manifest: dict[str, Any] | None = None):
        self.path = os.fspath(path)
        self.manifest = manifest if manifest is not None else mf.read_manifest(path)
        self.cumulative = np.asarray(self.manifest["cumulative_records"], dtype=np.int64)
        self.width = int(self.manifest["seq_len"]) + 1
        self._rows: dict[int, np.ndarray] = {}
        # The shard read last, as (first record, end, rows): reads in order skip the search.
        self._last: tuple[int, int, np.ndarray] = (0, 0, np.zeros((0, self.width)))

    def __len__(self) -> int:
        return int(self.cumulative[-1])

    def shard_rows(self, shard: int) -> np.ndarray:
        """Shard ``shard``'s records as a (records, seq_len + 1) array over its memory map
        (a plain ndarray view: indexing a np.memmap costs several times more)."""
        if shard not in self._rows:
            prefix = self.manifest["shards"][shard]["prefix"]
            tokens = IndexedReader(os.path.join(self.path, prefix)).tokens
            count = int(self.cumulative[shard + 1] - self.cumulative[shard])
            if tokens.size != count * self.width:
                raise InputError(
                    f"{self.path}/{prefix}: {tokens.size} tokens, the manifest says {count} "
                    f"records of {self.width}"
                )
            self._rows[shard] = np.ndarray(
                (count, self.width), dtype=tokens.dtype, buffer=tokens, offset=0
            )
        return self._rows[shard]

    def locate(self, i: int) -> tuple[int, int, np.ndarray]:
        """(first record, end, rows) of the shard holding record i."""
        first, end, rows = self._last
        if first <= i < end:
            return self._last
        if not 0 <= i < len(self):
            raise IndexError(f"{self.path}: record {i} out of range [0, {len(self)})")
        shard = int(np.searchsorted(self.cumulative, i, side="right")) - 1
        first, end = int(self.cumulative[shard]), int(self.cumulative[shard + 1])
        self._last = (first, end, self.shard_rows(shard))
        return self._last

    def __getitem__(self, i: int) -> np.ndarray:
        first, end, rows = self._last
        if first <= i < end:
            return rows[i - first]
        first, _, rows = self.locate(i)
        return rows[i - first]

    def gather(self, indices: list[int], out: np.ndarray) -> None:
        """Records ``indices`` into the rows of ``out`` (converting the dtype): one copy
        when they are evenly spaced in one shard (a rank's batch in the artifact's order),
        else row by row."""
        a, b, n = indices[0], indices[-1], len(indices)
        step = (b - a) // (n - 1) if n > 1 else 1
        first, end, rows = self.locate(a)
        even = n < 3 or all(y - x == step for x, y in zip(indices, indices[1:], strict=False))
        if step > 0 and b < end and a + step * (n - 1) == b and even:
            out[:] = rows[a - first : b - first + 1 : step]
            return
        for r, i in enumerate(indices):
            out[r] = self[i]


class Samples:
    """Sample i (seq_len + 1 tokens) of a pool, a materialized mixture or a mixture, local
    or on object storage (``s3://``: shards are read through a bounded local cache, see
    ``shardcore.storage.shard_cache``; ``cache_dir``, ``cache_limit`` and ``prefetch`` set it)."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
        prefetch: int | None = None,
    ):
        self.path = os.fspath(path)
        self.remote = storage.is_remote(self.path)
        self._cache_args = {
            "cache_dir": cache_dir,
            "cache_limit": cache_limit,
            "prefetch": prefetch,
        }
        self.manifest = mf.read_manifest(path, kind=KINDS)
        self.kind = self.manifest["kind"]
        self.fingerprint = str(self.manifest["fingerprint"])
        self.seq_len = int(self.manifest["seq_len"])
        self.cache: shard_cache.ShardCache | None = None
        self._open()

    def _records(
        self, path: str, manifest: dict[str, Any] | None = None
    ) -> _Records | shard_cache.RemoteRecords:
        if not storage.is_remote(path):
            return _Records(path, manifest)
        if self.cache is None:
            directory, limit, depth = shard_cache.cache_settings(**self._cache_args)  # type: ignore[arg-type]
            self.cache = shard_cache.ShardCache(directory / "shards", limit, depth)
        return shard_cache.RemoteRecords(path, self.cache, manifest)

    def _open(self) -> None:
        if self.kind == "mixture":
            local = self.path
            if self.remote:
                # The schedule (about 9 bytes a sample) is copied whole, beside the shards,
                # and stays in use (never evicted) while this object lives.
                directory, _, _ = shard_cache.cache_settings(**self._cache_args)  # type: ignore[arg-type]
                self._schedule = artifact_cache.artifact_copy(
                    self.path, cache_dir=directory / "artifacts"
                )
                local = self._schedule.path
            self._mixture = Mixture(local)
            self._pools: dict[int, Any] = {}
            self.num_samples = self._mixture.num_samples
        else:
            self._records_ = self._records(self.path, self.manifest)
            self.num_samples = len(self._records_)

    def __getstate__(self) -> dict[str, Any]:
        # Memory maps are reopened in each DataLoader worker, not pickled.
        return {"path": self.path, "cache": self._cache_args}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], **state.get("cache", {}))  # type: ignore[misc]

    def __len__(self) -> int:
        return self.num_samples

    def _pool(self, p: int) -> _Records | shard_cache.RemoteRecords:
        if p not in self._pools:
            self._pools[p] = self._records(self._mixture.pools[p]["path"])
        return self._pools[p]

    def __getitem__(self, i: int) -> np.ndarray:
        i = int(i)
        if self.kind != "mixture":
            return self._records_[i]
        p, r = self._mixture.sample(i)
        return self._pool(p)[r]

    def gather(self, indices: list[int], out: np.ndarray) -> None:
        """Samples ``indices`` into the rows of ``out``."""
        if self.kind != "mixture" and isinstance(self._records_, _Records):
            self._records_.gather(indices, out)
            return
        for r, i in enumerate(indices):
            out[r] = self[i]

    def shard_of(self, i: int) -> tuple[Any, int]:
        """(records, shard) holding sample i."""
        if self.kind != "mixture":
            records, r = self._records_, int(i)
        else:
            p, r = self._mixture.sample(int(i))
            records = self._pool(p)
        return records, int(np.searchsorted(records.cumulative, r, side="right")) - 1

    def prefetch(self, indices: Iterator[int]) -> None:
        """Queue the remote shards of the samples ``indices`` (in reading order) for
        download: the first ``prefetch`` shards not open yet."""
        if self.cache is None and not (self.remote or self.kind == "mixture"):
            return
        seen = []
        for i in indices:
            records, shard = self.shard_of(i)
            if not isinstance(records, shard_cache.RemoteRecords):
                continue
            key = (id(records), shard)
            if key in seen:
                continue
            seen.append(key)
            records.prefetch(shard)
            if self.cache is None or len(seen) > self.cache.prefetch_depth:
                return


class Segments:
    """A run's samples across the mixture versions it switched between: segment j is the
    version at ``path`` read from the run's sample ``first_sample`` (its own sample 0) up to
    the next segment's first sample; the last is read to its end. Checked when opened:
    segments start at 0 and in order, none is longer than its version, all share a
    seq_len, and a version built to continue another (``continues`` in its manifest)
    follows that mixture at the sample it continues from."""

    kind = "run"
    # Each version reads its own remote shards through its cache; no prefetch across them.
    cache = None
    remote = False

    def __init__(self, segments: list[Any], **cache: Any):
        self.segments = [_segment(s, i) for i, s in enumerate(segments)]
        if not self.segments:
            raise InputError("segments: give at least one (path, first_sample)")
        self.path = self.segments[-1]["path"]
        self._cache_args = cache
        self._parts = [Samples(s["path"], **cache) for s in self.segments]
        self.firsts = [s["first_sample"] for s in self.segments]
        if self.firsts[0] != 0:
            raise InputError(f"segments[0].first_sample: the run starts at 0, not {self.firsts[0]}")
        for j in range(1, len(self.segments)):
            prev, part = self._parts[j - 1], self._parts[j]
            length = self.firsts[j] - self.firsts[j - 1]
            if length <= 0:
                raise InputError(
                    f"segments[{j}].first_sample: {self.firsts[j]} does not follow "
                    f"segments[{j - 1}]'s {self.firsts[j - 1]}"
                )
            if length > len(prev):
                raise InputError(
                    f"segments[{j}].first_sample: segment {j - 1} would read {length} samples "
                    f"of {prev.path}, which has {len(prev)}"
                )
            if part.seq_len != prev.seq_len:
                raise InputError(
                    f"segments[{j}]: seq_len {part.seq_len} differs from {prev.seq_len}"
                )
            cont = part.manifest.get("continues")
            if cont is not None and (
                cont.get("mixture") != prev.fingerprint or int(cont.get("sample", -1)) != length
            ):
                raise InputError(
                    f"segments[{j}]: {part.path} continues mixture {cont.get('mixture')} at its "
                    f"sample {cont.get('sample')}, but follows {prev.fingerprint} after "
                    f"{length} samples"
                )
        self.seq_len = self._parts[0].seq_len
        self.num_samples = self.firsts[-1] + len(self._parts[-1])
        self.keys = [
            {"fingerprint": part.fingerprint, "first_sample": first}
            for part, first in zip(self._parts, self.firsts, strict=True)
        ]
        self.fingerprint = mf.fingerprint("run", parents=[], params={"segments": self.keys})

    def __getstate__(self) -> dict[str, Any]:
        return {"segments": self.segments, "cache": self._cache_args}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["segments"], **state.get("cache", {}))  # type: ignore[misc]

    def __len__(self) -> int:
        return self.num_samples

    def locate(self, k: int) -> tuple[int, int]:
        """(segment, the version's own sample) of the run's sample k."""
        j = int(np.searchsorted(self.firsts, int(k), side="right")) - 1
        return j, int(k) - self.firsts[j]

    def __getitem__(self, k: int) -> np.ndarray:
        if not 0 <= int(k) < self.num_samples:
            raise IndexError(f"run sample {k} out of range [0, {self.num_samples})")
        j, i = self.locate(k)
        return self._parts[j][i]


def _segment(s: Any, i: int) -> dict[str, Any]:
    if isinstance(s, dict):
        if "path" not in s or "first_sample" not in s:
            raise InputError(f"segments[{i}]: needs path and first_sample")
        path, first = s["path"], s["first_sample"]
    else:
        try:
            path, first = s
        except (TypeError, ValueError):
            raise InputError(f"segments[{i}]: give (path, first_sample)") from None
    if isinstance(first, bool) or not isinstance(first, int | np.integer):
        raise InputError(f"segments[{i}].first_sample: {first!r} is not an integer")
    return {"path": os.fspath(path), "first_sample": int(first)}


def open_samples(path: Any, **cache: Any) -> Samples | Segments:
    """``Samples`` of an artifact path, or ``Segments`` of a run's list of segments
    (``cache``: ``Samples``' cache settings, for remote artifacts)."""
    if isinstance(path, list | tuple):
        return Segments(list(path), **cache)
    return Samples(path, **cache)


def _keys(source: Samples | Segments) -> list[dict[str, Any]]:
    if isinstance(source, Segments):
        return source.keys
    return [{"fingerprint": source.fingerprint, "first_sample": 0}]


class PoolReader:
    """Sequential and random access to the records of a pool."""

    def __init__(self, path: str | os.PathLike):
        self.pool = Pool(path)
        self.seq_len = self.pool.seq_len
        self.num_records = self.pool.num_records

    def __len__(self) -> int:
        return self.num_records

    def __getitem__(self, i: int) -> np.ndarray:
        return self.pool.record(int(i))

    def read(self, start: int, stop: int) -> np.ndarray:
        """Records [start, stop): shape (stop - start, seq_len + 1)."""
        return self.pool.records(start, stop)

    def iter_batches(self, batch_size: int, *, start: int = 0) -> Iterator[np.ndarray]:
        """Consecutive batches of ``batch_size`` records from ``start`` (the last may be
        shorter): views into the shards where a batch does not cross a shard."""
        batch_size = _integer("batch_size", batch_size, minimum=1)
        start = _integer("start", start)
        for first in range(start, self.num_records, batch_size):
            yield self.pool.records(first, min(first + batch_size, self.num_records))

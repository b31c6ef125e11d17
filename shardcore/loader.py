"""Read Shardyard artifacts in training: random access to samples, and one torch streaming
loader for every artifact kind (a pool, a mixture, a materialized mixture).

``Samples`` gives sample i of any artifact as its seq_len + 1 tokens: record i of a pool or
of a materialized mixture (np.memmap views, no copy), or the (pool, record) the mixture's
schedule names for sample i. ``PoolReader`` (``shardcore.pool``'s, importable from here too) is
the pool-only reader with batch iteration.

``ShardyardIterableDataset`` streams samples in a deterministic order that resumes exactly:

* the global stream is samples k = start_sample, start_sample + 1, ... up to
  ``num_samples`` (default: one epoch, every sample of the artifact once); sample k is
  sample ``order_e[k % N]`` of the artifact in epoch e = k // N, where ``order_e`` is the
  artifact's own order (a pool's shuffled records, a mixture's schedule), or with a
  ``seed`` a permutation seeded by (seed, epoch);
* data-parallel rank r of ``world_size`` takes k = start + r, start + r + world_size, ...;
* within a rank, DataLoader workers take the rank's samples in blocks of ``batch_size``
  round-robin (block t to worker t % workers), which is the order in which a DataLoader
  with that ``batch_size`` and W workers returns them: the loader's output on a rank is
  the rank's samples in order, whatever W.

All ranks consume in lockstep, so the position is one number: after each rank consumed c
samples, the next unseen sample is ``start_sample + c * world_size``. Resuming there with
another world size or worker count continues the same global stream.

Consumption is tracked, not assumed (as mosaicml-streaming's StreamingDataLoader does):
``ShardyardLoader`` (a ``torch.utils.data.DataLoader``) counts the samples of every batch
it hands out in the main process and writes the count into its dataset, so
``loader.state_dict()`` and ``dataset.state_dict()`` are the position after the last batch
the training loop received, with or without workers. Read through a plain DataLoader with
``num_workers=0``, the dataset counts what it yielded itself (the same thing). Read through
a plain DataLoader with workers, the main process cannot know what was consumed: then
``state_dict()`` without ``consumed=`` raises instead of returning the start (a silent
replay). torch is imported only when the torch classes are first used.

A run that switches mixture version mid-training reads *segments*: ``[{"path",
"first_sample"}, ...]`` (what the server's run answers as ``segments``), version j giving
the run's samples [first_j, first_{j+1}), its own sample 0 at first_j (a version built to
continue the previous one at that sample, ``shardcore.mixture.continuation``). Give the
list in place of a path. The state then records every segment (fingerprint and first
sample) with the position; a state saved before a switch loads into the dataset that
knows the switch when its position is at or before the switch (it read nothing of the old
version past it), and ``switch(path, at_sample)`` adds a segment to a running loader,
taking effect at its next iteration. Sample k of the stream is the same whether the run
was read straight through or resumed on either side of a switch.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardcore import manifest as mf
from shardcore import storage, streaming
from shardcore.errors import InputError
from shardcore.formats import IndexedReader

STATE_VERSION = 2
_LOOKAHEAD = 4096  # stream samples scanned for the next shards to prefetch
KINDS = ("pool", "materialized", "mixture")


class _Records:
    """Fixed-width records of a pool or a materialized mixture, numbered across shards."""

    def __init__(self, path: str | os.PathLike, manifest: dict[str, Any] | None = None):
        self.path = os.fspath(path)
        self.manifest = manifest if manifest is not None else mf.read_manifest(path)
        self.cumulative = np.asarray(self.manifest["cumulative_records"], dtype=np.int64)
        self.width = int(self.manifest["seq_len"]) + 1
        self._readers: dict[int, IndexedReader] = {}

    def __len__(self) -> int:
        return int(self.cumulative[-1])

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < len(self):
            raise IndexError(f"{self.path}: record {i} out of range [0, {len(self)})")
        shard = int(np.searchsorted(self.cumulative, i, side="right")) - 1
        if shard not in self._readers:
            prefix = self.manifest["shards"][shard]["prefix"]
            self._readers[shard] = IndexedReader(os.path.join(self.path, prefix))
        r = i - int(self.cumulative[shard])
        return self._readers[shard].tokens[r * self.width : (r + 1) * self.width]


class Samples:
    """Sample i (seq_len + 1 tokens) of a pool, a materialized mixture or a mixture, local
    or on object storage (``s3://``: shards are read through a bounded local cache, see
    ``shardcore.streaming``; ``cache_dir``, ``cache_limit`` and ``prefetch`` set it)."""

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
        self.manifest = mf.read_manifest(path)
        self.kind = self.manifest.get("kind")
        if self.kind not in KINDS:
            raise InputError(
                f"{self.path}: a {self.kind!r} artifact has no training samples; "
                f"give a pool, a mixture or a materialized mixture"
            )
        self.fingerprint = str(self.manifest["fingerprint"])
        self.seq_len = int(self.manifest["seq_len"])
        self.cache: streaming.ShardCache | None = None
        self._open()

    def _records(self, path: str, manifest: dict[str, Any] | None = None):
        if not storage.is_remote(path):
            return _Records(path, manifest)
        if self.cache is None:
            directory, limit, depth = streaming.cache_settings(**self._cache_args)
            self.cache = streaming.ShardCache(directory / "shards", limit, depth)
        return streaming.RemoteRecords(path, self.cache, manifest)

    def _open(self) -> None:
        if self.kind == "mixture":
            from shardcore.mixture import Mixture

            local = self.path
            if self.remote:
                # The schedule (about 9 bytes a sample) is copied whole, beside the shards,
                # and stays in use (never evicted) while this object lives.
                directory, _, _ = streaming.cache_settings(**self._cache_args)
                self._schedule = storage.artifact_copy(self.path, cache_dir=directory / "artifacts")
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
        self.__init__(state["path"], **state.get("cache", {}))

    def __len__(self) -> int:
        return self.num_samples

    def _pool(self, p: int):
        if p not in self._pools:
            self._pools[p] = self._records(self._mixture.pools[p]["path"])
        return self._pools[p]

    def __getitem__(self, i: int) -> np.ndarray:
        i = int(i)
        if self.kind != "mixture":
            return self._records_[i]
        p, r = self._mixture.sample(i)
        return self._pool(p)[r]

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
            if not isinstance(records, streaming.RemoteRecords):
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
        self.__init__(state["segments"], **state.get("cache", {}))

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
        from shardcore.pool import Pool

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
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        for first in range(start, self.num_records, batch_size):
            yield self.pool.records(first, min(first + batch_size, self.num_records))


def sample_order(num_records: int, seed: int | None, epoch: int) -> np.ndarray | None:
    """The samples of one epoch in stream order (None: the artifact's own order)."""
    if seed is None:
        return None
    return np.random.default_rng([int(seed), int(epoch)]).permutation(num_records)


class _Stream:
    """The deterministic sample stream shared by every rank and worker (pure, no torch)."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        rank: int = 0,
        world_size: int = 1,
        seed: int | None = None,
        start_sample: int = 0,
        num_samples: int | None = None,
        batch_size: int = 1,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
        prefetch: int | None = None,
    ):
        if world_size < 1 or not 0 <= rank < world_size:
            raise InputError(f"rank {rank} is outside world_size {world_size}")
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        self.source = open_samples(
            path, cache_dir=cache_dir, cache_limit=cache_limit, prefetch=prefetch
        )
        self.path = self.source.path
        if seed is not None and isinstance(self.source, Segments):
            raise InputError(
                "seed: a run's segments are read in their own order (a permutation would mix "
                "versions across the switch)"
            )
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.batch_size = batch_size
        n = len(self.source)
        self._whole = num_samples is None  # one pass over whatever the source holds
        self.num_samples = n if num_samples is None else int(num_samples)
        if n == 0 and self.num_samples:
            raise InputError(f"{self.path}: the {self.source.kind} has no samples")
        if start_sample < 0:
            raise InputError(f"start_sample must be >= 0, got {start_sample}")
        self.start_sample = int(start_sample)
        self.consumed = 0  # samples of this rank the training loop received
        self._tracked = False  # ``consumed`` is set by a ShardyardLoader
        # Set by any DataLoader worker that iterates this dataset: the main process then
        # does not see what was consumed. A shared byte survives the pickling to workers.
        self._in_workers = multiprocessing.get_context().RawValue("b", 0)
        self._orders: dict[int, np.ndarray | None] = {}

    def samples(
        self, worker: int = 0, workers: int = 1, *, after: int | None = None
    ) -> Iterator[int]:
        """Global sample indices of this rank and worker, in order (those after stream
        sample ``after`` when given)."""
        k = self.start_sample + self.rank
        j = 0
        if after is not None and after >= k:
            j = (after - k) // self.world_size + 1
            k += j * self.world_size
        while k < self.num_samples:
            if (j // self.batch_size) % workers == worker:
                yield k
            k += self.world_size
            j += 1

    def read(self, worker: int = 0, workers: int = 1) -> Iterator[tuple[int, np.ndarray]]:
        """(stream sample, tokens) of this rank and worker, in order. Reading a sample from
        another shard than the last queues the next shards in reading order for
        prefetching (remote artifacts only)."""
        last = None
        for k in self.samples(worker, workers):
            i = self.index_of(k)
            tokens = self.source[i]  # opens the shard first: the prefetch looks past it
            if self.source.cache is not None:
                where = self.source.shard_of(i)
                if where != last:
                    last = where
                    ahead = itertools.islice(self.samples(worker, workers, after=k), _LOOKAHEAD)
                    self.source.prefetch(self.index_of(a) for a in ahead)
            yield k, tokens

    def index_of(self, k: int) -> int:
        """The artifact's sample read as stream sample k."""
        n = len(self.source)
        epoch, i = divmod(k, n)
        if epoch not in self._orders:
            self._orders = {epoch: sample_order(n, self.seed, epoch)}
        order = self._orders[epoch]
        return i if order is None else int(order[i])

    # Kept for callers of the pool-only loader.
    record_of = index_of

    def tokens(self, k: int) -> np.ndarray:
        return self.source[self.index_of(k)]

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """The position after this rank consumed ``consumed`` samples; by default the
        samples the training loop received (see the module docstring)."""
        if consumed is None:
            if self._in_workers.value and not self._tracked:
                raise InputError(
                    "loader state: this dataset was read by DataLoader workers, so the main "
                    "process does not know what was consumed; read it through "
                    "shardcore.loader.ShardyardLoader (tracks consumption) or pass "
                    "state_dict(consumed=samples this rank received)"
                )
            consumed = self.consumed
        if int(consumed) < 0:
            raise InputError(f"consumed must be >= 0, got {consumed}")
        state = {
            "version": STATE_VERSION,
            "next_sample": self.start_sample + int(consumed) * self.world_size,
            "seed": self.seed,
            "num_samples": self.num_samples,
            "kind": self.source.kind,
            "fingerprint": self.source.fingerprint,
        }
        if isinstance(self.source, Segments):
            state["segments"] = [dict(k) for k in self.source.keys]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at ``state``'s next sample, with this object's rank and world size."""
        if state.get("version") not in (1, STATE_VERSION):
            raise InputError(
                f"loader state version {state.get('version')!r} is not {STATE_VERSION}"
            )
        theirs = state.get("fingerprint", state.get("pool"))
        if int(state["next_sample"]) < 0:
            raise InputError(f"loader state: next_sample {state['next_sample']} is negative")
        mine = _keys(self.source)
        read = state.get("segments") or [{"fingerprint": theirs, "first_sample": 0}]
        if len(read) > len(mine) or any(
            (a["fingerprint"], int(a["first_sample"])) != (b["fingerprint"], b["first_sample"])
            for a, b in zip(read, mine, strict=False)
        ):
            raise InputError(
                f"loader state is for {state.get('kind', 'pool')} {theirs}, "
                f"this is {self.source.kind} {self.source.fingerprint}"
            )
        switched = len(mine) > len(read)
        if switched and int(state["next_sample"]) > mine[len(read)]["first_sample"]:
            raise InputError(
                f"loader state: it read up to sample {state['next_sample']} of "
                f"{read[-1]['fingerprint']}, past the switch to {mine[len(read)]['fingerprint']} "
                f"at sample {mine[len(read)]['first_sample']}; resume from a checkpoint at or "
                "before the switch"
            )
        self.start_sample = int(state["next_sample"])
        self.seed = state.get("seed")
        if not (switched and self._whole):
            # A state saved before a switch describes the shorter run: keep this length.
            self.num_samples = int(state.get("num_samples", self.num_samples))
        self.consumed = 0

    def switch(self, path: str | os.PathLike, at_sample: int | None = None) -> None:
        """From the run's sample ``at_sample`` (default: the position now, after what the
        training loop received) read the version at ``path`` instead, from its sample 0 (a
        version built to continue this one there). Takes effect at the loader's next
        iteration: break out at a checkpoint, switch, iterate again."""
        position = self.state_dict()["next_sample"]
        at = position if at_sample is None else int(at_sample)
        if at < position:
            raise InputError(
                f"switch at sample {at}: this loader has read up to sample {position}; "
                f"resume from a checkpoint at or before sample {at}, then switch"
            )
        if isinstance(self.source, Segments):
            segments = [s for s in self.source.segments if s["first_sample"] < at]
        else:
            segments = [{"path": self.source.path, "first_sample": 0}]
        self.source = Segments(
            [*segments, {"path": os.fspath(path), "first_sample": at}],
            **self.source._cache_args,
        )
        self.path = self.source.path
        if self._whole:
            self.num_samples = len(self.source)
        self.start_sample, self.consumed = position, 0
        self._orders = {}


def resume_state(path: str | os.PathLike, next_sample: int) -> dict[str, Any]:
    """The loader state that resumes the artifact at ``path`` (or a run's segments) at
    global sample ``next_sample`` in its own order (e.g. a run's consumed samples, as the
    server reports them), for ``ShardyardIterableDataset.load_state_dict``."""
    source = open_samples(path)
    if int(next_sample) < 0:
        raise InputError(f"next_sample must be >= 0, got {next_sample}")
    state = {
        "version": STATE_VERSION,
        "next_sample": int(next_sample),
        "seed": None,
        "num_samples": len(source),
        "kind": source.kind,
        "fingerprint": source.fingerprint,
    }
    if isinstance(source, Segments):
        state["segments"] = [dict(k) for k in source.keys]
    return state


def _make_classes():
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    class ShardyardIterableDataset(IterableDataset, _Stream):
        """Samples of a pool, mixture or materialized mixture for one data-parallel rank,
        as dicts ``{"tokens": LongTensor of seq_len + 1, "sample": global stream index}``.
        Give the DataLoader the same ``batch_size`` (``ShardyardLoader`` does it). See the
        module docstring for the order."""

        def __init__(self, path: str | os.PathLike | list, **kwargs: Any):
            IterableDataset.__init__(self)
            _Stream.__init__(self, path, **kwargs)

        def __iter__(self) -> Iterator[dict[str, Any]]:
            info = get_worker_info()
            worker, workers = (info.id, info.num_workers) if info else (0, 1)
            if info is not None:
                self._in_workers.value = 1
            elif not self._tracked:
                self.consumed = 0  # a new pass starts again at start_sample
            for k, row in self.read(worker, workers):
                tokens = np.asarray(row, dtype=np.int64)
                if info is None and not self._tracked:
                    self.consumed += 1
                yield {"tokens": torch.from_numpy(tokens), "sample": k}

    class ShardyardLoader(DataLoader):
        """A ``DataLoader`` over a ``ShardyardIterableDataset`` that counts the samples
        of each batch it returns, so that ``state_dict()`` is the position after the last
        batch the training loop received, with any number of workers."""

        def __init__(self, dataset: ShardyardIterableDataset, batch_size: int = 1, **kwargs):
            if not isinstance(dataset, _Stream):
                raise InputError("ShardyardLoader reads a ShardyardIterableDataset")
            dataset.batch_size = int(batch_size)
            dataset._tracked = True
            super().__init__(dataset, batch_size=batch_size, **kwargs)

        def __iter__(self):
            ds = self.dataset
            ds.consumed = 0  # a new pass starts again at the dataset's start_sample
            for batch in super().__iter__():
                ds.consumed += len(batch["sample"])
                yield batch

        def state_dict(self) -> dict[str, Any]:
            return self.dataset.state_dict()

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.dataset.load_state_dict(state)

    return {
        "ShardyardIterableDataset": ShardyardIterableDataset,
        "PoolIterableDataset": ShardyardIterableDataset,
        "ShardyardLoader": ShardyardLoader,
    }


def __getattr__(name: str):
    if name in ("ShardyardIterableDataset", "PoolIterableDataset", "ShardyardLoader"):
        globals().update(_make_classes())
        return globals()[name]
    if name == "PoolReader":  # lives with the pool; imported on first use
        from shardcore.pool import PoolReader

        return PoolReader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

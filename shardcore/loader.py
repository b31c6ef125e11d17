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
  not given, rank and world size are torch.distributed's when it is initialized, else the
  RANK and WORLD_SIZE environment variables (torchrun's), else 0 of 1; given ones that
  disagree with those are refused (``check_rank=False`` when data-parallel ranks are not
  process ranks, as under tensor or pipeline parallelism);
* within a rank, DataLoader workers take the rank's samples in blocks of ``batch_size``
  round-robin (block t to worker t % workers), which is the order in which a DataLoader
  with that ``batch_size`` and W workers returns them (it asks worker t % W for batch t):
  the loader's output on a rank is the rank's samples in order, whatever W.
  ``ShardyardLoader`` makes the blocks runs of several batches (about 1 MiB, one transfer
  from a worker) and hands them out one batch at a time, in the same order.

All ranks consume in lockstep, so the position is one number: after each rank consumed c
samples, the next unseen sample is ``start_sample + c * world_size``. Resuming there with
another world size or worker count continues the same global stream.

Consumption is tracked, not assumed (as mosaicml-streaming's StreamingDataLoader does):
``ShardyardLoader`` (a ``torch.utils.data.DataLoader``) counts the samples of every batch
it hands out in the main process and writes the count into its dataset, so
``loader.state_dict()`` and ``dataset.state_dict()`` are the position after the last batch
the training loop received, with or without workers. Read through a plain DataLoader with
``num_workers=0``, the dataset counts what it yielded itself (the same thing). Read through
a plain DataLoader with workers, the main process cannot see what was consumed, and a count
would not say which samples: a worker returns whole batches, so a DataLoader whose
``batch_size`` is not the dataset's returns the samples out of stream order (with 2 workers
and batches of 8 over blocks of 1: samples 0-15, then 16, 18, ..., 30), and no single
position is exact. So DataLoader workers refuse a dataset made without ``batch_size``; the
state is taken from the last batch the loop received, ``state_dict(received=batch)``,
checked to be one whole block of the dataset's split (any other batch size is refused,
naming the one to give); ``state_dict()``, and with two or more workers
``state_dict(consumed=n)``, are refused. Workers made before a ``load_state_dict()`` or
``switch()`` (``persistent_workers=True``) hold the dataset as it was and refuse to read.
torch is imported only when the torch classes are first used.

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
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardcore import artifact_cache, shard_cache, storage
from shardcore import manifest as mf
from shardcore.errors import InputError
from shardcore.formats import IndexedReader
from shardcore.mixture import Mixture
from shardcore.pool import Pool

STATE_VERSION = 2
_LOOKAHEAD = 4096  # stream samples scanned for the next shards to prefetch
_TRANSFER = 1 << 20  # bytes of batches a DataLoader worker hands over at a time
_ROWS = 64  # samples read and converted at a time when iterating sample by sample
KINDS = ("pool", "materialized", "mixture")


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
    ``shardcore.shard_cache``; ``cache_dir``, ``cache_limit`` and ``prefetch`` set it)."""

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
        self.cache: shard_cache.ShardCache | None = None
        self._open()

    def _records(self, path: str, manifest: dict[str, Any] | None = None):
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


def _integer(name: str, value: Any, *, minimum: int = 0) -> int:
    """``value`` as an int >= ``minimum``, or an InputError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InputError(f"{name}: {value!r} is not an integer")
    if value < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def detect_rank() -> tuple[int, int, str] | None:
    """(rank, world size, where from) of this process: torch.distributed's when it is
    initialized, else the RANK and WORLD_SIZE environment variables (what torchrun,
    torch.distributed.launch, accelerate and deepspeed set), else None. torch is not
    imported here: a process that never imported it cannot have initialized it."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size()), "torch.distributed"
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None and world is None:
        if os.environ.get("LOCAL_RANK") is not None:
            raise InputError(
                "the environment sets LOCAL_RANK but not RANK and WORLD_SIZE, so the "
                "data-parallel rank is unknown: set both, or pass rank= and world_size="
            )
        return None
    if rank is None or world is None:
        have, missing = ("RANK", "WORLD_SIZE") if world is None else ("WORLD_SIZE", "RANK")
        raise InputError(
            f"the environment sets {have} but not {missing}: set both, or pass rank= and "
            "world_size="
        )
    values = []
    for name, text in (("RANK", rank), ("WORLD_SIZE", world)):
        try:
            values.append(int(text))
        except ValueError:
            raise InputError(f"the environment's {name}={text!r} is not an integer") from None
    if values[1] < 1 or not 0 <= values[0] < values[1]:
        raise InputError(f"the environment's RANK={values[0]} is outside WORLD_SIZE={values[1]}")
    return values[0], values[1], "the environment (RANK, WORLD_SIZE)"


def resolve_rank(
    rank: int | None, world_size: int | None, *, check: bool = True
) -> tuple[int, int]:
    """The data-parallel (rank, world_size): the given ones, checked against
    ``detect_rank()`` when ``check``; when neither is given, the detected ones (or 0 of 1
    in a process that is not distributed)."""
    if (rank is None) != (world_size is None):
        raise InputError(
            "rank and world_size: give both or neither (neither: torch.distributed's, or "
            "the RANK and WORLD_SIZE environment variables)"
        )
    if rank is None:
        detected = detect_rank()
        return (0, 1) if detected is None else detected[:2]
    detected = detect_rank() if check else None
    world = _integer("world_size", world_size, minimum=1)
    rank = _integer("rank", rank)
    if rank >= world:
        raise InputError(f"rank {rank} is outside world_size {world}")
    if check and detected is not None and (rank, world) != detected[:2]:
        raise InputError(
            f"rank={rank}, world_size={world} disagree with {detected[2]}: rank "
            f"{detected[0]} of {detected[1]}. Leave them out to use those; when the "
            "data-parallel ranks are not the process ranks (tensor or pipeline "
            "parallelism), pass check_rank=False"
        )
    return rank, world


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
        rank: int | None = None,
        world_size: int | None = None,
        seed: int | None = None,
        start_sample: int = 0,
        num_samples: int | None = None,
        batch_size: int | None = None,
        check_rank: bool = True,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
        prefetch: int | None = None,
    ):
        self._rank_given = rank is not None or world_size is not None
        self.check_rank = bool(check_rank)
        rank, world_size = resolve_rank(rank, world_size, check=self.check_rank)
        if batch_size is not None:
            batch_size = _integer("batch_size", batch_size, minimum=1)
        if seed is not None:
            seed = _integer("seed", seed)
        start_sample = _integer("start_sample", start_sample)
        if num_samples is not None:
            num_samples = _integer("num_samples", num_samples)
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
        # Samples per DataLoader batch: the block each worker takes in turn (None: not
        # given, which DataLoader workers refuse; ShardyardLoader sets it).
        self.batch_size = batch_size
        n = len(self.source)
        self._whole = num_samples is None  # one pass over whatever the source holds
        self.num_samples = n if num_samples is None else num_samples
        if n == 0 and self.num_samples:
            raise InputError(f"{self.path}: the {self.source.kind} has no samples")
        self.start_sample = start_sample
        self.consumed = 0  # samples of this rank the training loop received
        self._tracked = False  # ``consumed`` is set by a ShardyardLoader
        # ShardyardLoader without a collate_fn: the dataset yields runs of ``_group``
        # whole batches, which the loader splits in the main process.
        self._batched = False
        self._group = 1
        # The number of DataLoader workers that iterated this dataset (0: none), written by
        # the workers: the main process then does not see what was consumed. Shared memory
        # survives the pickling to workers.
        self._workers = multiprocessing.get_context().RawValue("i", 0)
        # Counts load_state_dict() and switch() calls, shared with the workers: a worker
        # whose copy of the dataset was made before one of them (a persistent worker) would
        # read from the old position, so it refuses to.
        self._changes = multiprocessing.get_context().RawValue("q", 0)
        self._copied_at = 0  # ``_changes`` when this copy was made (pickled to workers)
        self._orders: dict[int, np.ndarray | None] = {}

    def check_world(self) -> None:
        """Refuses to read when torch.distributed, initialized since this dataset was
        made, says another rank or world size than the one it reads for."""
        if not self.check_rank:
            return
        detected = detect_rank()
        if detected is None or detected[:2] == (self.rank, self.world_size):
            return
        how = "given" if self._rank_given else "detected when the dataset was made"
        raise InputError(
            f"this dataset reads for rank {self.rank} of {self.world_size} ({how}), but "
            f"{detected[2]} says rank {detected[0]} of {detected[1]}: make the dataset after "
            "init_process_group, or pass check_rank=False when the data-parallel ranks are "
            "not the process ranks"
        )

    def samples(
        self, worker: int = 0, workers: int = 1, *, after: int | None = None
    ) -> Iterator[int]:
        """Global sample indices of this rank and worker, in order (those after stream
        sample ``after`` when given)."""
        block = (self.batch_size or 1) * self._group
        k = self.start_sample + self.rank
        j = 0
        if after is not None and after >= k:
            j = (after - k) // self.world_size + 1
            k += j * self.world_size
        while k < self.num_samples:
            if (j // block) % workers == worker:
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
        if k < n and self.seed is None:
            return k
        epoch, i = divmod(k, n)
        if epoch not in self._orders:
            self._orders = {epoch: sample_order(n, self.seed, epoch)}
        order = self._orders[epoch]
        return i if order is None else int(order[i])

    # Kept for callers of the pool-only loader.
    record_of = index_of

    def tokens(self, k: int) -> np.ndarray:
        return self.source[self.index_of(k)]

    def state_dict(self, consumed: int | None = None, *, received: Any = None) -> dict[str, Any]:
        """The position after what this rank's training loop received: by default what a
        ``ShardyardLoader`` (or reading without workers) counted; ``received=`` the last
        batch the loop received (the batch dict, or its ``"sample"`` indices), the way to
        checkpoint a plain DataLoader with workers; ``consumed=`` a count of samples, exact
        only when no two DataLoader workers read the dataset (see the module docstring)."""
        workers = self._workers.value
        if received is not None:
            if consumed is not None:
                raise InputError("state_dict: give consumed= or received=, not both")
            consumed = self._consumed_through(received, workers)
        elif consumed is None:
            if workers and not self._tracked:
                raise InputError(
                    f"loader state: {workers} DataLoader worker(s) read this dataset, so the "
                    "main process does not know what the loop received: pass the last batch "
                    "the loop received, state_dict(received=batch), or read through "
                    "shardcore.loader.ShardyardLoader (it counts)"
                )
            consumed = self.consumed
        else:
            consumed = _integer("consumed", consumed)
            if workers > 1 and not self._tracked:
                raise InputError(
                    f"state_dict(consumed={consumed}): {workers} DataLoader workers read this "
                    "dataset and return its samples in the order of their batches, which a "
                    "count does not pin down: pass the last batch the loop received, "
                    "state_dict(received=batch), or read through "
                    "shardcore.loader.ShardyardLoader (it counts)"
                )
        state = {
            "version": STATE_VERSION,
            "next_sample": self.start_sample + consumed * self.world_size,
            "seed": self.seed,
            "num_samples": self.num_samples,
            "kind": self.source.kind,
            "fingerprint": self.source.fingerprint,
        }
        if isinstance(self.source, Segments):
            state["segments"] = [dict(k) for k in self.source.keys]
        return state

    def _consumed_through(self, received: Any, workers: int) -> int:
        """This rank's samples the loop received, from the last batch it received:
        checked to be a batch this dataset's split returns as a whole, in order."""
        samples = received.get("sample") if isinstance(received, dict) else received
        if samples is None:
            raise InputError('state_dict(received=): the batch has no "sample" field')
        samples = samples.tolist() if hasattr(samples, "tolist") else samples
        if isinstance(samples, int):
            samples = [samples]
        try:
            ks = [_integer("sample", k) for k in samples]
        except (InputError, TypeError):
            raise InputError(
                'state_dict(received=): give the last batch (a dict with "sample") or its '
                f"sample indices, not {type(received).__name__}"
            ) from None
        if not ks:
            raise InputError("state_dict(received=): the batch is empty")
        first = self.start_sample + self.rank
        js = [(k - first) // self.world_size for k in ks]
        if any(k < first or (k - first) % self.world_size for k in ks):
            raise InputError(
                f"state_dict(received=): samples {ks[:4]}... are not this rank's: rank "
                f"{self.rank} of {self.world_size} reads {first}, {first + self.world_size}, ..."
            )
        block = self.batch_size or 1
        last = max(js)
        end = self.start_sample + (last + 1) * self.world_size + self.rank >= self.num_samples
        if workers > 1 and len(js) != block and not end:
            raise InputError(
                f"state_dict(received=): the batch has {len(js)} samples, but this dataset "
                f"gives its {workers} DataLoader workers blocks of batch_size={block}, so a "
                "DataLoader with another batch size returns them out of order and no position "
                "is exact: give the dataset the DataLoader's batch_size "
                f"(ShardyardIterableDataset(..., batch_size={len(js)})) and restart from the "
                "last checkpoint, or read it through shardcore.loader.ShardyardLoader"
            )
        if js != list(range(js[0], js[0] + len(js))) or (workers > 1 and js[0] % block):
            raise InputError(
                f"state_dict(received=): samples {ks[:4]}... are not one batch of this "
                "rank's samples in order: give the last batch as the DataLoader returned it"
            )
        return js[-1] + 1

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at ``state``'s next sample, with this object's rank and world size (any
        world size and number of workers: the position is one global sample)."""
        if not isinstance(state, dict):
            raise InputError(f"loader state: a dict from state_dict(), not {type(state).__name__}")
        for key in ("next_sample", "fingerprint"):
            if key not in state and not (key == "fingerprint" and "pool" in state):
                raise InputError(f"loader state: no {key!r} (not a state_dict() of this loader)")
        if state.get("version") not in (1, STATE_VERSION):
            raise InputError(
                f"loader state version {state.get('version')!r} is not {STATE_VERSION}"
            )
        theirs = state.get("fingerprint", state.get("pool"))
        _integer("loader state: next_sample", state["next_sample"])
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
        seed = state.get("seed")
        self.seed = None if seed is None else _integer("loader state: seed", seed)
        if not (switched and self._whole):
            # A state saved before a switch describes the shorter run: keep this length.
            self.num_samples = _integer(
                "loader state: num_samples", state.get("num_samples", self.num_samples)
            )
        self.consumed = 0
        self._changed()

    def _changed(self) -> None:
        self._changes.value += 1
        self._copied_at = self._changes.value

    def _stale_workers(self) -> str:
        return (
            "persistent_workers=True: this DataLoader's workers hold the dataset as it was "
            "when they started, before load_state_dict() or switch(), so they would read "
            "from the old position and the state would not match what was read. Create a "
            "new DataLoader after load_state_dict() or switch() (or pass "
            "persistent_workers=False)"
        )

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
        self._changed()


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
        ``rank``/``world_size`` default to torch.distributed's (or RANK/WORLD_SIZE). Read
        by a plain DataLoader with workers, it needs the DataLoader's ``batch_size``
        (``ShardyardLoader`` sets it). See the module docstring for the order."""

        def __init__(self, path: str | os.PathLike | list, **kwargs: Any):
            IterableDataset.__init__(self)
            _Stream.__init__(self, path, **kwargs)  # type: ignore[arg-type]

        def __iter__(self) -> Iterator[dict[str, Any]]:
            info = get_worker_info()
            worker, workers = (info.id, info.num_workers) if info else (0, 1)
            self.check_world()  # a forked worker sees its parent's torch.distributed
            if info is not None:
                if self._copied_at != self._changes.value:
                    raise InputError(self._stale_workers())
                self._workers.value = workers
                if workers > 1 and self.batch_size is None and not self._tracked:
                    raise InputError(
                        f"ShardyardIterableDataset read by {workers} DataLoader workers "
                        "without batch_size: each worker returns whole batches, so the "
                        "dataset must split its samples in blocks of the DataLoader's "
                        "batch_size to keep the order and resume exactly. Give "
                        "ShardyardIterableDataset(..., batch_size=<the DataLoader's>), or read "
                        "it through shardcore.loader.ShardyardLoader (it sets it)"
                    )
            else:
                if not self._tracked:
                    self.consumed = 0  # a new pass starts again at start_sample
            if self._batched:
                yield from self._batches(worker, workers)
                return
            count = info is None and not self._tracked
            if not (isinstance(self.source, Samples) and self.source.cache is None):
                for k, row in self.read(worker, workers):
                    if count:
                        self.consumed += 1
                    yield {"tokens": torch.from_numpy(row.astype(np.int64)), "sample": k}
                return
            # Local shards: _ROWS samples converted to int64 at a time (one copy for evenly
            # spaced records of a shard), each sample a row of that array.
            width = self.source.seq_len + 1
            ks_of = self.samples(worker, workers)
            while ks := list(itertools.islice(ks_of, _ROWS)):
                rows = np.empty((len(ks), width), dtype=np.int64)
                self.source.gather([self.index_of(k) for k in ks], rows)
                for k, row in zip(ks, rows, strict=True):
                    if count:
                        self.consumed += 1
                    yield {"tokens": torch.from_numpy(row), "sample": k}

        def _batches(self, worker: int, workers: int) -> Iterator[dict[str, Any]]:
            # Runs of ``_group`` whole batches (one block of the split): the tokens and the
            # sample indices are two views of one int64 buffer, filled from the shards'
            # memory maps (one copy for evenly spaced records in a shard). No per-sample
            # tensor and no collation; one shared-memory segment (a file descriptor passed
            # over a socket, the dear part of a worker's transfer) per run of batches.
            block = (self.batch_size or 1) * self._group
            width = self.source.seq_len + 1
            # Remote shards are read sample by sample, which queues their prefetch.
            direct = isinstance(self.source, Samples) and self.source.cache is None
            if direct:
                ks_of = self.samples(worker, workers)
            else:
                rows = self.read(worker, workers)
            while True:
                if direct:
                    ks = list(itertools.islice(ks_of, block))
                else:
                    pairs = list(itertools.islice(rows, block))
                    ks = [k for k, _ in pairs]
                n = len(ks)
                if not n:
                    return
                buffer = torch.empty(n * width + n, dtype=torch.int64)
                flat = buffer.numpy()
                tokens = flat[: n * width].reshape(n, width)
                flat[n * width :] = ks
                if direct:
                    self.source.gather([self.index_of(k) for k in ks], tokens)  # type: ignore[union-attr]
                else:
                    for r, (_, row) in enumerate(pairs):
                        tokens[r] = row
                yield {"tokens": buffer[: n * width].view(n, width), "sample": buffer[n * width :]}

    class ShardyardLoader(DataLoader):
        """A ``DataLoader`` over a ``ShardyardIterableDataset`` that counts the samples
        of each batch it returns, so that ``state_dict()`` is the position after the last
        batch the training loop received, with any number of workers. Without a
        ``collate_fn`` the dataset builds the batches itself (no per-sample collation), a
        worker several consecutive batches at a time (about 1 MiB, one transfer), which
        this loader hands out one by one as views of that buffer; the batches are the
        same either way."""

        def __init__(self, dataset: ShardyardIterableDataset, batch_size: int = 1, **kwargs):
            if not isinstance(dataset, _Stream):
                raise InputError(
                    f"ShardyardLoader reads a ShardyardIterableDataset, not "
                    f"{type(dataset).__name__}"
                )
            batch_size = _integer("ShardyardLoader batch_size", batch_size, minimum=1)
            for name in ("sampler", "batch_sampler"):
                if kwargs.get(name) is not None:
                    raise InputError(
                        f"ShardyardLoader {name}=: the dataset's order is the sampler; give "
                        "seed= to the dataset for a seeded permutation"
                    )
            if kwargs.get("shuffle"):
                raise InputError(
                    "ShardyardLoader shuffle=True: the dataset's order is fixed so that it "
                    "resumes exactly; give seed= to the dataset for a seeded permutation"
                )
            if kwargs.get("in_order") is False:
                raise InputError(
                    "ShardyardLoader in_order=False: batches out of order have no exact "
                    "resume position"
                )
            dataset.batch_size = batch_size
            dataset._tracked = True
            dataset._batched = kwargs.get("collate_fn") is None
            self._drop = bool(kwargs.get("drop_last", False))
            if dataset._batched:
                # Batches per transfer from a worker: about _TRANSFER bytes, so that the
                # fixed cost of a transfer is paid once for several batches.
                width = dataset.source.seq_len + 1
                workers = int(kwargs.get("num_workers", 0))
                dataset._group = max(1, _TRANSFER // (batch_size * width * 8)) if workers else 1
                kwargs.pop("drop_last", None)
                super().__init__(dataset, batch_size=None, **kwargs)
                # What the training loop asked for (the DataLoader itself does not batch).
                object.__setattr__(self, "batch_size", batch_size)
                object.__setattr__(self, "drop_last", self._drop)
            else:
                dataset._group = 1
                super().__init__(dataset, batch_size=batch_size, **kwargs)

        def __iter__(self):
            ds = self.dataset
            if self.persistent_workers and self._iterator is not None:
                if self._started_at != ds._changes.value:
                    raise InputError(ds._stale_workers())
            else:
                self._started_at = ds._changes.value
            ds.consumed = 0  # a new pass starts again at the dataset's start_sample
            ds.check_world()
            size = ds.batch_size
            for item in super().__iter__():
                if not ds._batched:
                    ds.consumed += len(item["sample"])
                    yield item
                    continue
                tokens, samples = item["tokens"], item["sample"]
                n = len(samples)
                for i in range(0, n, size):
                    if self._drop and n - i < size:
                        break  # only the stream's last batch can be short
                    ds.consumed += min(size, n - i)
                    yield {"tokens": tokens[i : i + size], "sample": samples[i : i + size]}

        def state_dict(self) -> dict[str, Any]:
            return self.dataset.state_dict()  # type: ignore[attr-defined]

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.dataset.load_state_dict(state)  # type: ignore[attr-defined]

    # Module-level names, so that pickle finds them (through this module's __getattr__)
    # when DataLoader workers start by spawn or forkserver (Python 3.14's default).
    for cls in (ShardyardIterableDataset, ShardyardLoader):
        cls.__qualname__ = cls.__name__
        cls.__module__ = __name__
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

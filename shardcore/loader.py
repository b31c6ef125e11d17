"""Read pools in training: a numpy reader and a torch ``IterableDataset``.

``PoolReader`` gives sequential and random access to records (np.memmap views, no copy).

``PoolIterableDataset`` streams samples in a deterministic order that resumes exactly:

* the global stream is samples k = start_sample, start_sample + 1, ... up to
  ``num_samples`` (default: one epoch); sample k is record ``order_e[k % N]`` of epoch
  e = k // N, where ``order_e`` is the pool's own (already shuffled) order, or with a
  ``seed`` a permutation of the records seeded by (seed, epoch);
* data-parallel rank r of ``world_size`` takes k = start + r, start + r + world_size, ...;
* within a rank, DataLoader workers take the rank's samples in blocks of ``batch_size``
  round-robin (block t to worker t % workers), which is the order in which
  ``torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=W)`` returns
  them: the loader's output on a rank is the rank's samples in order, whatever W.

All ranks consume in lockstep, so the position is one number: after each rank consumed c
samples, the next unseen sample is ``start_sample + c * world_size``.
``state_dict(consumed=c)`` records it and ``load_state_dict`` resumes there (with any
world size or worker count). torch is imported only when ``PoolIterableDataset`` is
first used, so shardcore imports without torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardcore.errors import InputError
from shardcore.pool import Pool

STATE_VERSION = 1


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
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        for first in range(start, self.num_records, batch_size):
            yield self.pool.records(first, min(first + batch_size, self.num_records))


def sample_order(num_records: int, seed: int | None, epoch: int) -> np.ndarray | None:
    """The records of one epoch in stream order (None: the pool's own order)."""
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
    ):
        if world_size < 1 or not 0 <= rank < world_size:
            raise InputError(f"rank {rank} is outside world_size {world_size}")
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        self.path = os.fspath(path)
        self.reader = PoolReader(path)
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.batch_size = batch_size
        self.num_samples = self.reader.num_records if num_samples is None else int(num_samples)
        if self.reader.num_records == 0 and self.num_samples:
            raise InputError(f"{self.path}: the pool is empty")
        self.start_sample = int(start_sample)
        self.yielded = 0
        self._orders: dict[int, np.ndarray | None] = {}

    def samples(self, worker: int = 0, workers: int = 1) -> Iterator[int]:
        """Global sample indices of this rank and worker, in order."""
        k = self.start_sample + self.rank
        j = 0
        while k < self.num_samples:
            if (j // self.batch_size) % workers == worker:
                yield k
            k += self.world_size
            j += 1

    def record_of(self, k: int) -> int:
        n = self.reader.num_records
        epoch, i = divmod(k, n)
        if epoch not in self._orders:
            self._orders = {epoch: sample_order(n, self.seed, epoch)}
        order = self._orders[epoch]
        return i if order is None else int(order[i])

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        c = self.yielded if consumed is None else int(consumed)
        return {
            "version": STATE_VERSION,
            "next_sample": self.start_sample + c * self.world_size,
            "seed": self.seed,
            "num_samples": self.num_samples,
            "pool": self.reader.pool.manifest["fingerprint"],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise InputError(
                f"loader state version {state.get('version')!r} is not {STATE_VERSION}"
            )
        fp = self.reader.pool.manifest["fingerprint"]
        if state.get("pool") != fp:
            raise InputError(f"loader state is for pool {state.get('pool')}, this is {fp}")
        self.start_sample = int(state["next_sample"])
        self.seed = state.get("seed")
        self.num_samples = int(state.get("num_samples", self.num_samples))
        self.yielded = 0


def _make_dataset_class():
    import torch
    from torch.utils.data import IterableDataset, get_worker_info

    class PoolIterableDataset(IterableDataset, _Stream):
        """Samples of a pool for one data-parallel rank, as dicts ``{"tokens": LongTensor
        of seq_len + 1, "sample": global sample index}``. Give the DataLoader the same
        ``batch_size`` as this dataset. See the module docstring for the order."""

        def __init__(self, path: str | os.PathLike, **kwargs: Any):
            IterableDataset.__init__(self)
            _Stream.__init__(self, path, **kwargs)

        def __iter__(self) -> Iterator[dict[str, Any]]:
            info = get_worker_info()
            worker, workers = (info.id, info.num_workers) if info else (0, 1)
            for k in self.samples(worker, workers):
                tokens = np.asarray(self.reader[self.record_of(k)], dtype=np.int64)
                self.yielded += 1
                yield {"tokens": torch.from_numpy(tokens), "sample": k}

        def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
            """The position after this rank consumed ``consumed`` samples (default: the
            samples this object yielded itself, i.e. with num_workers=0)."""
            return _Stream.state_dict(self, consumed)

    return PoolIterableDataset


def __getattr__(name: str):
    if name == "PoolIterableDataset":
        cls = _make_dataset_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

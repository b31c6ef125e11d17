"""Read Shardyard artifacts in training: random access to samples, and one torch streaming
loader for every artifact kind (a pool, a mixture, a materialized mixture).

``Samples`` gives sample i of any artifact as its seq_len + 1 tokens: record i of a pool or
of a materialized mixture (np.memmap views, no copy), or the (pool, record) the mixture's
schedule names for sample i (``shardcore.loader.samples``). ``PoolReader`` is the
pool-only reader with batch iteration.

``ShardyardIterableDataset`` streams samples in a deterministic order that resumes exactly:

* the global stream is samples k = start_sample, start_sample + 1, ... up to
  ``num_samples`` (default: one epoch, every sample of the artifact once); sample k is
  sample ``order_e[k % N]`` of the artifact in epoch e = k // N, where ``order_e`` is the
  artifact's own order (a pool's shuffled records, a mixture's schedule), or with a
  ``seed`` a permutation seeded by (seed, epoch);
* data-parallel rank r of ``world_size`` takes k = start + r, start + r + world_size, ...;
  not given, rank and world size are torch.distributed's when it is initialized, else the
  RANK and WORLD_SIZE environment variables (torchrun's), else Slurm's SLURM_PROCID and
  SLURM_NTASKS (refused when Slurm runs several tasks and they disagree with RANK and
  WORLD_SIZE), else 0 of 1; given ones that
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
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardcore.errors import InputError
from shardcore.loader.samples import KINDS, PoolReader, Samples, Segments, _integer, open_samples
from shardcore.loader.stream import (
    STATE_VERSION,
    _Stream,
    detect_rank,
    resolve_rank,
    resume_state,
    sample_order,
)

__all__ = [
    "KINDS",
    "STATE_VERSION",
    "PoolIterableDataset",
    "PoolReader",
    "Samples",
    "Segments",
    "ShardyardIterableDataset",
    "ShardyardLoader",
    "detect_rank",
    "open_samples",
    "resolve_rank",
    "resume_state",
    "sample_order",
]

_TRANSFER = 1 << 20  # bytes of batches a DataLoader worker hands over at a time
_ROWS = 64  # samples read and converted at a time when iterating sample by sample


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
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

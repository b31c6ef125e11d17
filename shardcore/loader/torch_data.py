"""The torch classes of the loader: ``ShardyardIterableDataset`` (a torch
``IterableDataset`` over ``loader.stream._Stream``) and ``ShardyardLoader`` (a
``DataLoader`` that counts what the training loop received). A module of its own, imported
by ``shardcore.loader`` the first time one of them is asked for, so that reading samples
without torch (``Samples``, the command line, the server) never loads it; DataLoader
workers started by spawn or forkserver find the classes here by name."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from shardcore.errors import InputError
from shardcore.loader.samples import Samples, _integer
from shardcore.loader.stream import _Stream

_TRANSFER = 1 << 20  # bytes of batches a DataLoader worker hands over at a time
_ROWS = 64  # samples read and converted at a time when iterating sample by sample


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

    dataset: ShardyardIterableDataset
    _started_at: int  # the dataset's change count when the persistent workers started

    def __init__(
        self, dataset: ShardyardIterableDataset, batch_size: int = 1, **kwargs: Any
    ) -> None:
        if not isinstance(dataset, _Stream):
            raise InputError(
                f"ShardyardLoader reads a ShardyardIterableDataset, not {type(dataset).__name__}"
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
                "ShardyardLoader in_order=False: batches out of order have no exact resume position"
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

    # A generator of the batches, where DataLoader's returns its iterator object.
    def __iter__(self) -> Iterator[dict[str, Any]]:  # type: ignore[override]
        ds = self.dataset
        if self.persistent_workers and self._iterator is not None:
            if self._started_at != ds._changes.value:
                raise InputError(ds._stale_workers())
        else:
            self._started_at = ds._changes.value
        ds.consumed = 0  # a new pass starts again at the dataset's start_sample
        ds.check_world()
        size = cast(int, ds.batch_size)  # __init__ set it from its own batch_size
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
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dataset.load_state_dict(state)


# The name it had before it read every kind of artifact.
PoolIterableDataset = ShardyardIterableDataset

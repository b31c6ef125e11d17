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
torch is imported only when the torch classes are first used (``loader.torch_data``).

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

from shardcore.loader.samples import KINDS, PoolReader, Samples, Segments, open_samples
from shardcore.loader.stream import (
    STATE_VERSION,
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


def __getattr__(name: str) -> type:
    """The torch classes, from their module, the first time one is asked for."""
    if name in ("ShardyardIterableDataset", "PoolIterableDataset", "ShardyardLoader"):
        from shardcore.loader import torch_data  # torch loads only for a trainer's loader

        return getattr(torch_data, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The deterministic, resumable stream of samples the torch loader reads (``_Stream``, the
order and state ``shardcore.loader``'s docstring describes): the data-parallel rank, the
epoch order, the blocks of a DataLoader's workers, the state dict and the switch to another
mixture version."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardcore.errors import InputError
from shardcore.loader.samples import Segments, _integer, _keys, open_samples

STATE_VERSION = 2
_LOOKAHEAD = 4096  # stream samples scanned for the next shards to prefetch


def detect_rank() -> tuple[int, int, str] | None:
    """(rank, world size, where from) of this process: torch.distributed's when it is
    initialized, else the RANK and WORLD_SIZE environment variables (what torchrun,
    torch.distributed.launch, accelerate and deepspeed set), else Slurm's SLURM_PROCID and
    SLURM_NTASKS (``srun`` starting one process per rank), else None. Both sets given and
    Slurm starting several tasks: they must agree (one task that runs torchrun, whose
    RANK differs from the task's, is no disagreement). torch is not imported here: a
    process that never imported it cannot have initialized it."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size()), "torch.distributed"
    torchrun = _env_rank("RANK", "WORLD_SIZE")
    slurm = _env_rank("SLURM_PROCID", "SLURM_NTASKS")
    if torchrun is None:
        if os.environ.get("LOCAL_RANK") is not None:
            raise InputError(
                "the environment sets LOCAL_RANK but not RANK and WORLD_SIZE, so the "
                "data-parallel rank is unknown: set both, or pass rank= and world_size="
            )
        if slurm is None:
            return None
        return slurm[0], slurm[1], "Slurm (SLURM_PROCID, SLURM_NTASKS)"
    if slurm is not None and slurm[1] > 1 and slurm != torchrun:
        raise InputError(
            f"the environment's RANK={torchrun[0]}, WORLD_SIZE={torchrun[1]} disagree with "
            f"Slurm's SLURM_PROCID={slurm[0]}, SLURM_NTASKS={slurm[1]}: set RANK and "
            "WORLD_SIZE from Slurm's, or pass rank= and world_size="
        )
    return torchrun[0], torchrun[1], "the environment (RANK, WORLD_SIZE)"


def _env_rank(rank_name: str, world_name: str) -> tuple[int, int] | None:
    """(rank, world size) from two environment variables, None when neither is set;
    refused when one is missing, not an integer or out of range."""
    rank, world = os.environ.get(rank_name), os.environ.get(world_name)
    if rank is None and world is None:
        return None
    if rank is None or world is None:
        have, missing = (rank_name, world_name) if world is None else (world_name, rank_name)
        raise InputError(
            f"the environment sets {have} but not {missing}: set both, or pass rank= and "
            "world_size="
        )
    values = []
    for name, text in ((rank_name, rank), (world_name, world)):
        try:
            values.append(int(text))
        except ValueError:
            raise InputError(f"the environment's {name}={text!r} is not an integer") from None
    if values[1] < 1 or not 0 <= values[0] < values[1]:
        raise InputError(
            f"the environment's {rank_name}={values[0]} is outside {world_name}={values[1]}"
        )
    return values[0], values[1]


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

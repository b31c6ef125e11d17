"""The loader: numpy readers, and one torch streaming loader for pools, mixtures and
materialized mixtures that tracks its own consumption and resumes exactly in any world size."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

from shardcore.errors import InputError
from shardcore.loader import PoolReader, Samples, sample_order
from shardcore.materialize import materialize
from shardcore.mixture import Mixture, build_mixture
from shardcore.pool import Pool, build_pool
from tests.unit import mix_fixtures
from tests.unit import pool_fixtures as pf

BATCH = 4


@pytest.fixture(scope="module")
def pool_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("loader")
    src = pf.write_tokenized(root / "src", pf.corpus("prose", 600), shard_docs=150)
    build_pool([str(src)], str(root / "p"), seq_len=63, memory=1 << 20, shard_size=30_000)
    return root / "p"


def _run(path, *, rank, world_size, workers, state=None, limit=None, seed=None):
    """Samples one rank's plain DataLoader returns, as (global index, tokens) pairs, and
    the dataset's state after the last batch (as the docs say: ``received=`` that batch)."""
    import torch

    from shardcore.loader import PoolIterableDataset

    ds = PoolIterableDataset(path, rank=rank, world_size=world_size, seed=seed, batch_size=BATCH)
    if state is not None:
        ds.load_state_dict(state)
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=workers)
    out = []
    for batch in loader:
        out.extend(zip(batch["sample"].tolist(), batch["tokens"].numpy(), strict=True))
        if limit is not None and len(out) >= limit:
            break
    return ds.state_dict(received=batch), out


def test_it_reads_records_sequentially_and_at_random(pool_path):
    reader, pool = PoolReader(pool_path), Pool(pool_path)
    assert len(reader) == pool.num_records > 3 * BATCH
    batches = list(reader.iter_batches(7))
    assert np.array_equal(np.concatenate(batches), reader.read(0, len(reader)))
    assert np.array_equal(reader[len(reader) - 1], batches[-1][-1])
    for i in (0, 5, len(reader) // 2):
        assert np.array_equal(reader[i], reader.read(i, i + 1)[0])


@pytest.mark.parametrize("world_size,workers,seed", [(1, 0, None), (2, 2, None), (3, 2, 7)])
def test_it_resumes_after_k_samples_exactly_where_an_uninterrupted_run_continues(
    pool_path, world_size, workers, seed
):
    pool = Pool(pool_path)
    full = {
        r: _run(pool_path, rank=r, world_size=world_size, workers=workers, seed=seed)[1]
        for r in range(world_size)
    }
    every = sorted(k for r in full for k, _ in full[r])
    assert every == list(range(pool.num_records))  # every sample once across ranks
    order = sample_order(pool.num_records, seed, 0)
    for r in full:
        for k, tokens in full[r][:5]:
            assert np.array_equal(tokens, pool.record(k if order is None else order[k]))
    k = 3 * BATCH
    states = []
    for r in range(world_size):
        state, head = _run(
            pool_path, rank=r, world_size=world_size, workers=workers, seed=seed, limit=k
        )
        assert [s for s, _ in head[:k]] == [s for s, _ in full[r][:k]]
        states.append(state)
    assert all(s == states[0] for s in states)  # one position for all ranks
    for r in range(world_size):
        _, tail = _run(
            pool_path, rank=r, world_size=world_size, workers=workers, seed=seed, state=states[0]
        )
        assert [s for s, _ in tail] == [s for s, _ in full[r][k:]]
        assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(tail, full[r][k:], strict=True))


def test_it_counts_its_own_samples_without_workers(pool_path):
    from shardcore.loader import PoolIterableDataset

    ds = PoolIterableDataset(pool_path, world_size=2, rank=1)
    it = iter(ds)
    seen = [next(it)["sample"] for _ in range(7)]
    assert seen == [1, 3, 5, 7, 9, 11, 13]
    again = PoolIterableDataset(pool_path, world_size=2, rank=1)
    again.load_state_dict(ds.state_dict())
    assert next(iter(again))["sample"] == 15


def test_it_refuses_a_state_of_another_pool(pool_path):
    from shardcore.loader import PoolIterableDataset

    ds = PoolIterableDataset(pool_path)
    state = {**ds.state_dict(), "fingerprint": "0" * 32}
    with pytest.raises(InputError, match="loader state is for pool 0+, this is pool"):
        ds.load_state_dict(state)


def test_it_imports_shardcore_loader_without_torch():
    code = "import sys, shardcore.loader; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# --------------------------------------------------------------------------- mixtures

MIX_SEQ = 32


@pytest.fixture(scope="module")
def mixture_path(tmp_path_factory):
    """A two-pool mixture with an annealing stage over real stdlib code, and its
    materialized copy."""
    root = tmp_path_factory.mktemp("loader-mix")
    pools = mix_fixtures.build_pools(root, seq_len=MIX_SEQ)
    spec = {
        "tokens": MIX_SEQ * 401,
        "seed": 5,
        "components": [
            {"pool": str(pools["early"]), "weight": 2},
            {"pool": str(pools["late"]), "weight": 1},
        ],
        "stages": [
            {
                "name": "anneal",
                "tokens": MIX_SEQ * 60,
                "components": [{"pool": str(pools["middle"]), "weight": 1}],
            }
        ],
    }
    build_mixture(spec, root / "mix")
    materialize(root / "mix", root / "flat", shard_bytes=20_000)
    return root / "mix"


def _loader_run(path, *, rank, world_size, workers, state=None, steps=None):
    """(global index, tokens) of the batches one rank's ShardyardLoader returns; the
    loader is returned too, for its automatic state_dict."""
    from shardcore.loader import ShardyardIterableDataset, ShardyardLoader

    ds = ShardyardIterableDataset(path, rank=rank, world_size=world_size)
    if state is not None:
        ds.load_state_dict(state)
    loader = ShardyardLoader(ds, batch_size=BATCH, num_workers=workers)
    out = []
    for step, batch in enumerate(loader):
        out.extend(zip(batch["sample"].tolist(), batch["tokens"].numpy(), strict=True))
        if steps is not None and step + 1 == steps:
            break
    return loader, out


def test_it_reads_every_artifact_kind_as_samples(mixture_path):
    mix = Mixture(mixture_path)
    samples = Samples(mixture_path)
    flat = Samples(mixture_path.parent / "flat")
    assert samples.kind == "mixture" and flat.kind == "materialized"
    assert len(samples) == len(flat) == mix.num_samples
    for i in range(mix.num_samples):
        np.testing.assert_array_equal(samples[i], mix.tokens(i))
        np.testing.assert_array_equal(flat[i], mix.tokens(i))
    pool = Samples(mix.pools[0]["path"])
    np.testing.assert_array_equal(pool[3], Pool(mix.pools[0]["path"]).record(3))


def test_it_refuses_an_artifact_without_samples(tmp_path):
    src = pf.write_tokenized(tmp_path / "tok", pf.corpus("prose", 20), shard_docs=10)
    with pytest.raises(
        InputError,
        match="is not a pool, materialized or mixture: its manifest's kind is 'tokenized'",
    ):
        Samples(src)


@pytest.mark.parametrize("kind", ["mixture", "materialized"])
def test_two_ranks_with_two_workers_see_each_mixture_sample_once_per_epoch(mixture_path, kind):
    path = mixture_path if kind == "mixture" else mixture_path.parent / "flat"
    mix = Mixture(mixture_path)
    seen = []
    for r in range(2):
        loader, out = _loader_run(path, rank=r, world_size=2, workers=2)
        seen.extend(out)
        # Consumption tracked by the loader itself: the end of the epoch.
        assert loader.state_dict()["next_sample"] == 2 * len(out)
    assert sorted(k for k, _ in seen) == list(range(mix.num_samples))
    for k, tokens in seen:
        np.testing.assert_array_equal(tokens, mix.tokens(k))


@pytest.mark.parametrize("new_world", [1, 2, 4])
def test_it_resumes_an_automatic_state_dict_into_another_world_size(mixture_path, new_world):
    mix = Mixture(mixture_path)
    steps = 7  # an arbitrary step: not a multiple of anything in the mixture
    states = []
    for r in range(2):
        loader, head = _loader_run(mixture_path, rank=r, world_size=2, workers=2, steps=steps)
        assert [k for k, _ in head] == [
            k for k in range(r, 2 * steps * BATCH, 2)
        ]  # rank r's samples in order, whatever the workers
        states.append(loader.state_dict())
        assert states[-1] == loader.dataset.state_dict()
    assert states[0] == states[1]
    assert states[0]["next_sample"] == 2 * steps * BATCH
    tails = {
        r: _loader_run(mixture_path, rank=r, world_size=new_world, workers=2, state=states[0])[1]
        for r in range(new_world)
    }
    for r, tail in tails.items():
        expected = list(range(states[0]["next_sample"] + r, mix.num_samples, new_world))
        assert [k for k, _ in tail] == expected
        for k, tokens in tail:
            np.testing.assert_array_equal(tokens, mix.tokens(k))
    resumed = sorted(k for tail in tails.values() for k, _ in tail)
    assert resumed == list(range(2 * steps * BATCH, mix.num_samples))  # nothing lost or repeated


def test_a_plain_dataloader_with_workers_refuses_to_guess_the_position(mixture_path):
    import torch

    from shardcore.loader import ShardyardIterableDataset

    ds = ShardyardIterableDataset(mixture_path, batch_size=BATCH)
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=2)
    batch = next(b for step, b in enumerate(loader) if step == 2)
    with pytest.raises(InputError, match=r"2 DataLoader worker\(s\) read this dataset.*received="):
        ds.state_dict()
    with pytest.raises(InputError, match=r"consumed=12\): 2 DataLoader workers .*received="):
        ds.state_dict(consumed=3 * BATCH)
    assert ds.state_dict(received=batch)["next_sample"] == 3 * BATCH
    assert ds.state_dict(received=batch["sample"])["next_sample"] == 3 * BATCH


def test_it_refuses_a_state_of_another_artifact(mixture_path):
    from shardcore.loader import ShardyardIterableDataset

    flat = ShardyardIterableDataset(mixture_path.parent / "flat")
    state = ShardyardIterableDataset(mixture_path).state_dict()
    with pytest.raises(InputError, match="loader state is for mixture .*, this is materialized"):
        flat.load_state_dict(state)


def test_a_second_pass_counts_from_its_own_start(mixture_path):
    from shardcore.loader import ShardyardIterableDataset, ShardyardLoader

    loader = ShardyardLoader(ShardyardIterableDataset(mixture_path), batch_size=BATCH)
    assert len(list(loader)) * BATCH >= Mixture(mixture_path).num_samples
    for step, _ in enumerate(loader):  # the next pass, stopped after 3 batches
        if step == 2:
            break
    assert loader.state_dict()["next_sample"] == 3 * BATCH


# ------------------------------------------------- misuse: workers, ranks, arguments


def test_a_plain_dataloader_with_workers_resumes_exactly_as_the_docs_say(mixture_path):
    """A user's first script: DataLoader(ds, batch_size=8, num_workers=2). Without the
    dataset's batch_size the workers refuse, naming it; with it, stopped after 3 batches
    and resumed from state_dict(received=the last batch), one epoch exactly."""
    import torch

    from shardcore.loader import ShardyardIterableDataset

    n = Mixture(mixture_path).num_samples
    first = torch.utils.data.DataLoader(
        ShardyardIterableDataset(mixture_path), batch_size=8, num_workers=2
    )
    with pytest.raises(Exception, match=r"batch_size=<the DataLoader's>"):
        next(iter(first))

    ds = ShardyardIterableDataset(mixture_path, batch_size=8)
    seen = []
    for step, batch in enumerate(torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2)):
        seen.extend(batch["sample"].tolist())
        if step == 2:
            break
    state = ds.state_dict(received=batch)
    assert state["next_sample"] == 24
    resumed = ShardyardIterableDataset(mixture_path, batch_size=8)
    resumed.load_state_dict(state)
    for batch in torch.utils.data.DataLoader(resumed, batch_size=8, num_workers=2):
        seen.extend(batch["sample"].tolist())
    assert len(seen) == len(set(seen)) == n  # no sample twice
    assert sorted(seen) == list(range(n))  # none missing


def test_a_dataloader_batch_size_other_than_the_datasets_is_refused_with_the_one_to_give(
    mixture_path,
):
    import torch

    from shardcore.loader import ShardyardIterableDataset

    ds = ShardyardIterableDataset(mixture_path, batch_size=4)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2)
    batch = next(b for step, b in enumerate(loader) if step == 2)
    # Worker 0's batches 0 and 2 hold blocks 0, 2 and 4, 6: samples 20-23 were not read.
    assert batch["sample"].tolist() == [16, 17, 18, 19, 24, 25, 26, 27]
    with pytest.raises(InputError, match=r"batch_size=4.*batch_size=8\)"):
        ds.state_dict(received=batch)


def test_received_must_be_this_ranks_consecutive_samples(mixture_path):
    from shardcore.loader import ShardyardIterableDataset

    ds = ShardyardIterableDataset(mixture_path, rank=1, world_size=2)
    assert ds.state_dict(received=[1, 3, 5])["next_sample"] == 6
    with pytest.raises(InputError, match="are not this rank's"):
        ds.state_dict(received=[0, 2])
    with pytest.raises(InputError, match="not one batch of this rank"):
        ds.state_dict(received=[1, 5])
    with pytest.raises(InputError, match="empty"):
        ds.state_dict(received=[])
    with pytest.raises(InputError, match='no "sample" field'):
        ds.state_dict(received={"tokens": []})
    with pytest.raises(InputError, match="not both"):
        ds.state_dict(3, received=[1])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"batch_size": 2.5}, "batch_size: 2.5 is not an integer"),
        ({"batch_size": "8"}, "batch_size: '8' is not an integer"),
        ({"rank": 0}, "rank and world_size: give both or neither"),
        ({"rank": 2, "world_size": 2}, "rank 2 is outside world_size 2"),
        ({"rank": -1, "world_size": 2}, "rank must be >= 0"),
        ({"rank": 0, "world_size": 0}, "world_size must be >= 1"),
        ({"rank": True, "world_size": 2}, "rank: True is not an integer"),
        ({"seed": "x"}, "seed: 'x' is not an integer"),
        ({"start_sample": -4}, "start_sample must be >= 0"),
        ({"num_samples": 1.5}, "num_samples: 1.5 is not an integer"),
    ],
)
def test_bad_dataset_arguments_are_named(mixture_path, kwargs, match):
    from shardcore.loader import ShardyardIterableDataset

    with pytest.raises(InputError, match=match):
        ShardyardIterableDataset(mixture_path, **kwargs)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"batch_size": None}, "ShardyardLoader batch_size: None is not an integer"),
        ({"batch_size": 0}, "ShardyardLoader batch_size must be >= 1"),
        ({"batch_size": 4, "shuffle": True}, "shuffle=True"),
        ({"batch_size": 4, "sampler": [0, 1]}, "sampler="),
        ({"batch_size": 4, "in_order": False}, "in_order=False"),
    ],
)
def test_bad_loader_arguments_are_named(mixture_path, kwargs, match):
    from shardcore.loader import ShardyardIterableDataset, ShardyardLoader

    with pytest.raises(InputError, match=match):
        ShardyardLoader(ShardyardIterableDataset(mixture_path), **kwargs)
    with pytest.raises(InputError, match="reads a ShardyardIterableDataset, not list"):
        ShardyardLoader([1, 2], batch_size=4)


@pytest.mark.parametrize(
    "state,match",
    [
        (None, "a dict from state_dict"),
        ({}, "no 'next_sample'"),
        ({"next_sample": -1, "fingerprint": "f", "version": 2}, "next_sample must be >= 0"),
        ({"next_sample": 0, "fingerprint": "f", "version": 9}, "version 9 is not 2"),
        ({"next_sample": "3", "fingerprint": "f", "version": 2}, "next_sample: '3' is not"),
        (None, "a dict from state_dict"),
    ],
)
def test_bad_states_and_counts_are_named(mixture_path, state, match):
    from shardcore.loader import ShardyardIterableDataset

    ds = ShardyardIterableDataset(mixture_path)
    with pytest.raises(InputError, match=match):
        ds.load_state_dict(state)
    with pytest.raises(InputError, match="consumed must be >= 0, got -1"):
        ds.state_dict(consumed=-1)
    good = ds.state_dict()
    with pytest.raises(InputError, match="loader state: seed: 'x' is not an integer"):
        ds.load_state_dict({**good, "seed": "x"})
    with pytest.raises(InputError, match="batch_size: None is not an integer"):
        next(PoolReader(Mixture(mixture_path).pools[0]["path"]).iter_batches(None))


@pytest.mark.parametrize("kind,world_size", [("mixture", 2), ("materialized", 3)])
@pytest.mark.parametrize("group", [1, 3])
def test_the_loader_builds_the_batches_a_collating_dataloader_builds(
    mixture_path, kind, world_size, group, monkeypatch
):
    """ShardyardLoader's own batches (no collate_fn; a materialized copy's evenly spaced
    records copied a shard slice at a time; ``group`` batches a worker transfer) equal
    torch's collation of samples; drop_last drops the same short batch; the position after
    a pass is the same."""
    from torch.utils.data import default_collate

    from shardcore.loader import ShardyardIterableDataset, ShardyardLoader, torch_data

    monkeypatch.setattr(torch_data, "_TRANSFER", group * 5 * (MIX_SEQ + 1) * 8)

    path = mixture_path if kind == "mixture" else mixture_path.parent / "flat"
    for drop_last in (False, True):
        runs = []
        for collate in (None, default_collate):
            ds = ShardyardIterableDataset(path, rank=1, world_size=world_size)
            loader = ShardyardLoader(
                ds, batch_size=5, num_workers=2, drop_last=drop_last, collate_fn=collate
            )
            assert loader.batch_size == 5 and loader.drop_last is drop_last
            batches = list(loader)
            runs.append((batches, loader.state_dict()))
        (ours, ours_state), (theirs, theirs_state) = runs
        assert ours_state == theirs_state
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert a["tokens"].dtype == b["tokens"].dtype
            assert a["tokens"].equal(b["tokens"]) and a["sample"].equal(b["sample"])
        assert (len(ours[-1]["sample"]) == 5) is (drop_last or len(ours[-1]["sample"]) == 5)


def test_rank_and_world_size_come_from_the_environment(mixture_path, monkeypatch):
    from shardcore.loader import ShardyardIterableDataset

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds = ShardyardIterableDataset(mixture_path)
    assert (ds.rank, ds.world_size) == (1, 3)
    assert [s["sample"] for s in itertools.islice(iter(ds), 3)] == [1, 4, 7]
    with pytest.raises(InputError, match=r"rank=0, world_size=1 disagree with the environment"):
        ShardyardIterableDataset(mixture_path, rank=0, world_size=1)
    mp = ShardyardIterableDataset(mixture_path, rank=0, world_size=1, check_rank=False)
    assert (mp.rank, mp.world_size) == (0, 1)
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(InputError, match="RANK='one' is not an integer"):
        ShardyardIterableDataset(mixture_path)
    # Given ranks that are not checked do not read the environment.
    ShardyardIterableDataset(mixture_path, rank=1, world_size=2, check_rank=False)
    monkeypatch.delenv("RANK")
    with pytest.raises(InputError, match="sets WORLD_SIZE but not RANK"):
        ShardyardIterableDataset(mixture_path)
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(InputError, match="LOCAL_RANK but not RANK and WORLD_SIZE"):
        ShardyardIterableDataset(mixture_path)


def test_rank_and_world_size_come_from_slurm_after_rank_and_world_size(mixture_path, monkeypatch):
    from shardcore.loader import ShardyardIterableDataset

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    # srun starting one process per rank.
    monkeypatch.setenv("SLURM_PROCID", "2")
    monkeypatch.setenv("SLURM_NTASKS", "3")
    ds = ShardyardIterableDataset(mixture_path)
    assert (ds.rank, ds.world_size) == (2, 3)
    assert [s["sample"] for s in itertools.islice(iter(ds), 3)] == [2, 5, 8]
    with pytest.raises(InputError, match=r"disagree with Slurm \(SLURM_PROCID, SLURM_NTASKS\)"):
        ShardyardIterableDataset(mixture_path, rank=0, world_size=3)
    # RANK and WORLD_SIZE come first; they must agree with Slurm's several tasks.
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert ShardyardIterableDataset(mixture_path).rank == 2
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(
        InputError, match="RANK=1, WORLD_SIZE=3 disagree with Slurm's SLURM_PROCID=2"
    ):
        ShardyardIterableDataset(mixture_path)
    # One Slurm task running torchrun: its ranks are torchrun's.
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert (ShardyardIterableDataset(mixture_path).rank, 4) == (1, 4)
    monkeypatch.delenv("SLURM_NTASKS")
    with pytest.raises(InputError, match="sets SLURM_PROCID but not SLURM_NTASKS"):
        ShardyardIterableDataset(mixture_path)


def _gloo_rank(rank: int, path: str, rendezvous: str, out: str) -> None:
    """One process of a 2-process gloo job reading without rank/world_size."""
    import json

    import torch.distributed as dist

    from shardcore.loader import ShardyardIterableDataset, ShardyardLoader

    early = ShardyardIterableDataset(path)  # made before init_process_group: 0 of 1
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    errors = []
    try:
        next(iter(ShardyardLoader(early, batch_size=4)))
    except InputError as e:
        errors.append(str(e))
    try:
        ShardyardIterableDataset(path, rank=0, world_size=1)
    except InputError as e:
        errors.append(str(e))
    ds = ShardyardIterableDataset(path)
    loader = ShardyardLoader(ds, batch_size=4, num_workers=2)
    samples = [k for batch in loader for k in batch["sample"].tolist()]
    dist.barrier()
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"rank": [ds.rank, ds.world_size], "samples": samples, "errors": errors}, f)
    dist.destroy_process_group()


def test_two_gloo_processes_without_rank_read_disjoint_halves_of_the_epoch(
    mixture_path, tmp_path, monkeypatch
):
    import json

    import torch.multiprocessing as tmp

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "read"
    # Forked, not spawned: two fresh interpreters importing torch would take most of the
    # test's time; a spawned DataLoader worker is covered by the pickling test.
    tmp.start_processes(
        _gloo_rank,
        args=(str(mixture_path), str(tmp_path / "rendezvous"), str(out)),
        nprocs=2,
        join=True,
        start_method="fork",
    )
    ranks = [json.loads((tmp_path / f"read.{r}").read_text()) for r in range(2)]
    n = Mixture(mixture_path).num_samples
    assert [r["rank"] for r in ranks] == [[0, 2], [1, 2]]
    a, b = (set(r["samples"]) for r in ranks)
    assert not a & b and sorted(a | b) == list(range(n))
    for r in ranks:
        made_early, disagreeing = r["errors"]
        assert "reads for rank 0 of 1 (detected when the dataset was made)" in made_early
        assert "torch.distributed says rank" in made_early
        assert "rank=0, world_size=1 disagree with torch.distributed" in disagreeing


def test_a_spawned_dataloader_worker_reads_the_dataset(mixture_path):
    """DataLoader workers started by spawn or forkserver (Python 3.14's default) receive
    the dataset pickled: it reopens its files there and keeps its position and split."""
    from shardcore.loader import ShardyardIterableDataset, ShardyardLoader

    ds = ShardyardIterableDataset(mixture_path, rank=1, world_size=2)
    ds.load_state_dict({**ds.state_dict(), "next_sample": 10})
    loader = ShardyardLoader(ds, batch_size=3, num_workers=1, multiprocessing_context="spawn")
    first = next(iter(loader))
    assert first["sample"].tolist() == [11, 13, 15]
    np.testing.assert_array_equal(first["tokens"][2].numpy(), Mixture(mixture_path).tokens(15))


def test_the_readme_dataloader_recipe_resumes_exactly(mixture_path, tmp_path, monkeypatch):
    """The docs' DataLoader recipe (the one the loader bench measures), run as written
    over a mixture: its own assert checks one epoch, none twice, none missing."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "trainers.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    (script,) = [b for b in blocks if "isinstance(loader, torch.utils.data.DataLoader)" in b]
    (tmp_path / "mixes").mkdir()
    (tmp_path / "mixes" / "prose-code").symlink_to(mixture_path)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(script, "docs/trainers.md", "exec"), scope)
    assert scope["checkpoint"]["data"]["next_sample"] == 24


def test_a_checkpoint_between_the_batches_of_one_worker_transfer_resumes_exactly(
    mixture_path, monkeypatch
):
    """Workers hand over 4 batches at a time: a state taken after batch 6 (inside the
    second transfer) resumes at the next sample; both runs together are one epoch."""
    from shardcore.loader import ShardyardIterableDataset, ShardyardLoader, torch_data

    monkeypatch.setattr(torch_data, "_TRANSFER", 4 * BATCH * (MIX_SEQ + 1) * 8)
    ds = ShardyardIterableDataset(mixture_path, rank=0, world_size=2)
    loader = ShardyardLoader(ds, batch_size=BATCH, num_workers=2)
    assert ds._group == 4
    seen = []
    for step, batch in enumerate(loader):
        seen += batch["sample"].tolist()
        if step == 5:
            break
    assert seen == list(range(0, 2 * 6 * BATCH, 2))  # rank 0's samples in order
    state = loader.state_dict()
    assert state["next_sample"] == 2 * 6 * BATCH
    for r in range(2):
        resumed = ShardyardIterableDataset(mixture_path, rank=r, world_size=2)
        resumed.load_state_dict(state)
        seen += [k for b in ShardyardLoader(resumed, batch_size=BATCH, num_workers=2)
                 for k in b["sample"].tolist()]  # fmt: skip
    n = Mixture(mixture_path).num_samples
    rank1_head = list(range(1, 2 * 6 * BATCH, 2))  # rank 1 read these before the stop
    assert sorted(seen + rank1_head) == list(range(n))


@pytest.mark.parametrize("plain", [True, False])
def test_persistent_workers_refuse_a_state_loaded_after_they_started(mixture_path, plain):
    """Persistent workers keep the dataset they were given: a state loaded into it after
    they started is refused (they would read from sample 0 again while the books say 24),
    naming persistent_workers; a new DataLoader after load_state_dict resumes exactly."""
    import torch

    from shardcore.loader import ShardyardIterableDataset, ShardyardLoader

    n = Mixture(mixture_path).num_samples
    ds = ShardyardIterableDataset(mixture_path, batch_size=8)
    make = torch.utils.data.DataLoader if plain else ShardyardLoader
    loader = make(ds, batch_size=8, num_workers=2, persistent_workers=True)
    seen = []
    for step, batch in enumerate(loader):
        seen.extend(batch["sample"].tolist())
        if step == 2:
            break
    state = ds.state_dict(received=batch) if plain else loader.state_dict()
    assert state["next_sample"] == 24
    ds.load_state_dict(state)
    with pytest.raises(InputError, match=r"persistent_workers=True.*Create a new DataLoader"):
        next(iter(loader))
    again = make(ds, batch_size=8, num_workers=2, persistent_workers=True)
    for batch in again:
        seen.extend(batch["sample"].tolist())
    assert len(seen) == len(set(seen)) == n
    assert sorted(seen) == list(range(n))
    # Another pass without a load: the persistent workers read again from the state.
    assert [k for b in again for k in b["sample"].tolist()] == list(range(24, n))

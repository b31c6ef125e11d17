"""The loader: numpy readers, and one torch streaming loader for pools, mixtures and
materialized mixtures that tracks its own consumption and resumes exactly in any world size."""

from __future__ import annotations

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
    """Samples one rank's DataLoader returns, as (global index, tokens) pairs."""
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
    return ds, out


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
        ds, head = _run(
            pool_path, rank=r, world_size=world_size, workers=workers, seed=seed, limit=k
        )
        assert [s for s, _ in head[:k]] == [s for s, _ in full[r][:k]]
        states.append(ds.state_dict(consumed=k))
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
    with pytest.raises(InputError, match="'tokenized' artifact has no training samples"):
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
    for step, _ in enumerate(loader):
        if step == 2:
            break
    with pytest.raises(InputError, match="read by DataLoader workers"):
        ds.state_dict()
    assert ds.state_dict(consumed=3 * BATCH)["next_sample"] == 3 * BATCH


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

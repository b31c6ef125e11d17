"""The pool loader: numpy reader, and a torch IterableDataset that resumes exactly."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from shardcore.errors import InputError
from shardcore.loader import PoolReader, sample_order
from shardcore.pool import Pool, build_pool
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
    state = {**ds.state_dict(), "pool": "0" * 32}
    with pytest.raises(InputError, match="loader state is for pool"):
        ds.load_state_dict(state)


def test_it_imports_shardcore_loader_without_torch():
    code = "import sys, shardcore.loader; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0

"""The greedy_block ordering's vectors of a window's samples, read by range
(shardcore.order.windowed), equal the whole pools' vectors taken at those samples' rows:
same characteristics, same slots, same tokens, for samples of every pool, epoch 0 in order
and repeats anywhere, with and without properties and length bins."""

from __future__ import annotations

import numpy as np
import pytest

from shardcore.mixture import MixtureSpec, load_pools
from shardcore.order import recipe
from shardcore.order.windowed import pool_families, sample_characteristics
from shardcore.pool import PoolReader
from tests.unit import mix_fixtures

SEQ = 64


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    built = mix_fixtures.build_pools(tmp_path_factory.mktemp("pools"), seq_len=SEQ)
    spec = MixtureSpec.from_dict(
        mix_fixtures.three_pool_spec(built, seq_len=SEQ, samples=1000, anneal_samples=100, seed=1)
    )
    return [p.path for p in load_pools(spec)]


@pytest.mark.parametrize(
    "options",
    [{}, {"by": ["package"]}, {"by": ["package"], "length_bins": False}, {"length_bins": 7}],
)
def test_a_windows_vectors_equal_the_whole_pools_at_its_rows(pools, options):
    bins = options.get("length_bins", True)
    bins = 100 if bins is True else (int(bins) if bins else None)
    whole = recipe.pool_characteristics(
        pools, by=list(options.get("by") or []), length_bins_count=bins
    )
    fam = pool_families(pools, options)
    assert fam.width == whole.idx.shape[1]
    sizes = np.array([PoolReader(p).num_records for p in pools])
    rng = np.random.default_rng(7)
    for n in (1, 300, 4_000):
        pool_of = rng.integers(0, len(pools), n)
        record = rng.integers(0, sizes[pool_of])
        record[: n // 2] = np.minimum(np.arange(n // 2), sizes[pool_of[: n // 2]] - 1)
        got = sample_characteristics(fam, pool_of, record)
        want = whole.take(fam.first[pool_of] + record)
        assert got.families == want.families and got.names == want.names
        assert np.array_equal(got.family_of, want.family_of)
        assert got.idx.dtype == want.idx.dtype and np.array_equal(got.idx, want.idx)
        assert got.val.dtype == want.val.dtype and np.array_equal(got.val, want.val)

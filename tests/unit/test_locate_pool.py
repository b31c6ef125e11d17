"""Resume positions: locate agrees with a brute-force scan, at any position."""

from __future__ import annotations

import numpy as np
import pytest

from shardcore.errors import InputError
from shardcore.locate import cyclic_shard_order, locate_pool
from shardcore.pool import Pool, build_pool
from tests.unit import pool_fixtures as pf


def _scan(pool: Pool) -> list[tuple[int, int]]:
    """Walk every shard record by record: (shard, record in shard) of each sample, found
    without the manifest's arithmetic."""
    return [(shard, r) for shard in range(pool.num_shards) for r in range(len(pool.reader(shard)))]


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> Pool:
    root = tmp_path_factory.mktemp("resume")
    src = pf.write_tokenized(root / "src", pf.corpus("prose", 800), shard_docs=200)
    build_pool([str(src)], str(root / "p"), seq_len=31, memory=1 << 20, shard_size=20_000)
    return Pool(root / "p")


def test_it_locates_every_sample_where_a_scan_finds_it(pool):
    assert pool.num_shards > 3
    scan = _scan(pool)
    assert len(scan) == pool.num_records
    for sample in range(pool.num_records):
        where = pool.locate(sample=sample)
        assert (where["shard"], where["record_in_shard"]) == scan[sample]
        assert where["record"] == sample and where["token_offset"] == 0
        shard = pool.manifest["shards"][where["shard"]]
        assert where["shard_prefix"] == shard["prefix"]
        assert np.array_equal(
            pool.reader(where["shard"])[where["record_in_shard"]], pool.record(sample)
        )


def test_it_locates_token_positions_by_samples_of_seq_len_tokens(pool):
    scan = _scan(pool)
    for tokens in (0, 1, 30, 31, 32, 31 * 17 + 5, 31 * pool.num_records - 1):
        where = pool.locate(tokens=tokens)
        assert where["record"] == tokens // 31 and where["token_offset"] == tokens % 31
        assert (where["shard"], where["record_in_shard"]) == scan[tokens // 31]


def test_it_locates_in_a_manifest_of_100000_shards_like_searchsorted():
    rng = np.random.default_rng(0)
    records = rng.integers(1, 2000, size=100_000)
    cumulative = np.concatenate([[0], np.cumsum(records)])
    manifest = {
        "seq_len": 2048,
        "cumulative_records": cumulative.tolist(),
        "shards": [{"prefix": f"shards/pool-{i:05d}"} for i in range(records.size)],
    }
    for sample in [0, 1, int(cumulative[-1]) - 1, *rng.integers(0, cumulative[-1], 200).tolist()]:
        where = locate_pool(manifest, sample=sample)
        shard = int(np.searchsorted(cumulative, sample, side="right")) - 1
        assert where["shard"] == shard
        assert where["record_in_shard"] == sample - cumulative[shard] < records[shard]


@pytest.mark.parametrize(
    "kwargs", [{"sample": -1}, {"sample": 10**9}, {"tokens": -5}, {}, {"sample": 1, "tokens": 1}]
)
def test_it_refuses_positions_outside_the_pool(pool, kwargs):
    with pytest.raises(InputError):
        pool.locate(**kwargs)


def test_it_orders_shards_cyclically_from_the_resume_shard():
    assert cyclic_shard_order(5, 2).tolist() == [2, 3, 4, 0, 1]
    assert cyclic_shard_order(5, 0).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(InputError, match="start shard 5 outside"):
        cyclic_shard_order(5, 5)


def test_the_step_of_a_sample_comes_from_the_run_reports():
    from shardcore.flagged_reads import step_of_sample

    reports = [(10, 80), (20, 160), (25, 230)]  # 8 samples per step, then 14
    assert step_of_sample(0, reports)["step"] == 1
    assert step_of_sample(79, reports) == {
        "read": True, "after_step": 0, "by_step": 10, "exact": True, "step": 10
    }  # fmt: skip
    assert step_of_sample(80, reports)["step"] == 11
    assert step_of_sample(229, reports)["step"] == 25
    assert step_of_sample(230, reports) == {"read": False, "consumed_samples": 230, "step": 25}
    # 70 samples over 3 steps between two reports: only bounds, not a step.
    uneven = step_of_sample(100, [(10, 80), (13, 150)])
    assert (uneven["exact"], uneven["after_step"], uneven["by_step"]) == (False, 10, 13)

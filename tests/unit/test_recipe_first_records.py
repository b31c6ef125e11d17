"""The recipe's measurement of a pool's first records (``pool_characteristics`` with a
``limit``) reads those records' documents by row range and every document's values in
streamed passes, and gives what the whole pool's columns gave: the same characteristics
(every value a family takes over the pool, the length bins from every document's length)
and the same documents to shuffle; numpy's quantiles from counts, to the bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shardcore.order import recipe
from shardcore.order.quantiles import quantiles_of_counts
from shardcore.pool import PoolReader, build_pool
from tests.unit import pool_fixtures as pf


@pytest.mark.parametrize("n", [1, 2, 3, 10, 999, 12_345])
@pytest.mark.parametrize("bins", [1, 2, 7, 20, 100])
def test_quantiles_of_counts_are_numpys(n, bins):
    rng = np.random.default_rng(n * 101 + bins)
    for high in (1, 5, 3000):
        values = rng.integers(0, high, n)
        q = np.arange(1, bins) / bins
        got = quantiles_of_counts(np.bincount(values), q)
        assert got.tobytes() == np.quantile(values.astype(np.float64), q).tobytes()


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("first-records")
    prose = pf.write_tokenized(root / "prose", pf.corpus("prose", 900), shard_docs=300, name="p")
    code = pf.write_tokenized(root / "code", pf.corpus("code", 40), shard_docs=20, name="c")
    out = root / "pool"
    build_pool([str(prose), str(code)], str(out), seq_len=64, memory=1 << 20, shard_size=90_000)
    return out


def _by_record(ch: recipe.Characteristics) -> dict[tuple[int, str], float]:
    names = [f"{ch.families[f]}={v}" for f, vs in enumerate(ch.names) for v in vs]
    out = {}
    for r in range(ch.num_records):
        for i, v in zip(ch.idx[r].tolist(), ch.val[r].tolist(), strict=True):
            if i >= 0:
                out[(r, names[i])] = v
    return out


@pytest.mark.parametrize("by", [[], ["kind"], ["_doc.source", "kind"]])
def test_the_first_records_have_the_whole_pools_characteristics(pool, by):
    reader = PoolReader(pool)
    assert len(reader.manifest["shards"]) > 2
    whole = recipe.pool_characteristics([reader], by=by, length_bins_count=20)
    # Every record: the whole pool's own characteristics, exactly.
    every = recipe.pool_characteristics([reader], by=by, length_bins_count=20, limit=10**9)
    for field in ("idx", "val", "family_of"):
        assert np.array_equal(getattr(every, field), getattr(whole, field))
    assert (every.families, every.names) == (whole.families, whole.names)
    # The first records: the same values' characteristics (those no record holds too),
    # the same counts per record.
    limit = 37
    first, docs = recipe.pool_characteristics(
        [PoolReader(pool, ranged=True)], by=by, length_bins_count=20, limit=limit, documents=True
    )
    assert (first.families, first.names) == (whole.families, whole.names)
    want = {k: v for k, v in _by_record(whole).items() if k[0] < limit}
    assert first.num_records == limit and _by_record(first) == want
    # The documents those records hold, with their labels and lengths.
    held = docs["lengths"].size
    lengths = reader.document_values("_doc.n_tokens")[:held]
    assert np.array_equal(docs["lengths"], lengths)
    for name in by:
        assert np.array_equal(
            docs["families"][name], reader.document_values(name)[:held].astype(str)
        )
    bins = recipe.length_bins(reader.document_values("_doc.n_tokens"), 20)
    assert np.array_equal(docs["families"]["length"], bins[:held])


def test_a_pool_of_small_documents_is_measured_on_the_records_holding_a_bounded_number(pool):
    """``records_holding``: the first records whose segments number at most the cap (from
    the shards' segments, across shard boundaries); the recipe's report of a pool stops
    there, and measures every record when the cap is above the pool's documents."""
    from shardcore import quality

    reader = PoolReader(pool)
    counts = np.concatenate(
        [
            np.diff(reader.segments(s).seg_record_offsets)
            for s in range(len(reader.manifest["shards"]))
        ]
    )
    cum = np.cumsum(counts)
    first_shard = int(reader.cumulative[1])
    for cap in (1, 50, int(cum[first_shard - 1]) + 3, int(cum[-1]) - 1):
        got = reader.records_holding(cap)
        assert got == max(1, int(np.searchsorted(cum, cap, "right")))
        assert cum[got - 1] <= cap or got == 1
    assert reader.records_holding(int(cum[-1])) == reader.num_records
    capped = quality.recipe_quality(str(pool), max_documents=int(cum[99]))["order"]
    whole = quality.recipe_quality(str(pool), max_documents=10**9)["order"]
    assert capped["num_records"] == 100 < whole["num_records"] == reader.num_records


def test_document_columns_are_read_a_row_group_at_a_time_in_order(tmp_path):
    """The documents table's batches come a row group at a time (the reader would
    otherwise pre-buffer every row group's column chunks at once), all rows in order, or
    those of the row groups asked for."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardcore.pool.reader import _row_group_batches

    path = tmp_path / "docs.parquet"
    values = np.arange(10_000, dtype=np.int64)
    pq.write_table(pa.table({"a": values, "b": values * 2}), path, row_group_size=1_500)
    pf = pq.ParquetFile(path)
    assert pf.metadata.num_row_groups == 7
    got = [b.column("a").to_numpy() for b in _row_group_batches(pf, None, 1_000, ["a"])]
    assert max(len(x) for x in got) == 1_000 and np.array_equal(np.concatenate(got), values)
    some = [b.column("a").to_numpy() for b in _row_group_batches(pf, [2, 3], 4_000, ["a"])]
    assert np.array_equal(np.concatenate(some), values[3_000:6_000])

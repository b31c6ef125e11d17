"""``IndexSet`` (which values are among sorted indices: a bit table when dense, binary search
of the values in order when sparse) and ``sorted_distinct`` answer as numpy's ``isin`` and
``unique`` do, on dense, sparse, unsorted, repeated, negative and out-of-range input."""

from __future__ import annotations

import numpy as np
import pytest

from shardcore.mixture.reader import IndexSet, flagged_indices, sorted_distinct


@pytest.mark.parametrize(
    ("count", "span", "dense"),
    [(0, 10, False), (1, 1, True), (5_000, 10_000, True), (5_000, 10**7, False),
     (100_000, 1_000_000, True), (1_000, 10**9, False), (3, 2**62, False)],
)  # fmt: skip
def test_it_answers_as_isin_both_ways(count, span, dense):
    rng = np.random.default_rng(count + span % 97)
    given = rng.integers(0, span, count)
    ids = IndexSet(np.concatenate([given, given[: count // 3]]))  # repeats, unsorted
    assert (ids.bits is not None) == dense
    np.testing.assert_array_equal(ids.ids, np.unique(given))
    values = np.concatenate(
        [rng.integers(-5, min(span, 2**62) + 5, 50_000), given[:1_000], [-1, span, span + 1]]
    )
    rng.shuffle(values)
    np.testing.assert_array_equal(ids(values), np.isin(values, given))
    np.testing.assert_array_equal(ids(values.reshape(-1, 1))[:, 0], np.isin(values, given))


def test_sorted_distinct_and_flagged_indices():
    rng = np.random.default_rng(1)
    a = rng.integers(-100, 10**6, 200_000)
    np.testing.assert_array_equal(sorted_distinct(a), np.unique(a))
    already = np.unique(a)
    assert sorted_distinct(already) is already or np.shares_memory(
        sorted_distinct(already), already
    )
    mask = np.zeros(1_000, dtype=bool)
    mask[[3, 999, 500]] = True
    np.testing.assert_array_equal(flagged_indices(mask), [3, 500, 999])
    np.testing.assert_array_equal(flagged_indices([999, 3, 500, 3]), [3, 500, 999])
    assert flagged_indices(np.zeros(0, dtype=np.int64)).size == 0

"""Invariants of every registered shuffle, and the exact shuffle's uniformity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shardcore.errors import InputError
from shardcore.shuffle import SHUFFLES, get_shuffle

COUNTS = [np.array(c) for c in ([5], [5, 7, 3, 9], [0, 4, 0, 11], [1, 1, 1], [40, 1, 17])]


def _chi2_critical(df: int, z: float = 4.75) -> float:
    """Wilson-Hilferty upper quantile of chi-square(df); z=4.75 is p ~ 1e-6."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _position_chi2(name: str, counts: np.ndarray, buckets: int, trials: int, **options) -> float:
    """Chi-square of the (item, output position) table over ``trials`` seeds."""
    module = get_shuffle(name)
    n = int(counts.sum())
    table = np.zeros((n, n))
    for seed in range(trials):
        order = module.permutation(
            counts, seed, module.num_buckets(counts, buckets, **options), **options
        )
        table[order, np.arange(n)] += 1
    expected = trials / n
    return float(((table - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("name", sorted(SHUFFLES))
@pytest.mark.parametrize("counts", COUNTS, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("buckets", [1, 3, 8])
def test_it_returns_a_permutation_for_every_shuffle(name, counts, buckets):
    module = get_shuffle(name)
    k = module.num_buckets(counts, buckets)
    order = module.permutation(counts, 7, k)
    assert sorted(order.tolist()) == list(range(int(counts.sum())))


@pytest.mark.parametrize("name", sorted(SHUFFLES))
def test_it_gives_the_same_order_for_the_same_seed_and_another_for_another(name):
    module = get_shuffle(name)
    counts = np.array([300, 200, 500])
    k = module.num_buckets(counts, 4, buffer=16)
    a = module.permutation(counts, 1, k, buffer=16)
    assert np.array_equal(a, module.permutation(counts, 1, k, buffer=16))
    assert not np.array_equal(a, module.permutation(counts, 2, k, buffer=16))


def test_it_computes_each_pass_1_shard_independently_of_the_others():
    module = get_shuffle("exact")
    counts = np.array([10, 20, 30])
    b1, _ = module.assign(counts, 1, 5, 4)
    b1_again, _ = module.assign(np.array([99, 20, 1]), 1, 5, 4)
    assert np.array_equal(b1, b1_again)


@pytest.mark.parametrize("counts,buckets", [([2, 3, 1], 3), ([6], 1), ([1, 1, 1, 1, 1, 1], 4)])
def test_it_places_every_item_at_every_position_uniformly_with_the_exact_shuffle(counts, buckets):
    counts = np.array(counts)
    n = int(counts.sum())
    stat = _position_chi2("exact", counts, buckets, trials=3000)
    assert stat < _chi2_critical((n - 1) ** 2)


def test_it_draws_every_permutation_equally_often_with_the_exact_shuffle():
    module = get_shuffle("exact")
    counts = np.array([1, 2, 1])
    seen: dict[tuple, int] = {}
    trials = 2400  # 24 permutations of 4 items, 100 expected each
    for seed in range(trials):
        key = tuple(module.permutation(counts, seed, 2).tolist())
        seen[key] = seen.get(key, 0) + 1
    assert len(seen) == 24
    observed = np.array(list(seen.values()), dtype=float)
    stat = float(((observed - 100) ** 2 / 100).sum())
    assert stat < _chi2_critical(23)


@pytest.mark.parametrize("name,options", [("local", {}), ("buffer", {"buffer": 2})])
def test_it_detects_that_the_baseline_shuffles_are_not_uniform(name, options):
    # The uniformity test above can fail: it rejects the shuffles that are not uniform.
    # (The grid shuffle is uniform position by position; its bias is joint, tested below.)
    counts = np.array([3, 3])
    stat = _position_chi2(name, counts, 1, trials=3000, **options)
    assert stat > _chi2_critical(25)


def test_it_never_puts_two_documents_of_one_column_next_to_each_other_in_a_grid_row():
    # The exact shuffle does in 60% of shuffles (1 - 3!3!2^3/6!): the grid's
    # joint bias, visible where its marginals are uniform.
    counts = np.array([3, 3])
    grid, exact = get_shuffle("grid"), get_shuffle("exact")
    together = {"grid": 0, "exact": 0}
    for seed in range(300):
        for name, module in (("grid", grid), ("exact", exact)):
            rows = module.permutation(counts, seed, 1).reshape(3, 2) // 3
            together[name] += int((rows[:, 0] == rows[:, 1]).any())
    assert together["grid"] == 0
    assert together["exact"] > 150


def test_it_keeps_each_grid_row_to_one_document_per_column():
    module = get_shuffle("grid")
    counts = np.array([4, 4, 4])  # 3 columns of 4 rows
    order = module.permutation(counts, 3, 2)
    rows = order.reshape(4, 3)
    for row in rows:
        assert sorted((row // 4).tolist()) == [0, 1, 2]


def test_it_moves_no_document_further_back_than_the_buffer_allows():
    module = get_shuffle("buffer")
    counts = np.array([1000])
    order = module.permutation(counts, 0, 1, buffer=10)
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    # An item is emitted at the earliest once the buffer is full ahead of it.
    assert (position >= np.arange(order.size) - 10).all()
    assert not np.array_equal(order, np.arange(order.size))


def test_it_names_the_known_shuffles_for_an_unknown_one():
    with pytest.raises(InputError, match="unknown shuffle 'perfect'.*exact, grid, local, buffer"):
        get_shuffle("perfect")

"""Every shuffle's ``head`` is its ``permutation``'s first positions, exactly, and
``draws.permutation_head`` is numpy's ``permutation``'s (the replayed swaps)."""

from __future__ import annotations

import numpy as np
import pytest

from shardcore.shuffle import SHUFFLES, rng
from shardcore.shuffle.draws import permutation_head

SHAPES = [[10, 20, 30], [1000, 1, 500], [5000] * 7, [3] * 40, [3000], [1, 1], [700, 0, 90]]


def _buckets(name: str, counts: np.ndarray) -> list[int]:
    module = SHUFFLES[name]
    ks = {module.num_buckets(counts, max(2, len(counts))), module.num_buckets(counts, 3)}
    return sorted(ks)


@pytest.mark.parametrize("name", list(SHUFFLES))
@pytest.mark.parametrize("seed", [0, 5, 1234])
def test_it_gives_the_permutations_first_positions(name, seed):
    module = SHUFFLES[name]
    for shape in SHAPES:
        counts = np.array(shape)
        for k in _buckets(name, counts):
            full = module.permutation(counts, seed, k)
            for n in sorted({0, 1, 17, full.size // 3, full.size - 1, full.size}):
                got = module.head(counts, seed, k, n)
                assert np.array_equal(got, full[:n]), (shape, k, n)


@pytest.mark.parametrize("options", [{"buffer": 16}, {"buffer": 1}])
def test_it_keeps_the_buffer_option(options):
    counts = np.array([400, 300])
    full = SHUFFLES["buffer"].permutation(counts, 9, 2, **options)
    assert np.array_equal(SHUFFLES["buffer"].head(counts, 9, 2, 250, **options), full[:250])


def test_it_keeps_the_grid_columns_option():
    counts = np.array([400, 300, 37])
    full = SHUFFLES["grid"].permutation(counts, 9, 4, columns=5)
    assert np.array_equal(SHUFFLES["grid"].head(counts, 9, 4, 333, columns=5), full[:333])


@pytest.mark.parametrize("seed", [0, 1, 1234])
@pytest.mark.parametrize(
    ("m", "r"), [(1000, 100), (5000, 7), (777, 1), (3000, 1499), (100_000, 3000), (700, 0)]
)
def test_it_replays_numpys_permutation_in_blocks(seed, m, r):
    # Blocks of 64 swaps: the trace crosses many blocks and masks.
    got = permutation_head(seed, (2, 3), m, r, block=64)
    assert np.array_equal(got, rng(seed, 2, 3).permutation(m)[:r])

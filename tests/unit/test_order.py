"""Orderings: the diversity ordering is a permutation, makes the greedy choice of its
objective (``shardcore.order.diversity``) at every step, and beats a random shuffle on real
text."""

from __future__ import annotations

import numpy as np
import pytest

from shardcore import order, quality
from shardcore.errors import InputError
from shardcore.order import diversity
from shardcore.pool import Pool
from tests.unit import mix_fixtures


@pytest.fixture(scope="module")
def real_labels(tmp_path_factory) -> dict[str, np.ndarray]:
    pools = mix_fixtures.build_pools(tmp_path_factory.mktemp("pools"))
    pool = Pool(pools["middle"])
    labels = {
        "package": pool.record_labels("package"),
        "length": mix_fixtures.length_bins(pool),
    }
    # Pool order groups records of one document together; start from that order.
    return labels


def _replay_is_greedy(families: list[np.ndarray], lam: list[float], perm: np.ndarray) -> bool:
    """Replays the order and checks each pick minimizes the diversity objective among the
    sequences still unplaced (brute force over all of them)."""
    codes = [np.unique(f, return_inverse=True)[1].ravel() for f in families]
    m = perm.size
    tau = [np.bincount(c) / m for c in codes]
    placed = [np.zeros(t.size) for t in tau]
    unplaced = np.ones(m, dtype=bool)
    for step, chosen in enumerate(perm):

        def objective(s: np.ndarray, step: int = step) -> np.ndarray:
            total = np.zeros(s.size)
            for f, c in enumerate(codes):
                t = placed[f][None, :] + (c[s][:, None] == np.arange(tau[f].size)[None, :])
                total += lam[f] * ((t - tau[f][None, :] * (step + 1)) ** 2).sum(axis=1)
            return total

        candidates = np.flatnonzero(unplaced)
        scores = objective(candidates)
        if objective(np.array([chosen]))[0] > scores.min() + 1e-9:
            return False
        unplaced[chosen] = False
        for f, c in enumerate(codes):
            placed[f][c[chosen]] += 1
    return True


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_it_makes_the_greedy_choice_at_every_step(seed):
    rng = np.random.default_rng(seed)
    m = 300
    families = [rng.integers(0, 7, m), rng.zipf(1.6, m) % 40, rng.integers(0, 5, m)]
    lam = [1.0, 1.0, 0.5]
    perm = diversity.diversity_order(families, weights=lam, seed=seed)
    assert np.array_equal(np.sort(perm), np.arange(m))
    assert _replay_is_greedy(families, lam, perm)


def test_it_agrees_with_the_numpy_path_on_the_objective():
    rng = np.random.default_rng(7)
    families = [rng.integers(0, 30, 400), rng.integers(0, 6, 400)]
    perm = diversity._diversity_numpy(families, seed=3)
    assert np.array_equal(np.sort(perm), np.arange(400))
    assert _replay_is_greedy(families, [1.0, 1.0], perm)


def test_it_is_a_seeded_permutation(real_labels):
    fams = [real_labels["package"], real_labels["length"]]
    a = diversity.diversity_order(fams, seed=5)
    b = diversity.diversity_order(fams, seed=5)
    c = diversity.diversity_order(fams, seed=6)
    assert np.array_equal(np.sort(a), np.arange(a.size))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_it_beats_a_random_shuffle_on_real_text(real_labels):
    packages, lengths = real_labels["package"], real_labels["length"]
    assert len(set(packages.tolist())) >= 8
    perm = order.get_ordering("diversity")({"package": packages, "length": lengths}, seed=0)
    shuffled = order.get_ordering("random")({"package": packages}, seed=0)
    for labels in (packages, lengths):
        ours = quality.window_deviation(labels[perm], [256, 1024])["max_all"]
        theirs = quality.window_deviation(labels[shuffled], [256, 1024])["max_all"]
        for o, t in zip(ours, theirs, strict=True):
            assert o <= 0.25 * t
    ours_b = quality.batch_diversity(packages[perm], 64)
    theirs_b = quality.batch_diversity(packages[shuffled], 64)
    assert ours_b["worst"] > theirs_b["worst"]


def test_it_returns_the_identity_for_the_blend_order():
    labels = {"pool": np.array([0, 1, 0, 1])}
    assert order.get_ordering("blend")(labels).tolist() == [0, 1, 2, 3]


def test_it_rejects_an_unknown_ordering_and_bad_lambdas():
    with pytest.raises(InputError, match="unknown ordering 'sorted'"):
        order.get_ordering("sorted")
    with pytest.raises(InputError, match="weights"):
        diversity.diversity_order([np.zeros(3), np.zeros(3)], weights=[1.0, -1.0])
    with pytest.raises(InputError, match="differ in length"):
        diversity.diversity_order([np.zeros(3), np.zeros(4)])

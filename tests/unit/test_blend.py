"""The blend schedule equals megatron-core's build_blending_indices and keeps every window
within the proportion tolerance it guarantees."""

from __future__ import annotations

import numpy as np
import pytest

from shardcore import blend, kernels
from shardcore.errors import InputError

helpers_cpp = pytest.importorskip("megatron.core.datasets.helpers_cpp")


def _megatron(weights: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    di = np.zeros(size, dtype=np.int16)
    si = np.zeros(size, dtype=np.int64)
    helpers_cpp.build_blending_indices(di, si, weights, weights.size, size, False)
    return di, si


def _weight_sets() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    sets = [
        [0.5, 0.5],
        [0.999, 0.001],
        [0.001, 0.999],
        [1 / 3, 1 / 3, 1 / 3],
        [0.7 * 0.8, 0.7 * 0.2, 0.3],
        [1.0],
        list(np.full(20, 1 / 20)),
        list(np.full(7, 1 / 7)),
    ]
    for d in (2, 3, 5, 8, 13, 20, 32, 33, 40):
        for power in (1, 4):
            sets.append(list(rng.random(d) ** power + 1e-4))
    return [blend.normalize(w) for w in sets]


@pytest.mark.parametrize("weights", _weight_sets(), ids=lambda w: f"{w.size}pools")
def test_it_equals_megatron_build_blending_indices(weights):
    size = 40_000
    ours = blend.build_blending_indices(weights, size, normalized=False)
    theirs = _megatron(weights, size)
    assert ours[0].dtype == np.int16 and ours[1].dtype == np.int64
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])


def test_it_equals_megatron_across_chunk_boundaries_on_twenty_pools(monkeypatch):
    monkeypatch.setattr(blend, "_CHUNK", 997)
    weights = blend.normalize(np.random.default_rng(1).random(20) + 0.01)
    ours = blend.build_blending_indices(weights, 25_000, normalized=False)
    theirs = _megatron(weights, 25_000)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])


@pytest.mark.parametrize("weights", [[1.0], [0.5, 0.3, 0.2], [3.0, 1.0, 0.25, 7.5, 2.0]])
def test_one_sample_of_the_schedule_is_the_sample_of_the_whole_schedule(monkeypatch, weights):
    monkeypatch.setattr(blend, "_PICK_CHUNK", 1000)  # many chunks, one partly used
    blend._blend_at.cache_clear()
    index, sample_index = blend.build_blending_indices(weights, 7_001)
    for sample in (0, 1, 2, 999, 1000, 1001, 4321, 7_000):
        assert blend.blend_at(weights, sample) == (index[sample], sample_index[sample])
    with pytest.raises(InputError, match="sample"):
        blend.blend_at(weights, -1)
    with pytest.raises(InputError, match="positive"):
        blend.blend_at([1.0, 0.0], 3)


def test_it_equals_megatron_on_unnormalized_weights_when_asked():
    weights = np.array([3.0, 1.0, 0.25])
    ours = blend.build_blending_indices(weights, 5_000, normalized=False)
    theirs = _megatron(weights, 5_000)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])


def test_it_matches_the_python_reference_loop():
    weights = blend.normalize([0.2, 0.5, 0.3, 0.05])
    di = np.empty(3000, np.int16)
    si = np.empty(3000, np.int64)
    blend._blend_python(weights, 0, np.zeros(4, np.int64), di, si)
    ours = blend.build_blending_indices(weights, 3000, normalized=False)
    np.testing.assert_array_equal(ours[0], di)
    np.testing.assert_array_equal(ours[1], si)


def _max_window_deviation(di: np.ndarray, weights: np.ndarray, window: int) -> float:
    counts = np.zeros((di.size + 1, weights.size), dtype=np.int64)
    counts[1:] = np.cumsum(np.eye(weights.size, dtype=np.int64)[di], axis=0)
    in_window = counts[window:] - counts[:-window]
    return float(np.abs(in_window - weights[None, :] * window).max())


@pytest.mark.parametrize("d", [2, 3, 8, 20])
def test_it_keeps_every_window_within_the_guaranteed_tolerance(d):
    rng = np.random.default_rng(d)
    weights = blend.normalize(rng.random(d) ** 3 + 1e-3)
    di, _ = blend.build_blending_indices(weights, 30_000)
    tolerance = blend.window_tolerance(weights)
    for window in (1, 7, 64, 1000, 4096):
        assert _max_window_deviation(di, weights, window) <= tolerance
    # The bound is not vacuous: a random order of the very same samples breaks it.
    shuffled = rng.permutation(di)
    assert _max_window_deviation(shuffled, weights, 4096) > tolerance


def test_it_keeps_a_999_to_1_blend_within_one_sample_per_window():
    weights = blend.normalize([0.999, 0.001])
    di, si = blend.build_blending_indices(weights, 50_000)
    assert _max_window_deviation(di, weights, 1000) <= 1 + 1e-6
    assert np.bincount(di).tolist() == [49_950, 50]
    # Per pool, the sample indices are 0, 1, 2, ... in order.
    for d in range(2):
        np.testing.assert_array_equal(si[di == d], np.arange((di == d).sum()))


@pytest.mark.parametrize(
    "weights, message",
    [
        ([0.5, 0.0], r"weights\[1\]"),
        ([1.0, -2.0], "positive"),
        ([], "non-empty"),
        ([float("nan")], "positive"),
    ],
)
def test_it_rejects_bad_weights_naming_the_field(weights, message):
    with pytest.raises(InputError, match=message):
        blend.build_blending_indices(weights, 10)


def test_it_falls_back_when_no_compiler_exists(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(kernels.tempfile, "tempdir", None)
    monkeypatch.setattr(kernels, "_kernels", {})
    weights = blend.normalize([0.6, 0.3, 0.1])
    with pytest.warns(RuntimeWarning, match="kernel unavailable"):
        via_megatron = blend.build_blending_indices(weights, 2000, normalized=False)
    monkeypatch.setattr(blend, "_megatron_helper", lambda: None)
    via_python = blend.build_blending_indices(weights, 2000, normalized=False)
    theirs = _megatron(weights, 2000)
    for ours in (via_megatron, via_python):
        np.testing.assert_array_equal(ours[0], theirs[0])
        np.testing.assert_array_equal(ours[1], theirs[1])

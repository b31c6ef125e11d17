"""Quality metrics agree with brute force over every window and behave as the theory says."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardcore import quality, window_deviation
from shardcore.errors import InputError


def _brute(labels: np.ndarray, n: int, q: float) -> tuple[np.ndarray, np.ndarray]:
    codes, names = quality.encode_labels(labels)
    k, m = len(names), codes.size
    p = np.bincount(codes, minlength=k) / m
    onehot = np.eye(k)[codes]
    windows = np.array([onehot[a : a + n].sum(axis=0) for a in range(m - n + 1)])
    dev = np.abs(windows / n - p)
    srt = np.sort(dev, axis=0)
    total = m - n + 1
    idx = int(np.searchsorted(np.arange(1, total + 1), q * total))
    return dev.max(axis=0), srt[min(idx, total - 1)]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [1, 2, 5, 16, 33])
def test_it_matches_a_brute_force_scan_of_every_window(seed, n):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 6))
    labels = rng.choice(k, size=int(rng.integers(n, 120)), p=rng.dirichlet(np.ones(k)))
    result = quality.window_deviation(labels, [n])
    mx, p99 = _brute(labels, n, 0.99)
    np.testing.assert_allclose(result["max"][0], mx)
    np.testing.assert_allclose(result["p99"][0], p99)
    assert result["max_all"][0] == pytest.approx(mx.max())


@pytest.mark.parametrize("group", [1, 7, 64])
def test_labels_measured_in_groups_and_ranges_match_the_brute_force_scan(group, monkeypatch):
    """With a small group size, the labels are measured a few at a time and a label with
    more occurrences than a group a range of windows at a time (one label of 90% here, as
    a record's main document often is): still every window's deviation."""
    monkeypatch.setattr(window_deviation, "_GROUP_OCCURRENCES", group)
    rng = np.random.default_rng(group)
    labels = rng.choice(5, size=400, p=[0.9, 0.04, 0.03, 0.02, 0.01])
    labels[150:190] = 0  # a long run of the common label
    for n in (1, 3, 16, 80):
        result = quality.window_deviation(labels, [n])
        mx, p99 = _brute(labels, n, 0.99)
        np.testing.assert_allclose(result["max"][0], mx)
        np.testing.assert_allclose(result["p99"][0], p99)


def test_it_reports_zero_deviation_for_a_perfect_round_robin():
    labels = np.tile(np.arange(4), 256)
    result = quality.window_deviation(labels, [4, 8, 64])
    assert result["max_all"] == [0.0, 0.0, 0.0]


def test_it_finds_a_sorted_order_far_worse_than_the_ideal_bound():
    labels = np.repeat(np.arange(8), 1000)
    result = quality.window_deviation(labels, [256])
    assert result["max_all"][0] == pytest.approx(1 - 1 / 8)
    assert result["max_all"][0] > 10 * result["ideal_all"][0]


def test_it_has_a_random_shuffle_near_the_ideal_bound_in_the_median_sense():
    rng = np.random.default_rng(0)
    labels = rng.permutation(np.repeat(np.arange(4), 5000))
    result = quality.window_deviation(labels, [64, 1024])
    # p99 of |dev| of a binomial proportion is ~3.2x its mean absolute deviation.
    for p99, ideal in zip(result["p99_all"], result["ideal_all"], strict=True):
        assert ideal < p99 < 5 * ideal


def test_it_computes_the_ideal_bound():
    assert quality.ideal_bound(0.5, 100) == pytest.approx(np.sqrt(0.5 / (np.pi * 100)))


def test_it_counts_distinct_labels_per_batch():
    labels = np.array([0, 0, 0, 0, 0, 1, 2, 3, 1, 1, 1, 1])
    result = quality.batch_diversity(labels, 4)
    assert result["per_batch"] == [1, 4, 1]
    assert (result["worst"], result["best"]) == (1, 4)


def test_it_shows_composition_over_position():
    labels = ["a"] * 50 + ["b"] * 50
    result = quality.composition(labels, bins=2)
    assert result["labels"] == ["a", "b"]
    assert result["share"] == [[1.0, 0.0], [0.0, 1.0]]


def test_it_returns_a_json_able_report():
    labels = np.random.default_rng(1).integers(0, 5, 5000)
    report = quality.report(labels, batch_size=64)
    text = json.dumps(report)
    assert json.loads(text)["windows"]["window_sizes"][0] == 2


def test_it_rejects_windows_longer_than_the_data():
    with pytest.raises(InputError, match="window_sizes"):
        quality.window_deviation([1, 2, 3], [8])


def _verdict_of(pool_dir):
    from shardcore import quality
    from shardcore.pool import Pool

    pool = Pool(pool_dir)
    docs = pool.documents
    labels = docs.column("source").to_numpy()
    lengths = docs.column("n_tokens").to_numpy().astype(np.int64)
    main = pool.main_documents()
    observed = quality.window_deviation(labels[main[main >= 0]])
    ref = quality.document_shuffle_reference(
        labels, lengths, pool.manifest["seq_len"], observed["window_sizes"], trials=6, seed=5
    )
    return quality.verdict(observed["window_sizes"], observed["max_all"], ref["mean"]), ref


def test_it_holds_an_exact_shuffle_to_random_permutations_of_its_documents(tmp_path):
    """On real text, the exact shuffle is within reach of the document-level reference
    at every window; a shard-local shuffle of inputs grouped by source is not."""
    from shardcore.pool import build_pool
    from tests.unit import pool_fixtures as pf

    prose = pf.write_tokenized(tmp_path / "prose", pf.corpus("prose", 400), shard_docs=100)
    code = pf.write_tokenized(tmp_path / "code", pf.corpus("code", 120), shard_docs=30)
    for shuffle in ("exact", "local"):
        build_pool([str(prose), str(code)], str(tmp_path / shuffle), seq_len=64, seed=2,
                   shuffle=shuffle, memory=1 << 20, shard_size=32 << 10)  # fmt: skip
    exact, ref = _verdict_of(tmp_path / "exact")
    assert exact["from_window"] is not None and exact["ratio"] <= 1.25, exact
    assert all(lo <= m <= hi for lo, m, hi in zip(ref["lo"], ref["mean"], ref["hi"], strict=True))
    local, _ = _verdict_of(tmp_path / "local")
    assert local["ratio"] > 2, local  # grouped by source: far from any random order
    assert not local["ok"]


def test_it_measures_each_stage_of_a_schedule_against_random_permutations_of_its_samples(
    tmp_path,
):
    """A blend mixes its pools at least as evenly as a random order of the same samples
    (within the verdict's tolerance at every window); a stage of one pool has nothing to
    mix; a stage longer than ``max_samples`` is measured on its start."""
    from shardcore.manifest import read_manifest
    from shardcore.mixture import build_mixture
    from tests.unit import mix_fixtures

    pools = mix_fixtures.build_pools(tmp_path, seq_len=64)
    spec = {
        "tokens": 64 * 3000, "seed": 4,
        "components": [{"pool": str(pools["early"]), "weight": 0.7},
                       {"pool": str(pools["late"]), "weight": 0.3}],
        "stages": [{"name": "anneal", "tokens": 64 * 500,
                    "components": [{"pool": str(pools["middle"]), "weight": 1.0}]}],
        "max_repetitions": 100,
    }  # fmt: skip
    build_mixture(spec, tmp_path / "mix")
    report = quality.mixture_quality(str(tmp_path / "mix"), max_samples=2000)
    main, anneal = report["stages"]
    assert (main["name"], main["num_samples"], main["measured"]) == ("main", 2500, 2000)
    assert main["verdict"]["from_window"] == 2 and main["verdict"]["ok"], main
    assert report["verdict"] == main["verdict"]
    assert report["windows"]["num_samples"] == 2000
    keys = {p["key"]: p["path"] for p in read_manifest(str(tmp_path / "mix"))["pools"]}
    assert {keys[k] for k in report["windows"]["labels"]} == {
        str(pools["early"]),
        str(pools["late"]),
    }
    ref = report["reference"]
    assert all(lo <= m <= hi for lo, m, hi in zip(ref["lo"], ref["mean"], ref["hi"], strict=True))
    assert anneal["verdict"]["text"].startswith("one pool only (") and anneal["verdict"]["ok"]
    json.dumps(report)
    # Sorted by pool, the same samples are far from any random order.
    codes = np.sort(quality.encode_labels(np.array(["a"] * 700 + ["b"] * 300))[0])
    ref = quality.sample_shuffle_reference(codes, [2, 4, 8, 16, 32], trials=4, seed=1)
    sizes = [2, 4, 8, 16, 32]
    sorted_verdict = quality.verdict(
        sizes, quality.window_deviation(codes, sizes)["max_all"], ref["mean"]
    )
    assert not sorted_verdict["ok"] and sorted_verdict["ratio"] > 2


def test_it_says_when_an_order_is_more_even_than_a_perfect_shuffle():
    sizes = [2, 4, 8, 16]
    v = quality.verdict(sizes, [0.5, 0.2, 0.05, 0.01], [0.5, 0.35, 0.25, 0.18])
    assert v["ok"] and v["ratio"] == 1.0
    assert v["text"] == (
        "within 1.00x of a perfect shuffle at windows of 2 samples and more; "
        "more even than one at 16 samples (0.06x)"
    )
    plain = quality.verdict(sizes, [0.5, 0.35, 0.25, 0.18], [0.5, 0.35, 0.25, 0.18])
    assert plain["text"] == "within 1.00x of a perfect shuffle at windows of 2 samples and more"


def test_it_says_better_than_a_perfect_shuffle_when_every_ratio_is_below_one():
    # A blend deviates 0.65x as much as a shuffle at worst: "within 0.65x" read as worse.
    sizes = [2, 4, 8, 16]
    v = quality.verdict(sizes, [0.26, 0.2, 0.1, 0.05], [0.4, 0.35, 0.25, 0.18])
    assert v["ok"] and v["ratio"] == pytest.approx(0.65)
    assert v["text"] == (
        "better than a perfect shuffle at windows of 2 samples and more (at most 0.65x its "
        "deviation); more even than one at 16 samples (0.28x)"
    )
    assert "within" not in v["text"]


def test_each_label_gets_its_own_verdict():
    # Two pools: the worst label's verdict alone said nothing of each pool's own.
    rng = np.random.default_rng(0)
    labels = rng.permutation(np.array(["a"] * 300 + ["b"] * 100))
    sizes = [2, 4, 8, 16, 32]
    windows = quality.window_deviation(labels, sizes)
    ref = quality.sample_shuffle_reference(labels, sizes, trials=4)
    assert ref["labels"] == ["a", "b"] and np.shape(ref["mean_by_label"]) == (5, 2)
    rows = quality.label_verdicts(windows, ref)
    assert [r["label"] for r in rows] == ["a", "b"]  # largest share first
    assert [round(r["share"], 2) for r in rows] == [0.75, 0.25]
    for j, r in enumerate(rows):
        mine = [row[j] for row in windows["max"]]
        want = quality.verdict(sizes, mine, [row[j] for row in ref["mean_by_label"]])
        assert r["verdict"] == want


def test_a_pools_document_reference_gives_each_label_its_own_verdict(tmp_path):
    """A pool's page read only the worst label's verdict: the document-level reference
    holds each label's mean max deviation too, so each label of a two-source pool is
    judged against what a perfect shuffle reaches for it."""
    from shardcore.pool import Pool, build_pool
    from tests.unit import pool_fixtures as pf

    prose = pf.write_tokenized(tmp_path / "prose", pf.corpus("prose", 200), shard_docs=100)
    code = pf.write_tokenized(tmp_path / "code", pf.corpus("code", 60), shard_docs=30)
    build_pool([str(prose), str(code)], str(tmp_path / "pool"), seq_len=64, seed=2,
               memory=1 << 20, shard_size=32 << 10)  # fmt: skip
    pool = Pool(tmp_path / "pool")
    labels = pool.documents.column("source").to_numpy()
    lengths = pool.documents.column("n_tokens").to_numpy().astype(np.int64)
    main = pool.main_documents()
    windows = quality.window_deviation(labels[main[main >= 0]])
    ref = quality.document_shuffle_reference(
        labels, lengths, pool.manifest["seq_len"], windows["window_sizes"], trials=4, seed=1
    )
    assert sorted(ref["labels"]) == sorted(str(x) for x in windows["labels"])
    assert np.shape(ref["mean_by_label"]) == (len(windows["window_sizes"]), 2)
    # The worst label's reference is at least each label's.
    assert np.all(np.max(ref["mean_by_label"], axis=1) <= np.asarray(ref["mean"]) + 1e-12)
    rows = quality.label_verdicts(windows, ref)
    assert len(rows) == 2 and rows[0]["share"] >= rows[1]["share"]
    assert all("perfect shuffle" in r["verdict"]["text"] for r in rows)

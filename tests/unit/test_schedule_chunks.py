"""Schedules built in chunks: the same schedule as one pass in memory whatever the chunk
size, megatron-core's blend across chunk boundaries, keyed epoch permutations, and the
resume and first-read answers from per-chunk counts equal to scanning the schedule."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from shardcore import blend
from shardcore import flagged_reads as lineage
from shardcore import manifest as mf
from shardcore.mixture import (
    COUNTS_FILE,
    POOL_FILE,
    RECORD_FILE,
    Mixture,
    MixtureSpec,
    build_mixture,
    build_schedule,
    continuation,
    load_pools,
    permute,
)
from shardcore.pool import Pool
from tests.unit import mix_fixtures

helpers_cpp = pytest.importorskip("megatron.core.datasets.helpers_cpp")

SEQ = 64
SAMPLES = 30_000  # with stages, roll-over of the small pools, several chunks of 4,099


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    return mix_fixtures.build_pools(tmp_path_factory.mktemp("pools"), seq_len=SEQ)


def _spec(pools, samples=SAMPLES, **extra) -> MixtureSpec:
    return MixtureSpec.from_dict(
        mix_fixtures.three_pool_spec(
            pools, seq_len=SEQ, samples=samples, anneal_samples=3_001, seed=5, **extra
        )
    )


@pytest.fixture(scope="module")
def built(pools, tmp_path_factory):
    """The spec built with chunks of 4,099 samples (and in one chunk for comparison)."""
    root = tmp_path_factory.mktemp("mixes")
    build_mixture(_spec(pools), root / "small", chunk_samples=4_099)
    build_mixture(_spec(pools), root / "one", chunk_samples=1 << 30)
    return root


def _megatron(weights: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    di = np.zeros(size, dtype=np.int16)
    si = np.zeros(size, dtype=np.int64)
    helpers_cpp.build_blending_indices(di, si, weights, weights.size, size, False)
    return di, si


def test_the_blend_run_range_by_range_from_the_counts_equals_megatron():
    weights = blend.normalize(np.random.default_rng(3).random(37) ** 3 + 1e-3)
    size, chunk = 2_000_003, 65_537  # 37 pools: the kernel's any-width path
    theirs = _megatron(weights, size)
    counts = np.zeros(weights.size, dtype=np.int64)
    for a in range(0, size, chunk):
        b = min(size, a + chunk)
        saved = counts.copy()  # a unit starting here knows only the counts
        di, si = np.empty(b - a, np.int16), np.empty(b - a, np.int64)
        blend.blend_range(weights, a, saved, (di, si))
        np.testing.assert_array_equal(di, theirs[0][a:b])
        np.testing.assert_array_equal(si, theirs[1][a:b])
        counts = saved
    np.testing.assert_array_equal(counts, np.bincount(theirs[0], minlength=weights.size))


def test_a_chunked_build_is_the_one_pass_schedule_whatever_the_chunk(pools, built):
    small, one = built / "small", built / "one"
    for rel in (POOL_FILE, RECORD_FILE):
        assert (small / rel).read_bytes() == (one / rel).read_bytes()
    spec = _spec(pools)
    pidx, rec, facts = build_schedule(spec, load_pools(spec))
    mix = Mixture(small)
    np.testing.assert_array_equal(np.asarray(mix.pool_index), pidx)
    np.testing.assert_array_equal(np.asarray(mix.record_index), rec)
    assert mix.manifest["stages"] == facts
    assert mix.manifest["schedule"] == {"format": 2, "chunk_samples": 4_099}
    # The main stage's pool column is megatron-core's blend of its weights, across chunks.
    main = facts[0]["num_samples"]
    di, _ = _megatron(blend.normalize(facts[0]["weights"]), main)
    np.testing.assert_array_equal(pidx[:main], di)
    # Per-chunk counts: per pool, its samples before each boundary.
    counts = np.load(small / COUNTS_FILE)
    assert counts.shape == (-(-SAMPLES // 4_099) + 1, 3)
    for c in range(counts.shape[0]):
        upto = min(c * 4_099, SAMPLES)
        np.testing.assert_array_equal(counts[c], np.bincount(pidx[:upto], minlength=3))
    assert counts[-1].tolist() == [p["samples"] for p in mix.pools]


def test_repeats_read_each_record_once_per_epoch_in_keyed_orders(pools, built):
    mix = Mixture(built / "small")
    pidx, rec = np.asarray(mix.pool_index), np.asarray(mix.record_index)
    n = Pool(pools["early"]).num_records
    early = rec[pidx == 0]
    assert early.size > 3 * n and mix.pools[0]["permutation"] == "feistel"
    np.testing.assert_array_equal(early[:n], np.arange(n))
    for e in (1, 2):
        epoch = early[e * n : (e + 1) * n]
        assert np.array_equal(np.sort(epoch), np.arange(n))
        assert not np.array_equal(epoch, np.arange(n))
        np.testing.assert_array_equal(epoch, permute.records_for(5, 0, n, np.arange(n) + e * n))
    assert not np.array_equal(early[n : 2 * n], early[2 * n : 3 * n])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 1000, 4097, 65_536, 100_003])
def test_the_keyed_permutation_is_a_bijection_with_its_inverse_compiled_or_not(n):
    keys = permute.round_keys(7, 2, 3)
    group = np.zeros(n, dtype=np.int32)
    fwd = permute.feistel_groups(np.arange(n), group, np.array([n]), keys[None, :])
    slow = permute.feistel_groups(np.arange(n), group, np.array([n]), keys, compiled=False)
    np.testing.assert_array_equal(fwd, slow)
    np.testing.assert_array_equal(np.sort(fwd), np.arange(n))
    back = permute.positions_of(7, 2, n, 3, fwd)
    np.testing.assert_array_equal(back, np.arange(n))
    if n > 64:  # another epoch, another order
        other = permute.records_for(7, 2, n, np.arange(n) + 4 * n)
        assert not np.array_equal(other, fwd)


def test_the_numpy_permutation_of_format_one_schedules_is_kept():
    n, consumed = 1_000, np.arange(3_500)
    got = permute.records_for(4, 1, n, consumed, permute.NUMPY)
    for e in range(4):  # what schedules built before the keyed permutation read
        want = np.arange(n) if e == 0 else np.random.default_rng([4, 1, e, 0x6D6978]).permutation(n)
        sel = consumed // n == e
        np.testing.assert_array_equal(got[sel], want[consumed[sel] % n])
        np.testing.assert_array_equal(
            permute.positions_of(4, 1, n, e, want, permute.NUMPY), np.arange(n)
        )


def _format_one(src: Path, dst: Path) -> Path:
    """The same schedule as a format-1 mixture: no counts file, no ``schedule`` entry."""
    dst.mkdir()
    (dst / "schedule").mkdir()
    for rel in (POOL_FILE, RECORD_FILE):
        os.link(src / rel, dst / rel)
    manifest = mf.read_manifest(src)
    for key in ("schedule", "layout", "format_version"):
        manifest.pop(key, None)
    manifest["files"] = [f for f in manifest["files"] if f["path"] != COUNTS_FILE]
    for p in manifest["pools"]:
        p.pop("permutation")
    mf.write_manifest(dst, manifest)
    return dst


def test_resume_positions_epochs_and_first_reads_equal_scanning_the_schedule(
    pools, built, tmp_path
):
    mix = Mixture(built / "small")
    old = Mixture(_format_one(built / "small", tmp_path / "v1"))
    assert old.counts is None and mix.counts is not None
    pidx = np.asarray(mix.pool_index)
    for s in (0, 1, 4_098, 4_099, 4_100, 17_777, SAMPLES - 1, SAMPLES):
        np.testing.assert_array_equal(mix.reads_before(s), old.reads_before(s))
        np.testing.assert_array_equal(mix.reads_before(s), np.bincount(pidx[:s], minlength=3))
    for i in range(3):
        where = np.flatnonzero(pidx == i)
        for j in (0, 1, where.size // 3, where.size - 1):
            assert mix.sample_of_read(i, j) == old.sample_of_read(i, j) == int(where[j])
        assert mix.sample_of_read(i, where.size) is None
    starts = mix.epoch_starts()
    assert starts == old.epoch_starts() and len(starts) >= 4
    assert mix.epoch_starts(20_000) == old.epoch_starts(20_000)
    # Continuing at a sample: the same counts either way.
    a = continuation(built / "small", 12_345)
    b = continuation(tmp_path / "v1", 12_345)
    assert [p["read"] for p in a["pools"]] == [p["read"] for p in b["pools"]]
    assert [p["permutation"] for p in a["pools"]] == ["feistel"] * 3
    assert [p["permutation"] for p in b["pools"]] == ["numpy"] * 3
    # First reads of flagged records: computed (format 2) == scanned (format 1).
    rng = np.random.default_rng(9)
    for trial in range(12):
        masks = {}
        for i, p in enumerate(mix.pools):
            m = np.zeros(int(p["num_records"]), dtype=bool)
            if rng.random() < 0.7:
                m[rng.choice(m.size, size=1 + trial % 3, replace=False)] = True
            masks[i] = m
        for start in (0, 9_000, 28_000):
            fast = lineage.first_sample(built / "small", masks, start=start)
            assert old.first_read(masks, start=start) is NotImplemented
            slow = lineage.first_sample(tmp_path / "v1", masks, start=start)
            assert fast == slow, (trial, start)


def test_a_flagged_record_of_a_later_epoch_only_is_found_in_it(pools, built, tmp_path):
    mix = Mixture(built / "small")
    old = Mixture(_format_one(built / "small", tmp_path / "v1"))
    pidx, rec = np.asarray(mix.pool_index), np.asarray(mix.record_index)
    s = int(np.flatnonzero(pidx == 0)[-1])  # the early pool's last read, in its last epoch
    mask = np.zeros(int(mix.pools[0]["num_records"]), dtype=bool)
    mask[rec[s]] = True
    # From past the record's read in every earlier epoch, the first read is in the last.
    earlier = np.flatnonzero((pidx == 0) & (rec == rec[s]))
    start = int(earlier[-2]) + 1
    assert mix.first_read({0: mask}, start=start) == s
    assert lineage.first_sample(tmp_path / "v1", {0: mask}, start=start) == s
    assert old.first_read({0: mask}) is NotImplemented


def test_a_continued_numpy_pool_keeps_its_permutation(pools, built, tmp_path):
    """A run switching from a format-1 mixture reads its pools' later epochs in the numpy
    permutations it started with; the new mixture records that and resumes the same."""
    old = tmp_path / "v1"
    _format_one(built / "small", old)
    spec = _spec(pools, 8_000)
    data = spec.to_dict()
    data["continues"] = continuation(old, 20_000)
    data.pop("stages")
    new = build_mixture(MixtureSpec.from_dict(data), tmp_path / "v2", chunk_samples=1_001)
    assert [p["permutation"] for p in new["pools"]] == ["numpy"] * 3
    mix = Mixture(tmp_path / "v2")
    pidx, rec = np.asarray(mix.pool_index), np.asarray(mix.record_index)
    first = Mixture(old)
    for i, p in enumerate(new["pools"]):
        n, before = int(p["num_records"]), int(p["first_read"])
        want = permute.records_for(5, i, n, before + np.arange(int(p["samples"])), "numpy")
        np.testing.assert_array_equal(rec[pidx == i], want)
        assert before == int(first.reads_before(20_000)[i])


def test_a_budget_beyond_the_disk_is_refused_before_writing(pools, tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**6, 0, 10**5))
    with pytest.raises(Exception, match=r"GiB on disk .*10 bytes per sample.* free there"):
        build_mixture(_spec(pools), tmp_path / "full")
    assert not (tmp_path / "full" / POOL_FILE).exists()

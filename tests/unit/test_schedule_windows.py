"""Non-blend orderings built in chunks: each window (the samples of one stage inside one
chunk) holds the blend's samples of that window in another order, the per-chunk counts stay
exact, a stage inside one chunk keeps its whole-stage order, and units (rerun or not)
write the bytes of the one-process build."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardcore import units
from shardcore.mixture import (
    COUNTS_FILE,
    POOL_FILE,
    RECORD_FILE,
    Mixture,
    MixtureSpec,
    build_mixture,
    build_schedule,
    load_pools,
    plan_mixture,
)
from shardcore.mixture.ordered import BLEND_FILE
from tests.unit import mix_fixtures

SEQ = 64
SAMPLES = 30_000
CHUNK = 4_099  # 8 chunks; the anneal stage starts inside one of them
ORDERS = [("diversity", {"by": ["package"]}), ("greedy_block", {}), ("random", {})]


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    return mix_fixtures.build_pools(tmp_path_factory.mktemp("pools"), seq_len=SEQ)


def _spec(pools, order="blend", options=None) -> MixtureSpec:
    return MixtureSpec.from_dict(
        mix_fixtures.three_pool_spec(
            pools,
            seq_len=SEQ,
            samples=SAMPLES,
            anneal_samples=3_001,
            seed=11,
            order=order,
            order_options=options or {},
        )  # fmt: skip
    )


@pytest.fixture(scope="module")
def blended(pools, tmp_path_factory):
    out = tmp_path_factory.mktemp("blend") / "mix"
    build_mixture(_spec(pools), out, chunk_samples=CHUNK)
    return Mixture(out)


def _columns(mix: Mixture) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(mix.pool_index), np.asarray(mix.record_index)


def _windows(mix: Mixture) -> list[tuple[int, int]]:
    cuts = {0, mix.num_samples, *range(0, mix.num_samples, CHUNK)}
    cuts |= {st["first_sample"] for st in mix.manifest["stages"]}
    cuts_sorted = sorted(cuts)
    return list(zip(cuts_sorted[:-1], cuts_sorted[1:], strict=True))


@pytest.mark.parametrize(("order", "options"), ORDERS)
def test_each_window_holds_the_blends_samples_in_another_order(
    pools, blended, tmp_path, order, options
):
    out = tmp_path / order
    manifest = build_mixture(_spec(pools, order, options), out, chunk_samples=CHUNK)
    mix = Mixture(out)
    pa, ra = _columns(blended)
    pb, rb = _columns(mix)
    windows = _windows(mix)
    assert len(windows) == 9  # 8 chunks, one of them cut by the stage boundary
    moved = 0
    for lo, hi in windows:
        ours = sorted(zip(pb[lo:hi].tolist(), rb[lo:hi].tolist(), strict=True))
        theirs = sorted(zip(pa[lo:hi].tolist(), ra[lo:hi].tolist(), strict=True))
        assert ours == theirs, (lo, hi)
        moved += int(np.count_nonzero((pb[lo:hi] != pa[lo:hi]) | (rb[lo:hi] != ra[lo:hi])))
    assert moved > SAMPLES // 2
    # Ordering inside chunks leaves each pool's samples before every boundary as they were.
    counts = np.load(out / COUNTS_FILE)
    np.testing.assert_array_equal(counts, np.load(blended.path / COUNTS_FILE))
    for s in (0, CHUNK, 3 * CHUNK + 17, SAMPLES - 5):
        np.testing.assert_array_equal(mix.reads_before(s), np.bincount(pb[:s], minlength=3))
    assert manifest["schedule"] == {"format": 2, "chunk_samples": CHUNK, "order_window": CHUNK}
    assert manifest["fingerprint"] != blended.manifest["fingerprint"]
    assert not (out / BLEND_FILE).exists()
    # Built again: the same bytes.
    again = build_mixture(_spec(pools, order, options), tmp_path / "again", chunk_samples=CHUNK)
    assert again["fingerprint"] == manifest["fingerprint"]
    for rel in (POOL_FILE, RECORD_FILE):
        assert (tmp_path / "again" / rel).read_bytes() == (out / rel).read_bytes()


@pytest.mark.parametrize(("order", "options"), ORDERS)
def test_stages_inside_one_chunk_keep_their_whole_stage_order(pools, tmp_path, order, options):
    spec = _spec(pools, order, options)
    manifest = build_mixture(spec, tmp_path / "one", chunk_samples=1 << 20)
    pidx, rec, facts = build_schedule(spec, load_pools(spec))
    mix = Mixture(tmp_path / "one")
    np.testing.assert_array_equal(np.asarray(mix.pool_index), pidx)
    np.testing.assert_array_equal(np.asarray(mix.record_index), rec)
    assert manifest["stages"] == facts
    assert "order_window" not in manifest["schedule"]


def test_units_write_the_one_process_bytes_and_a_rerun_unit_writes_them_again(pools, tmp_path):
    spec = _spec(pools, "diversity", {"by": ["package"]})
    direct = build_mixture(spec, tmp_path / "direct", chunk_samples=CHUNK)
    plan = plan_mixture(spec, tmp_path / "job", chunk_samples=CHUNK)
    assert len(plan.phases[1]) == 4
    by_units = units.run_local(units.Plan.from_json(json.loads(json.dumps(plan.to_json()))))
    assert by_units == direct
    job, here = Path(tmp_path / "job"), Path(tmp_path / "direct")
    for rel in (POOL_FILE, RECORD_FILE, COUNTS_FILE):
        assert (job / rel).read_bytes() == (here / rel).read_bytes()
    assert not (job / BLEND_FILE).exists()

    # A record unit killed after writing part of its range and run again (from the blend's
    # column, never from what it wrote): the same bytes.
    rerun = tmp_path / "rerun"
    plan = plan_mixture(spec, rerun, chunk_samples=CHUNK)
    units.save_plan(plan)
    units.run_unit(plan, "blend")
    for unit in plan.phases[1]:
        units.run_unit(plan, unit["id"])
    second = plan.phases[1][1]
    units.marker_path(rerun, second["id"]).unlink()
    units.run_unit(plan, second["id"])
    assert units.finalize(plan) == direct
    for rel in (POOL_FILE, RECORD_FILE):
        assert (rerun / rel).read_bytes() == (here / rel).read_bytes()


def _whole_pool_families(infos, options, pool_idx, record) -> dict[str, np.ndarray]:
    """The reference: every record's labels of every pool (its main document's property
    values and length bin), then indexed by the samples."""
    from shardcore.pool import PoolReader

    fams = {"pool": pool_idx.astype(np.int64)}
    by = list(options.get("by") or [])
    names = [(p, p) for p in by] + (
        [("length", "_doc.n_tokens")] if options.get("length_bins", True) else []
    )
    for family, prop in names:
        per_pool = []
        for info in infos:
            pool = PoolReader(info.path)
            values = pool.document_values(prop)[pool.main_documents()]
            if family == "length":
                values = np.floor(np.log2(np.maximum(values.astype(np.int64), 1))).astype(np.int64)
            per_pool.append(values)
        out = np.empty(pool_idx.size, dtype=per_pool[0].dtype)
        for i, values in enumerate(per_pool):
            out[pool_idx == i] = values[record[pool_idx == i]]
        fams[family] = out.astype(str) if out.dtype == object else out
    return fams


@pytest.mark.parametrize(
    "options", [{"by": ["package"]}, {"by": ["package"], "length_bins": False}, {}]
)
def test_a_windows_labels_read_by_range_equal_the_whole_pools(pools, options):
    """What the diversity ordering reads of a window's samples (their records' main
    documents' values, by row range) is what the labels of every record give, for samples
    of every pool, epoch 0 in order and repeats anywhere."""
    from shardcore.mixture.ordered import sample_families
    from shardcore.pool import PoolReader

    infos = load_pools(_spec(pools, "diversity", options))
    readers = [PoolReader(p.path) for p in infos]
    rng = np.random.default_rng(3)
    for n in (1, 500, 5_000):
        pool_idx = rng.integers(0, len(infos), n).astype(np.int16)
        sizes = np.array([r.num_records for r in readers])
        record = rng.integers(0, sizes[pool_idx])
        record[: n // 2] = np.minimum(np.arange(n // 2), sizes[pool_idx[: n // 2]] - 1)
        got = sample_families(readers, options, pool_idx, record)
        want = _whole_pool_families(infos, options, pool_idx, record)
        assert got.keys() == want.keys()
        for name in want:
            assert got[name].dtype == want[name].dtype, name
            assert (got[name] == want[name]).all(), name

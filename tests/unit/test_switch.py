"""A run that switches mixture version mid-training, in the library: a version built to
continue another at a sample reads each shared pool on from where the run left it (nothing
read again before its turn, across epochs), and the loader reads a run's segments so that
a run resumed on either side of the switch, or switched live, reads exactly what an
uninterrupted run reads."""

from __future__ import annotations

import numpy as np
import pytest

from shardcore.errors import InputError
from shardcore.loader import Segments, resume_state
from shardcore.mixture import Mixture, _records_for, build_mixture, continuation
from shardcore.pool import Pool
from tests.unit import mix_fixtures

BATCH = 4
SWITCH = 96  # the run's sample where it switches: a whole number of batches on 1 or 2 ranks


@pytest.fixture(scope="module")
def mixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("switch")
    pools = mix_fixtures.build_pools(root)
    early, late = Pool(pools["early"]), Pool(pools["late"])
    # Enough samples that the small pool "early" is read more than once before the switch.
    tokens = 64 * (2 * early.num_records + 40)
    v1 = build_mixture(
        {"components": [{"pool": str(pools["early"]), "weight": 0.5},
                        {"pool": str(pools["late"]), "weight": 0.5}],
         "tokens": tokens, "seed": 11, "max_repetitions": 50},
        root / "v1",
    )  # fmt: skip
    first = 2 * early.num_records + 8  # past the first epoch of "early"
    v2 = build_mixture(
        {"components": [{"pool": str(pools["early"]), "weight": 0.8},
                        {"pool": str(pools["middle"]), "weight": 0.2}],
         "tokens": 64 * 300, "seed": 5, "max_repetitions": 50,
         "continues": continuation(root / "v1", first)},
        root / "v2",
    )  # fmt: skip
    v3 = build_mixture(
        {"components": [{"pool": str(pools["early"]), "weight": 1.0}],
         "tokens": 64 * 100, "seed": 9, "max_repetitions": 50,
         "continues": continuation(root / "v2", 40)},
        root / "v3",
    )  # fmt: skip
    short = build_mixture(
        {"components": [{"pool": str(pools["late"]), "weight": 1.0}],
         "tokens": 64 * 200, "seed": 5, "continues": continuation(root / "v1", SWITCH)},
        root / "short",
    )  # fmt: skip
    return {
        "root": root, "pools": pools, "v1": v1, "v2": v2, "v3": v3, "first": first,
        "short": short, "early": early, "late": late,
    }  # fmt: skip


def _pool_reads(path, index: int, start: int = 0, stop: int | None = None) -> np.ndarray:
    m = Mixture(path)
    pidx = np.asarray(m.pool_index[start:stop])
    return np.asarray(m.record_index[start:stop])[pidx == index]


def test_a_continued_pool_reads_on_where_the_run_left_it_across_epochs(mixes):
    v1, v2, first = mixes["v1"], mixes["v2"], mixes["first"]
    n = mixes["early"].num_records
    key1 = [p["key"] for p in v1["pools"]].index(str(mixes["pools"]["early"]))
    key2 = [p["key"] for p in v2["pools"]].index(str(mixes["pools"]["early"]))
    before = _pool_reads(mixes["root"] / "v1", key1, stop=first)
    after = _pool_reads(mixes["root"] / "v2", key2)
    assert before.size > n  # the run was in the pool's second epoch at the switch
    # Together: the pool's one read order (epoch 0 in pool order, then v1's permutations).
    whole = _records_for(11, key1, n, np.arange(before.size + after.size))
    assert np.array_equal(np.concatenate([before, after]), whole)
    pool = next(p for p in v2["pools"] if p["key"] == str(mixes["pools"]["early"]))
    assert pool["first_read"] == before.size and pool["epoch_key"] == [11, key1]
    # A pool new in the continuation starts at its first record; the stopped one is absent.
    mid = [p["key"] for p in v2["pools"]].index(str(mixes["pools"]["middle"]))
    assert np.array_equal(_pool_reads(mixes["root"] / "v2", mid)[:5], np.arange(5, dtype=np.int64))
    assert v2["continues"] == {"mixture": v1["fingerprint"], "sample": first}


def test_a_continuation_of_a_continuation_keeps_the_first_permutation_key(mixes):
    v3 = mixes["v3"]
    early = v3["pools"][0]
    key1 = [p["key"] for p in mixes["v1"]["pools"]].index(early["key"])
    assert early["epoch_key"] == [11, key1]
    # Read in v1 before the switch, then the 40 first samples of v2 that were early's.
    in_v1 = _pool_reads(mixes["root"] / "v1", key1, stop=mixes["first"]).size
    key2 = [p["key"] for p in mixes["v2"]["pools"]].index(early["key"])
    in_v2 = _pool_reads(mixes["root"] / "v2", key2, stop=40).size
    assert early["first_read"] == in_v1 + in_v2


def test_the_continuation_is_part_of_the_fingerprint_and_checked(mixes, tmp_path):
    again = build_mixture(
        {**mixes["v2"]["spec"], "continues": continuation(mixes["root"] / "v1", mixes["first"])},
        tmp_path / "again",
    )
    assert again["fingerprint"] == mixes["v2"]["fingerprint"]
    other = build_mixture(
        {**mixes["v2"]["spec"], "continues": continuation(mixes["root"] / "v1", 40)},
        tmp_path / "other",
    )
    assert other["fingerprint"] != mixes["v2"]["fingerprint"]
    with pytest.raises(InputError, match=r"continue at sample 999999: .* has samples \[0, "):
        continuation(mixes["root"] / "v1", 999_999)
    bad = {**mixes["v2"]["spec"], "continues": {"mixture": "x", "sample": -1, "pools": []}}
    with pytest.raises(InputError, match="continues.sample: must be >= 0"):
        build_mixture(bad, tmp_path / "bad")


def _stream(path, *, state=None, rank=0, world_size=1, upto=None, switch=None):
    """(sample index, tokens) pairs one rank's ShardyardLoader returns; with ``switch``
    ((path, at)), the loop breaks at sample ``at``, switches and goes on."""
    from shardcore.loader import ShardyardIterableDataset, ShardyardLoader

    ds = ShardyardIterableDataset(path, rank=rank, world_size=world_size)
    if state is not None:
        ds.load_state_dict(state)
    loader = ShardyardLoader(ds, batch_size=BATCH)
    out = []
    for batch in loader:
        out += [(int(k), t.numpy().copy()) for k, t in zip(batch["sample"], batch["tokens"],
                                                             strict=True)]  # fmt: skip
        position = loader.state_dict()["next_sample"]
        if switch is not None and position == switch[1]:
            ds.switch(switch[0])
            for batch in loader:
                out += [(int(k), t.numpy().copy()) for k, t in zip(batch["sample"],
                                                                     batch["tokens"], strict=True)]  # fmt: skip
            break
        if upto is not None and position >= upto:
            break
    return out, loader.state_dict()


def test_resumed_or_switched_live_the_run_reads_what_an_uninterrupted_run_reads(mixes):
    root = mixes["root"]
    segments = [{"path": str(root / "v1"), "first_sample": 0},
                {"path": str(root / "short"), "first_sample": SWITCH}]  # fmt: skip
    straight, _ = _stream(segments)
    run = Segments(segments)
    assert len(straight) == len(run) == SWITCH + mixes["short"]["num_samples"]
    v1, short = Mixture(root / "v1"), Mixture(root / "short")
    for k, tokens in straight[:: len(straight) // 17]:
        want = v1.tokens(k) if k < SWITCH else short.tokens(k - SWITCH)
        assert np.array_equal(tokens, want)
    # Checkpointed before the switch, on the first version alone, resumed on two ranks
    # over the segments the server answers after the switch.
    before, state = _stream(str(root / "v1"), upto=SWITCH - 2 * BATCH)
    assert state["next_sample"] == SWITCH - 2 * BATCH
    rest = [_stream(segments, state=state, rank=r, world_size=2)[0] for r in (0, 1)]
    merged = sorted(rest[0] + rest[1], key=lambda x: x[0])
    resumed = before + merged
    assert [k for k, _ in resumed] == [k for k, _ in straight]
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(resumed, straight, strict=True))
    # Checkpointed after the switch, with the segments in the state.
    _, late = _stream(segments, upto=SWITCH + 3 * BATCH)
    assert late["segments"] == run.keys
    tail, _ = _stream(segments, state=late)
    assert [k for k, _ in tail] == [k for k, _ in straight[SWITCH + 3 * BATCH :]]
    # Switched live: the loop reads the first version, switches at the checkpoint, reads on.
    live, final = _stream(str(root / "v1"), switch=(str(root / "short"), SWITCH))
    assert [k for k, _ in live] == [k for k, _ in straight]
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(live, straight, strict=True))
    assert final["segments"] == run.keys
    assert resume_state(segments, SWITCH)["segments"] == run.keys


def test_a_state_past_the_switch_or_segments_that_disagree_are_refused(mixes):
    from shardcore.loader import ShardyardIterableDataset

    root = mixes["root"]
    segments = [(str(root / "v1"), 0), (str(root / "short"), SWITCH)]
    _, past = _stream(str(root / "v1"), upto=SWITCH + BATCH)
    ds = ShardyardIterableDataset(segments)
    with pytest.raises(InputError, match=rf"read up to sample {SWITCH + BATCH} .* past the switch"):
        ds.load_state_dict(past)
    with pytest.raises(InputError, match=rf"switch at sample {SWITCH}: .* read up to sample"):
        live = ShardyardIterableDataset(str(root / "v1"))
        live.load_state_dict(past)
        live.switch(str(root / "short"), SWITCH)
    with pytest.raises(InputError, match=r"segments\[1\]: .* continues mixture .* at its sample "
                                         rf"{SWITCH}, but follows .* after {SWITCH + 4} samples"):  # fmt: skip
        Segments([(str(root / "v1"), 0), (str(root / "short"), SWITCH + 4)])
    with pytest.raises(InputError, match=r"segments\[0\].first_sample: the run starts at 0"):
        Segments([(str(root / "v1"), 3)])
    with pytest.raises(InputError, match="seed: a run's segments are read in their own order"):
        ShardyardIterableDataset(segments, seed=1)

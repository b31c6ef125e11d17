"""Mixture specs, epoch planning and the built schedule, on real pools of CPython text."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardcore import blend
from shardcore.errors import InputError
from shardcore.mixture import Mixture, MixtureSpec, build_mixture, flatten, plan_epochs
from shardcore.pool import Pool
from tests.unit import mix_fixtures

SEQ = 64


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    return mix_fixtures.build_pools(tmp_path_factory.mktemp("pools"), seq_len=SEQ)


def _spec(pools, tokens, **extra) -> MixtureSpec:
    data = {
        "tokens": tokens,
        "seed": 11,
        "components": [
            {
                "name": "group",
                "weight": 0.7,
                "components": [
                    {"pool": str(pools["early"]), "weight": 0.8},
                    {"pool": str(pools["middle"]), "weight": 0.2},
                ],
            },
            {"pool": str(pools["late"]), "weight": 0.3},
        ],
        **extra,
    }
    return MixtureSpec.from_dict(data)


def test_it_flattens_nested_groups_to_leaf_shares(pools):
    leaves = dict(flatten(_spec(pools, 10_000).components))
    assert leaves[str(pools["early"])] == pytest.approx(0.56)
    assert leaves[str(pools["middle"])] == pytest.approx(0.14)
    assert leaves[str(pools["late"])] == pytest.approx(0.3)


def test_it_round_trips_the_spec_through_json_and_yaml(pools, tmp_path):
    spec = _spec(
        pools,
        64_000,
        stages=[
            {
                "name": "anneal",
                "tokens": 6400,
                "components": [{"pool": str(pools["late"]), "weight": 1}],
            }
        ],
    )
    (tmp_path / "m.json").write_text(json.dumps(spec.to_dict()))
    import yaml

    (tmp_path / "m.yaml").write_text(yaml.safe_dump(spec.to_dict()))
    for name in ("m.json", "m.yaml"):
        again = MixtureSpec.from_file(tmp_path / name)
        assert again.to_dict() == spec.to_dict()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["components"][1].update(weight=0), r"components\[1\]\.weight"),
        (lambda d: d["components"][1].update(weight=-1), "not positive"),
        (lambda d: d["components"][1].update(pool="/nonexistent/pool"), "unknown pool"),
        (lambda d: d.update(tokens=0), r"tokens: 0 is outside the allowed range \[1, "),
        (lambda d: d.update(tokens=SEQ * 2), "budget too small"),
        (lambda d: d.update(order="sorted"), "order: unknown ordering"),
        (lambda d: d.update(max_repetitions=0.5, tokens=SEQ * 40_000), "max_repetitions: pool"),
        (lambda d: d["components"][0].pop("weight"), r"components\[0\]\.weight: missing"),
    ],
)
def test_it_rejects_bad_specs_naming_the_field(pools, mutate, message):
    data = _spec(pools, SEQ * 1000).to_dict()
    mutate(data)
    with pytest.raises(InputError, match=message):
        spec = MixtureSpec.from_dict(data)
        plan_epochs(spec)


def test_it_rejects_an_empty_pool(pools, tmp_path):
    src = mix_fixtures.tokenized_code(tmp_path)
    from shardcore.pool import build_pool

    build_pool(
        [str(src)],
        str(tmp_path / "empty"),
        seq_len=SEQ,
        filter="package = 'nope'",
        allow_empty=True,
    )
    data = _spec(pools, SEQ * 1000).to_dict()
    data["components"][1]["pool"] = str(tmp_path / "empty")
    with pytest.raises(InputError, match="empty pool"):
        plan_epochs(MixtureSpec.from_dict(data))


def test_it_plans_epochs_from_weight_budget_and_pool_size(pools):
    tokens = SEQ * 30_000
    plan = {row["pool"]: row for row in plan_epochs(_spec(pools, tokens))}
    early = plan[str(pools["early"])]
    records = Pool(pools["early"]).num_records
    assert early["samples"] == pytest.approx(0.56 * 30_000, abs=1)
    assert early["epochs"] == pytest.approx(0.56 * tokens / (records * SEQ), rel=1e-3)
    assert early["epochs"] > 1 > plan[str(pools["middle"])]["epochs"]
    exact = {row["pool"]: row["samples"] for row in plan_epochs(_spec(pools, tokens), exact=True)}
    for key, row in plan.items():
        assert abs(row["samples"] - exact[key]) <= 1


def test_it_builds_a_megatron_exact_schedule_with_roll_over(pools, tmp_path):
    spec = _spec(pools, SEQ * 30_000)
    manifest = build_mixture(spec, tmp_path / "mix")
    mix = Mixture(tmp_path / "mix")
    pidx = np.asarray(mix.pool_index)
    rec = np.asarray(mix.record_index)
    assert manifest["kind"] == "mixture" and mix.num_samples == 30_000
    di, _ = blend.build_blending_indices(manifest["stages"][0]["weights"], 30_000)
    np.testing.assert_array_equal(pidx, di)
    # The early pool is read 3.x times: each epoch is a permutation of all its records,
    # epoch 0 in pool order, later epochs in fresh orders.
    n = Pool(pools["early"]).num_records
    early = rec[pidx == 0]
    assert early.size > 3 * n
    np.testing.assert_array_equal(early[:n], np.arange(n))
    for e in (1, 2):
        epoch = early[e * n : (e + 1) * n]
        assert np.array_equal(np.sort(epoch), np.arange(n))
        assert not np.array_equal(epoch, np.arange(n))
    assert not np.array_equal(early[n : 2 * n], early[2 * n : 3 * n])
    # The middle pool is read fractionally, without repeats.
    middle = rec[pidx == 1]
    assert middle.size < Pool(pools["middle"]).num_records
    assert np.unique(middle).size == middle.size
    # The schedule names real tokens.
    p, r = mix.sample(123)
    assert np.array_equal(mix.tokens(123), Pool(pools[["early", "middle", "late"][p]]).record(r))


def test_it_gives_the_same_bytes_for_the_same_spec(pools, tmp_path):
    a = build_mixture(_spec(pools, SEQ * 5000), tmp_path / "a")
    b = build_mixture(_spec(pools, SEQ * 5000), tmp_path / "b")
    assert a["fingerprint"] == b["fingerprint"]
    assert a["files"] == b["files"]


def test_it_switches_stages_at_the_right_token(pools, tmp_path):
    tokens, anneal = SEQ * 20_000, SEQ * 2_000
    stage = {
        "name": "anneal",
        "tokens": anneal,
        "components": [
            {"pool": str(pools["late"]), "weight": 0.9},
            {"pool": str(pools["middle"]), "weight": 0.1},
        ],
    }
    manifest = build_mixture(_spec(pools, tokens, stages=[stage]), tmp_path / "staged")
    main, last = manifest["stages"]
    assert last["name"] == "anneal"
    assert last["first_token"] == tokens - anneal
    assert last["first_sample"] == main["num_samples"] == (tokens - anneal) // SEQ
    mix = Mixture(tmp_path / "staged")
    pidx = np.asarray(mix.pool_index)
    switch = last["first_sample"]
    assert (pidx[switch:] != 0).all()  # the early pool is absent from the anneal stage
    assert (pidx[:switch] == 0).mean() == pytest.approx(0.56, abs=1e-3)
    assert (pidx[switch:] == 2).mean() == pytest.approx(0.9, abs=1e-3)
    # The middle pool continues where main left off: no record repeats across stages.
    middle = np.asarray(mix.record_index)[pidx == 1]
    assert np.unique(middle).size == middle.size
    stages = mix.labels("stage")
    assert stages[switch - 1] == "main" and stages[switch] == "anneal"


def test_it_names_the_first_stage_and_writes_the_name_only_when_not_main(pools, tmp_path):
    """A continuation of a run in its anneal names its first stage "anneal"; "main" is the
    default and is never written, so a spec without the field keeps its fingerprint."""
    plain = _spec(pools, SEQ * 5000)
    assert "first_stage" not in plain.to_dict()
    assert MixtureSpec.from_dict({**plain.to_dict(), "first_stage": "main"}).to_dict() == (
        plain.to_dict()
    )
    named = _spec(pools, SEQ * 5000, first_stage="anneal")
    assert named.to_dict()["first_stage"] == "anneal"
    assert MixtureSpec.from_dict(named.to_dict()).to_dict() == named.to_dict()
    assert [name for name, _ in named.stage_components()] == ["anneal"]
    a = build_mixture(plain, tmp_path / "main")
    b = build_mixture(named, tmp_path / "anneal")
    assert [st["name"] for st in a["stages"]] == ["main"]
    assert [st["name"] for st in b["stages"]] == ["anneal"]
    assert a["fingerprint"] != b["fingerprint"]
    assert a["files"] == b["files"]  # the same schedule, only its stage's name differs
    assert set(Mixture(tmp_path / "anneal").labels("stage").tolist()) == {"anneal"}
    with pytest.raises(InputError, match="first_stage: .* non-empty string"):
        _spec(pools, SEQ * 5000, first_stage="")
    stage = {
        "name": "anneal",
        "tokens": SEQ * 100,
        "components": [{"pool": str(pools["late"]), "weight": 1}],
    }
    with pytest.raises(InputError, match=r"stages\[0\]\.name: stage 'anneal' is named twice"):
        _spec(pools, SEQ * 5000, first_stage="anneal", stages=[stage])


def test_it_orders_a_mixture_for_diversity(pools, tmp_path):
    from shardcore import quality

    blended = build_mixture(_spec(pools, SEQ * 8000), tmp_path / "blend")
    diverse = build_mixture(
        _spec(pools, SEQ * 8000, order="diversity", order_options={"by": ["package"]}),
        tmp_path / "div",
    )
    a, b = Mixture(tmp_path / "blend"), Mixture(tmp_path / "div")
    # Same samples, another order.
    key_a = sorted(
        zip(np.asarray(a.pool_index).tolist(), np.asarray(a.record_index).tolist(), strict=True)
    )
    key_b = sorted(
        zip(np.asarray(b.pool_index).tolist(), np.asarray(b.record_index).tolist(), strict=True)
    )
    assert key_a == key_b
    assert blended["fingerprint"] != diverse["fingerprint"]
    pkg = b.labels("package")
    shuffled = pkg[np.random.default_rng(0).permutation(pkg.size)]
    ours = quality.window_deviation(b.labels("pool"), [1024])["max_all"][0]
    theirs = quality.window_deviation(
        a.labels("pool")[np.random.default_rng(0).permutation(pkg.size)], [1024]
    )["max_all"][0]
    assert ours <= 0.25 * theirs
    assert (
        quality.window_deviation(pkg, [1024])["max_all"][0]
        < quality.window_deviation(shuffled, [1024])["max_all"][0]
    )


def test_it_plans_from_catalog_manifests_without_reading_pools():
    spec = {
        "tokens": 1000 * SEQ,
        "components": [{"pool": "en", "weight": 3}, {"pool": "de", "weight": 1}],
        "max_repetitions": 2,
    }
    manifests = {
        "en": {"num_records": 500, "seq_len": SEQ},
        "de": {"num_records": 100, "seq_len": SEQ},
    }
    with pytest.raises(InputError, match="max_repetitions: pool 'de' would be read 2.50 times"):
        plan_epochs(spec, manifests)
    manifests["de"]["num_records"] = 200
    plan = plan_epochs(spec, manifests)
    assert [(r["pool"], r["samples"], r["epochs"]) for r in plan] == [
        ("en", 750, 1.5),
        ("de", 250, 1.25),
    ]
    with pytest.raises(InputError, match="unknown pool"):
        plan_epochs(spec, {"en": manifests["en"]})


def test_it_keeps_every_window_of_a_blended_mixture_within_the_blend_tolerance(pools, tmp_path):
    manifest = build_mixture(_spec(pools, SEQ * 20_000), tmp_path / "windows")
    pidx = np.asarray(Mixture(tmp_path / "windows").pool_index)
    weights = np.asarray(manifest["stages"][0]["weights"])
    tolerance = blend.window_tolerance(weights)
    counts = np.zeros((pidx.size + 1, weights.size), dtype=np.int64)
    counts[1:] = np.cumsum(np.eye(weights.size, dtype=np.int64)[pidx], axis=0)
    for window in (16, 256, 4096):
        in_window = counts[window:] - counts[:-window]
        assert np.abs(in_window - weights * window).max() <= tolerance
    shuffled = np.random.default_rng(0).permutation(pidx)
    counts[1:] = np.cumsum(np.eye(weights.size, dtype=np.int64)[shuffled], axis=0)
    in_window = counts[4096:] - counts[:-4096]
    assert np.abs(in_window - weights * 4096).max() > tolerance


def test_it_builds_the_same_bytes_as_a_plan_of_units_and_a_rerun_writes_nothing(pools, tmp_path):
    from shardcore import units
    from shardcore.mixture import plan_mixture

    spec = _spec(
        pools,
        64_000,
        stages=[{"name": "anneal", "tokens": 6400, "components": [{"pool": str(pools["late"]), "weight": 1}]}],
    )  # fmt: skip
    direct = build_mixture(spec, tmp_path / "direct")
    plan = plan_mixture(spec, tmp_path / "job")
    assert [[u["id"] for u in phase] for phase in plan.phases] == [
        ["blend"],
        ["records-000", "records-001", "records-002", "records-003"],
    ]
    # Through JSON, as a job stores it.
    by_units = units.run_local(units.Plan.from_json(json.loads(json.dumps(plan.to_json()))))
    assert by_units == direct  # same fingerprint, counts, stages and file checksums
    for name in ("schedule/pool.npy", "schedule/record.npy", "schedule/counts.npy"):
        assert (tmp_path / "job" / name).read_bytes() == (tmp_path / "direct" / name).read_bytes()
    # An interrupted job run again: the finished unit answers its recorded stats.
    before = (tmp_path / "job" / "schedule/pool.npy").stat().st_mtime_ns
    stats = units.run_unit(plan, "blend")
    assert stats["samples"] == direct["num_samples"] and stats["tokens"] == direct["num_tokens"]
    assert (tmp_path / "job" / "schedule/pool.npy").stat().st_mtime_ns == before

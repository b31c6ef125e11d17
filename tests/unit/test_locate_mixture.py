"""Resume in a mixture: the computed location agrees with a scan of the schedule."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardcore.errors import InputError
from shardcore.locate import locate_any, locate_mixture
from shardcore.mixture import Mixture, MixtureSpec, build_mixture
from shardcore.pool import Pool
from tests.unit import mix_fixtures

SEQ = 64


@pytest.fixture(scope="module")
def mixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    pools = mix_fixtures.build_pools(root, seq_len=SEQ)
    spec = MixtureSpec.from_dict(
        {
            "tokens": SEQ * 12_000,
            "seed": 5,
            "order": "diversity",
            "components": [
                {"pool": str(pools["early"]), "weight": 0.5},
                {"pool": str(pools["middle"]), "weight": 0.3},
                {"pool": str(pools["late"]), "weight": 0.2},
            ],
            "stages": [
                {
                    "name": "anneal",
                    "tokens": SEQ * 1000,
                    "components": [{"pool": str(pools["late"]), "weight": 1}],
                }
            ],
        }
    )
    build_mixture(spec, root / "mixture")
    return root / "mixture"


def _scan(path, sample: int) -> dict:
    """The slow way: walk the schedule from the start, counting per pool, then walk the
    pool's shards record by record."""
    mix = Mixture(path)
    stage = None
    for st in mix.manifest["stages"]:
        if st["first_sample"] <= sample:
            stage = st["name"]
    pool_idx, record = None, None
    for i in range(sample + 1):
        pool_idx, record = mix.sample(i)
    pool = Pool(mix.pools[pool_idx]["path"])
    seen = 0
    for shard, info in enumerate(pool.manifest["shards"]):
        if record < seen + info["records"]:
            return {
                "stage": stage,
                "pool": pool_idx,
                "shard": shard,
                "record": record,
                "record_in_shard": record - seen,
            }
        seen += info["records"]
    raise AssertionError("record beyond the pool")


@pytest.mark.parametrize("sample", [0, 1, 777, 10_999, 11_000, 11_999])
def test_it_agrees_with_a_scan(mixture, sample):
    got = locate_mixture(mixture, sample=sample)
    assert {k: got[k] for k in ("stage", "pool", "shard", "record", "record_in_shard")} == _scan(
        mixture, sample
    )
    assert got["token_offset"] == 0


def test_it_locates_token_positions_with_an_offset(mixture):
    got = locate_mixture(mixture, tokens=SEQ * 11_000 + 17)
    assert (got["sample"], got["token_offset"], got["stage"]) == (11_000, 17, "anneal")
    tokens = Mixture(mixture).tokens(11_000)
    pool = Pool(got["pool_path"])
    assert np.array_equal(tokens, pool.reader(got["shard"])[got["record_in_shard"]])


def test_it_dispatches_on_the_artifact_kind(mixture):
    assert locate_any(mixture, sample=5)["stage"] == "main"
    pool_path = Mixture(mixture).pools[0]["path"]
    assert locate_any(pool_path, sample=3)["record"] == 3


def test_it_rejects_positions_past_the_end(mixture):
    with pytest.raises(InputError, match="outside the mixture's 12000 samples"):
        locate_mixture(mixture, sample=12_000)
    with pytest.raises(InputError, match="exactly one"):
        locate_mixture(mixture)


def test_it_locates_in_a_mixture_from_the_command_line(mixture, capsys):
    from shardcore.cli import main

    assert main(["locate", str(mixture), "--tokens", str(SEQ * 11_000 + 17), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer == locate_mixture(mixture, tokens=SEQ * 11_000 + 17)

    assert main(["locate", str(mixture), "--sample", "11000"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("stage anneal, pool ") and f"record {answer['record']:,}" in text

    assert main(["locate", str(mixture), "--sample", "12000"]) == 2
    assert "outside the mixture's 12000 samples" in capsys.readouterr().err

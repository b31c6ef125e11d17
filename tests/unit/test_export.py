"""Exports: megatron-core parses our --data-path into our weights and prefixes; OLMo-core,
nanotron and JSON exports carry the shares and stages; materialize writes the schedule."""

from __future__ import annotations

import json
import os
import shlex

import numpy as np
import pytest
import yaml

from shardcore.errors import InputError
from shardcore.export import export, megatron_blend, megatron_data_args
from shardcore.locate import locate_any
from shardcore.materialize import materialize
from shardcore.mixture import Mixture
from tests.unit import mix_fixtures

SEQ = 32


@pytest.fixture(scope="module")
def mixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    return mix_fixtures.staged_mixture(
        root, root / "mixture", seq_len=SEQ, shard_size=200_000, tokens=SEQ * 6000,
        anneal_tokens=SEQ * 600,
    )  # fmt: skip


def test_it_exports_a_data_path_megatron_parses_into_our_blend(mixture):
    from megatron.core.datasets.utils import get_blend_from_list

    text = export(mixture, "megatron")
    line = next(x for x in text.splitlines() if "--data-path " in x)
    prefixes, weights = get_blend_from_list(shlex.split(line.split("--data-path ", 1)[1]))
    ours_w, ours_p = megatron_blend(mixture, "main")
    assert prefixes == ours_p and weights == ours_w
    assert len(prefixes) > 2  # the sharded pool contributes several prefixes
    # Weights are the stage's samples per shard: exactly the stage's shares.
    main = Mixture(mixture).manifest["stages"][0]
    assert sum(weights) == main["num_samples"]
    for p in prefixes:
        assert os.path.exists(p + ".bin") and os.path.exists(p + ".idx")
    args = megatron_data_args(mixture, "anneal").split()
    anneal_p, anneal_w = get_blend_from_list(args)
    late = [w for w, p in zip(anneal_w, anneal_p, strict=True) if "pool-late" in p]
    assert sum(late) == 600  # the anneal's samples; earlier shards only keep their samples
    assert "--split 100,0,0" in text and "--train-samples 6000" in text


def test_it_exports_olmo_and_nanotron_configs(mixture):
    olmo = list(yaml.safe_load_all(export(mixture, "olmo")))  # shares only: one per stage
    main = olmo[0]["dataset"]["source_mixture_config"]
    ratios = [s["target_ratio"] for s in main["source_list"]["sources"]]
    assert ratios == pytest.approx([2 / 3, 1 / 3])
    assert main["requested_tokens"] == (6000 - 600) * (SEQ + 1)  # OLMo-core's instances
    assert all(p.endswith(".bin") for s in main["source_list"]["sources"] for p in s["paths"])
    nano = list(yaml.safe_load_all(export(mixture, "nanotron", global_batch_size=100)))
    stages = nano[-1]["data_stages"]  # one document per launch; the last lists every stage
    assert [s["name"] for s in stages] == ["main", "anneal"]
    assert stages[1]["start_training_step"] == 5400 // 100 + 1
    assert stages[0]["data"]["dataset"]["dataset_weights"] == pytest.approx([2 / 3, 1 / 3])
    plain = json.loads(export(mixture, "json"))
    assert plain["num_samples"] == 6000


def test_it_rejects_an_unknown_format(mixture):
    with pytest.raises(InputError, match="unknown export format"):
        export(mixture, "parquet")


def test_it_materializes_the_schedule_as_shards_megatron_reads(mixture, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    manifest = materialize(mixture, tmp_path / "flat", shard_bytes=200_000)
    mix = Mixture(mixture)
    assert manifest["num_records"] == mix.num_samples
    assert len(manifest["shards"]) > 1
    first = 0
    for info in manifest["shards"]:
        ds = IndexedDataset(str(tmp_path / "flat" / info["prefix"]))
        for k in (0, len(ds) - 1):
            np.testing.assert_array_equal(ds[k], mix.tokens(first + k))
        first += len(ds)
    where = locate_any(tmp_path / "flat", sample=mix.num_samples - 1)
    assert where["shard"] == len(manifest["shards"]) - 1

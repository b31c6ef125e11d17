"""The Megatron export's index files and its limits, without megatron-core: the arrays it
streams range by range equal the ones computed in memory, and a stage listing more shard
prefixes than megatron-core's int16 blend index holds is refused saying what fits.
(test_export_megatron.py checks that megatron-core itself reads the export exactly.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardcore.errors import InputError
from shardcore.export import export
from shardcore.export import megatron as mc
from tests.unit import mix_fixtures

SEQ = 32


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron")
    mix_fixtures.package_split_world(root, seq_len=SEQ, samples=9000, anneal_samples=1500)
    return root, {"a": root / "pool-a", "b": root / "pool-b"}


def test_more_shard_prefixes_than_the_int16_blend_index_is_refused_saying_what_fits(
    built, tmp_path, monkeypatch
):
    """megatron-core's blend index is int16: a stage listing more shard prefixes than it
    holds is refused before anything is written, with the two ways out (larger pool
    shards, or a materialized copy with large enough shards). The limit is lowered to this
    mixture's shard count here; at 32,766 the message is the same."""
    root, _ = built
    _, blends = mc.stage_blends(root / "mixture")
    most = max(len(b.prefixes) for b in blends)
    monkeypatch.setattr(mc, "MAX_PREFIXES", most - 1)
    out = tmp_path / "refused"
    with pytest.raises(InputError) as exc:
        export(root / "mixture", "megatron", out=out)
    message = str(exc.value)
    assert f"reads {most:,} shard prefixes" in message and f"at most {most - 1:,}" in message
    assert "shards 2x larger" in message and "shardyard pool --shard-size" in message
    mb = int(message.split("--shard-mb ")[1].split(")")[0])
    assert mb >= 1 and "export the materialized copy" in message
    assert not out.exists()
    monkeypatch.setattr(mc, "MAX_PREFIXES", most)
    assert export(root / "mixture", "megatron").startswith("# Megatron-LM arguments")


def test_the_streamed_index_files_equal_the_arrays_computed_in_memory(built, tmp_path):
    """The export writes megatron-core's arrays range by range; each prefix's document,
    sample and shuffle index equal ``gpt_indices`` of the prefix's records in schedule
    order, and the blend rows the prefix of every sample with its rank among the
    prefix's samples (then the first rows again, past the training samples)."""
    root, _ = built
    out = tmp_path / "streamed"
    export(root / "mixture", "megatron", out=out, tokenizer_build="default")
    record = json.loads((out / "export.json").read_text())
    _, blends = mc.stage_blends(root / "mixture")
    cache = out / "cache"
    for b, stage in zip(blends, record["stages"], strict=True):
        d, local = b.source.chunk(0, b.end)
        remap = np.full(len(b.source.prefixes), -1, dtype=np.int64)
        remap[b.used] = np.arange(b.used.size)
        d = remap[d]
        bases = stage["keys"][0]["files"]
        for k, base in enumerate(bases[: len(b.prefixes)]):
            mine = local[d == k] if np.any(d == k) else np.zeros(1, dtype=np.int64)
            n = (np.load(cache / f"{base}-shuffle_index.npy").size + 1) // 2
            want = mc.gpt_indices(mine, 2 * n - 1, SEQ)
            for suffix, arr in zip(("document_index", "sample_index", "shuffle_index"), want,
                                   strict=True):  # fmt: skip
                got = np.load(cache / f"{base}-{suffix}.npy")
                assert got.dtype == arr.dtype and np.array_equal(got, arr), (base, suffix)
        if len(bases) > len(b.prefixes):
            di = np.load(cache / f"{bases[-1]}-dataset_index.npy")
            si = np.load(cache / f"{bases[-1]}-dataset_sample_index.npy")
            np.testing.assert_array_equal(di[: b.end], d)
            rank = np.empty(b.end, dtype=np.int64)
            for k in range(len(b.prefixes)):
                rank[d == k] = np.arange(int(np.sum(d == k)))
            np.testing.assert_array_equal(si[: b.end], rank)
            tail = np.arange(b.end, di.size) % b.end
            np.testing.assert_array_equal(di[b.end :], d[tail])
            np.testing.assert_array_equal(si[b.end :], rank[tail])

"""Megatron, exact: megatron-core 0.16 itself (BlendedMegatronDatasetBuilder over GPTDataset)
builds from our Megatron export with ``--data-cache-path``, loads our index cache without
building any index, and its sample i is ``Mixture.tokens(i)``: for a two-pool mixture whose
pools have several shards, over two stages (one data-args file each), and for the same
mixture materialized. Real text (CPython stdlib through the fixtures), real tokenizer object
of megatron-core, a real (single-process gloo) torch.distributed group as Megatron-LM runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from shardcore import megatron_cache as mc
from shardcore.errors import InputError
from shardcore.export import export, megatron_data_args
from shardcore.manifest import read_manifest
from shardcore.materialize import materialize
from shardcore.mixture import Mixture, MixtureSpec, build_mixture
from shardcore.pool import build_pool
from tests.unit import mix_fixtures

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core.datasets.gpt_dataset")

SEQ = 32
SEED = 1234


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """A one-process gloo group: Megatron-LM always runs under torch.distributed, and
    megatron-core's BlendedDataset asks for the rank when it has to build."""
    import torch.distributed as td

    if td.is_initialized():
        yield
        return
    store = td.FileStore(str(tmp_path_factory.mktemp("dist") / "store"), 1)
    td.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    td.destroy_process_group()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron")
    src = mix_fixtures.tokenized_code(root)
    pools = {}
    for name, expr in (("a", "package < 'e'"), ("b", "package >= 'e'")):
        pools[name] = root / f"pool-{name}"
        build_pool(
            [str(src)],
            str(pools[name]),
            seq_len=SEQ,
            seed=5,
            filter=expr,
            shard_size=150_000,
            val_fraction=0.05,
        )
    spec = MixtureSpec.from_dict(
        {
            "tokens": SEQ * 9000,
            "seed": 11,
            "components": [
                {"pool": str(pools["a"]), "weight": 2},
                {"pool": str(pools["b"]), "weight": 1},
            ],
            "stages": [
                {
                    "name": "anneal",
                    "tokens": SEQ * 1500,
                    "components": [{"pool": str(pools["b"]), "weight": 1}],
                }
            ],
        }
    )
    build_mixture(spec, root / "mixture")
    materialize(root / "mixture", root / "flat", shard_bytes=64 * 1024)
    return root, pools


def _tokenizer(vocab: int):
    """A real megatron-core tokenizer (its null library: ids in, ids out)."""
    from megatron.core.tokenizers import MegatronTokenizer

    return MegatronTokenizer.from_pretrained(metadata_path={"library": "null"}, vocab_size=vocab)


def _build(data_args_file: Path, train_samples: int, cache: Path, tok, seed: int = SEED):
    """What Megatron-LM's pretrain_gpt.py does with --data-args-path, --train-samples,
    --seq-length, --seed, --split 100,0,0 and --data-cache-path."""
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.utils import get_blend_from_list

    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=SEQ,
        blend=get_blend_from_list(data_args_file.read_text().split()),
        split="100,0,0",
        path_to_cache=str(cache),
        tokenizer=tok,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    builder = BlendedMegatronDatasetBuilder(GPTDataset, [train_samples, 0, 0], lambda: True, config)
    return builder.build()[0]


class BuildCalls:
    """Counts calls of megatron-core's index builders (they still run when called)."""

    def __init__(self, monkeypatch):
        from megatron.core.datasets import gpt_dataset, helpers

        self.calls: dict[str, int] = {}
        for mod, name in (
            (helpers, "build_sample_idx"),
            (helpers, "build_blending_indices"),
            (gpt_dataset, "_build_document_index"),
            (gpt_dataset, "_build_shuffle_index"),
        ):
            monkeypatch.setattr(mod, name, self._counted(name, getattr(mod, name)))

    def _counted(self, name, fn):
        def wrapper(*a, **k):
            self.calls[name] = self.calls.get(name, 0) + 1
            return fn(*a, **k)

        return wrapper

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def _snapshot(*dirs: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for d in dirs:
        for p in Path(d).rglob("*"):
            st = p.stat()
            out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


def _sample(ds, i: int) -> np.ndarray:
    item = ds[i]
    return np.concatenate([item["tokens"].numpy(), item["labels"].numpy()[-1:]])


def _check_exact(tmp_path, monkeypatch, artifact: Path, mixture: Path, pool_dirs: list[Path]):
    mix = Mixture(mixture)
    vocab = int(mix.manifest["tokenizer"]["vocab_size"])
    tok = _tokenizer(vocab)
    out = tmp_path / "export"
    text = export(
        artifact, "megatron", out=out, seed=SEED, tokenizer=json.dumps(tok.unique_identifiers)
    )
    assert "ORDER NOT GUARANTEED" not in text
    record = json.loads((out / "export.json").read_text())
    assert record["exact"] and record["stages"][0]["keys_via"].startswith("megatron-core 0.16")
    stages = mix.manifest["stages"]
    assert [s["name"] for s in stages] == ["main", "anneal"]
    calls = BuildCalls(monkeypatch)
    before = _snapshot(out, *pool_dirs)
    for st in stages:
        end = st["first_sample"] + st["num_samples"]
        args_file = out / f"data-args-{st['name']}.txt"
        assert f"--data-args-path {args_file} --train-samples {end}" in text
        ds = _build(args_file, end, out / "cache", tok)
        assert calls.total == 0, f"megatron-core built indices: {calls.calls}"
        assert len(ds) >= end
        # Stage k's data covers every sample up to its end: a resume at any step is exact.
        for i in range(end):
            got = _sample(ds, i)
            want = mix.tokens(i)
            assert np.array_equal(got, want), f"stage {st['name']}: sample {i} differs"
    assert _snapshot(out, *pool_dirs) == before  # nothing written: no cache, no pool files
    return out, tok


def test_megatron_reads_the_mixture_exactly_from_the_cache(built, dist, tmp_path, monkeypatch):
    root, pools = built
    assert all(Mixture(root / "mixture").pools) and all(
        len(read_manifest(p)["shards"]) >= 3 for p in pools.values()
    )
    _check_exact(tmp_path, monkeypatch, root / "mixture", root / "mixture", list(pools.values()))


def test_megatron_reads_the_materialized_copy_exactly(built, dist, tmp_path, monkeypatch):
    root, pools = built
    flat = root / "flat"
    assert len(read_manifest(flat)["shards"]) >= 3
    _check_exact(tmp_path, monkeypatch, flat, root / "mixture", [flat, *pools.values()])


def test_other_trainer_arguments_miss_the_cache_and_reorder(built, dist, tmp_path, monkeypatch):
    """The negative control: another --seed is another key, megatron-core builds its own
    indices (the counters see it) and its samples are not ours."""
    root, pools = built
    mix = Mixture(root / "mixture")
    tok = _tokenizer(int(mix.manifest["tokenizer"]["vocab_size"]))
    out = tmp_path / "export"
    export(root / "mixture", "megatron", out=out, tokenizer=json.dumps(tok.unique_identifiers))
    calls = BuildCalls(monkeypatch)
    end = mix.manifest["stages"][0]["num_samples"]
    ds = _build(out / "data-args-main.txt", end, out / "cache", tok, seed=SEED + 1)
    assert calls.calls.get("build_sample_idx", 0) > 0 and calls.calls.get("build_blending_indices")
    same = sum(np.array_equal(_sample(ds, i), mix.tokens(i)) for i in range(200))
    assert same < 20


def test_keys_of_the_replica_equal_megatron_cores(built):
    root, _ = built
    _, blends = mc.stage_blends(root / "mixture")
    for b in blends:
        for tok in ("NullTokenizer:100277", "HuggingFaceTokenizer:/models/tok"):
            ids, _ = mc.tokenizer_identity(tok, None)
            for split in ("100,0,0", "100, 0, 0", "1", None):  # None: per-split blends
                args = mc.MegatronArgs(seed=7, split=split, tokenizer=ids)
                for n in (len(b.prefixes), 1):  # one prefix per split: no BlendedDataset
                    pre, w = b.prefixes[:n], b.weights[:n]
                    core = mc.cache_keys(pre, w, b.end, args, SEQ, use_megatron=True)
                    rep = mc.cache_keys(pre, w, b.end, args, SEQ, use_megatron=False)
                    assert core.gpt == rep.gpt and core.blended == rep.blended
                    assert (core.num_samples, core.size) == (rep.num_samples, rep.size)
                    assert (core.blended is None) == (split is None and n == 1)


def test_legacy_tokenizer_identity_is_megatron_lms(monkeypatch):
    ids, cli = mc.tokenizer_identity("NullTokenizer:50304", None)
    assert ids == {"class": "_NullTokenizer", "tokenizer_path": [None], "vocab_size": "50304"}
    assert cli == "--tokenizer-type NullTokenizer --vocab-size 50304"
    ids, _ = mc.tokenizer_identity(None, {"spec": "hf:/m/tok", "vocab_size": 5})
    assert ids == {"class": "_HuggingFaceTokenizer", "tokenizer_path": ["/m/tok"]}
    ids, _ = mc.tokenizer_identity(None, {"spec": "tiktoken:cl100k_base", "vocab_size": 100277})
    assert ids["vocab_size"] == "100277"
    with pytest.raises(InputError, match="tokenizer: unknown"):
        mc.tokenizer_identity("SentencePiece:x", None)


def test_a_partial_train_split_or_other_seq_length_says_order_not_guaranteed(built, tmp_path):
    root, _ = built
    for options in ({"split": "969,30,1"}, {"seq_length": SEQ * 2}):
        out = tmp_path / "x".join(options)
        text = export(root / "mixture", "megatron", out=out, **options)
        assert "ORDER NOT GUARANTEED" in text
        assert not (out / "cache").exists()
        assert json.loads((out / "export.json").read_text())["exact"] is False
    assert "ORDER NOT GUARANTEED" in export(root / "mixture", "megatron")  # no output dir


def test_stage_data_args_cover_every_shard_read_up_to_the_stage_end(built):
    root, pools = built
    mix = Mixture(root / "mixture")
    _, blends = mc.stage_blends(root / "mixture")
    main, anneal = blends
    assert (main.first, anneal.first, anneal.end) == (0, main.end, mix.num_samples)
    # The anneal reads only pool b, but its list also holds pool a's shards (for the
    # samples before it), at the negligible weight.
    a_shards = [p for p in anneal.prefixes if p.startswith(str(pools["a"]))]
    assert a_shards and all(
        w == mc.ABSENT_WEIGHT
        for w, p in zip(anneal.weights, anneal.prefixes, strict=True)
        if p in a_shards
    )
    counts = [w for w in anneal.weights if w != mc.ABSENT_WEIGHT]
    assert sum(counts) == anneal.end - anneal.first and all(w == int(w) for w in counts)
    listed = megatron_data_args(root / "mixture", "anneal").split()
    assert listed[1::2] == anneal.prefixes
    for p in main.prefixes:
        assert os.path.exists(p + ".bin") and os.path.exists(p + ".idx")


def test_it_checks_the_trainers_arguments_against_the_export(built, tmp_path, capsys):
    from shardcore.cli import main

    root, _ = built
    out = tmp_path / "export"
    text = export(root / "mixture", "megatron", out=out)
    lines = [x for x in text.splitlines() if x.startswith("--seq-length")]
    assert len(lines) == 2 and "--tokenizer-type NullTokenizer --vocab-size" in lines[0]
    for line in lines:  # each stage's printed arguments are exact
        assert mc.check_trainer_args(out, "torchrun pretrain_gpt.py " + line) == []
    main_line = lines[0]
    for old, new, says in (
        ("--seed 1234", "--seed 1", "--seed 1 differs"),
        ("--split 100,0,0", "", "--split 969, 30, 1 differs"),  # Megatron-LM's default
        ("--vocab-size ", "--vocab-size 1", "--vocab-size"),
        ("--train-samples ", "--train-samples 1", "--train-samples"),
        ("--data-cache-path ", "--data-cache-path /elsewhere ", "--data-cache-path"),
        ("--seq-length ", "--dataloader-type cyclic --seq-length ", "cyclic"),
    ):
        problems = mc.check_trainer_args(out, main_line.replace(old, new, 1))
        assert any(says in p for p in problems), (old, problems)
    argv = ["export", str(root / "mixture"), "--format", "megatron", "--out", str(out)]
    assert main([*argv, "--check-trainer-args", main_line]) == 0
    assert "exact" in capsys.readouterr().out
    assert main([*argv, "--check-trainer-args", main_line.replace("--seed 1234", "")]) == 0
    assert main([*argv, "--check-trainer-args", main_line.replace("--seed 1234", "--seed 9")]) == 1
    assert "ORDER NOT GUARANTEED" in capsys.readouterr().out


def test_megatron_reads_it_exactly_per_split_with_the_pools_validation(
    built, dist, tmp_path, monkeypatch
):
    """--per-split-data-args-path: train from the cache (its files untouched), validation
    from the pools' val/ slices, which megatron-core indexes itself."""
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.utils import get_blend_from_list

    root, pools = built
    mix = Mixture(root / "mixture")
    tok = _tokenizer(int(mix.manifest["tokenizer"]["vocab_size"]))
    out = tmp_path / "export"
    text = export(
        root / "mixture",
        "megatron",
        out=out,
        per_split=True,
        tokenizer=json.dumps(tok.unique_identifiers),
    )
    assert "--split 100" not in text and "--per-split-data-args-path" in text
    for st in mix.manifest["stages"]:
        end = st["first_sample"] + st["num_samples"]
        lists = json.loads((out / f"per-split-{st['name']}.json").read_text())
        assert lists["test"] is None and all("/val/" in p for p in lists["valid"].split()[1::2])
        config = GPTDatasetConfig(
            random_seed=SEED,
            sequence_length=SEQ,
            blend_per_split=[
                get_blend_from_list(lists["train"].split()),
                get_blend_from_list(lists["valid"].split()),
                None,
            ],
            path_to_cache=str(out / "cache"),
            tokenizer=tok,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
        )
        train_files = {p.name for p in (out / "cache").glob("*-train-*")}
        before = _snapshot(out / "cache", *pools.values())
        train, valid, test = BlendedMegatronDatasetBuilder(
            GPTDataset, [end, 64, 0], lambda: True, config
        ).build()
        after = _snapshot(out / "cache", *pools.values())
        assert {k: v for k, v in after.items() if "-train-" in k} == {
            k: v for k, v in before.items() if "-train-" in k
        }
        assert train_files and any("-valid-" in k for k in after)  # valid: megatron's build
        assert test is None and len(valid) >= 64
        for i in range(st["first_sample"], end):
            assert np.array_equal(_sample(train, i), mix.tokens(i)), f"sample {i}"
        line = next(x for x in text.splitlines() if f"per-split-{st['name']}.json" in x)
        assert mc.check_trainer_args(out, line) == []
        assert mc.check_trainer_args(out, line + " --split 100,0,0")

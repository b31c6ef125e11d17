"""Megatron, exact: megatron-core 0.16 itself (BlendedMegatronDatasetBuilder over GPTDataset)
builds from our Megatron export with ``--data-cache-path``, loads our index cache without
building any index, and its sample i is ``Mixture.tokens(i)``: for a two-pool mixture whose
pools have several shards, over two stages (one data-args file each), and for the same
mixture materialized. Real text (CPython stdlib through the fixtures), real tokenizer object
of megatron-core, a real (single-process gloo) torch.distributed group as Megatron-LM runs."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import numpy as np
import pytest

from shardcore.errors import InputError
from shardcore.export import export, megatron_data_args
from shardcore.export import megatron as mc
from shardcore.export.megatron import check as megatron_check
from shardcore.manifest import read_manifest
from shardcore.mixture import Mixture
from tests.unit import megatron_lm, mix_fixtures

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
    mix_fixtures.package_split_world(root, seq_len=SEQ, samples=9000, anneal_samples=1500)
    return root, {"a": root / "pool-a", "b": root / "pool-b"}


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


def _stage_lines(text: str) -> list[str]:
    """The printed command line of each stage (the lines that start with the arguments)."""
    return [x for x in text.splitlines() if x.startswith("--seq-length")]


_SCHEDULES: dict[str, np.ndarray] = {}


def _schedule_tokens(mixture: Path) -> np.ndarray:
    """Every sample of the mixture (``Mixture.tokens``), computed once per module."""
    if str(mixture) not in _SCHEDULES:
        mix = Mixture(mixture)
        _SCHEDULES[str(mixture)] = np.stack([mix.tokens(i) for i in range(mix.num_samples)])
    return _SCHEDULES[str(mixture)]


def _check_exact(tmp_path, monkeypatch, artifact: Path, mixture: Path, pool_dirs: list[Path],
                 legacy: bool = False, **options):  # fmt: skip
    """Run every stage's printed command line as pretrain_gpt.py builds its dataset (the
    tokenizer from megatron-core's build_tokenizer on those arguments, or with
    ``--legacy-tokenizer`` appended, Megatron-LM's legacy one): every sample is the
    mixture's, and megatron-core builds no index and writes no file."""
    mix = Mixture(mixture)
    out = tmp_path / "export"
    text = export(artifact, "megatron", out=out, seed=SEED, **options)
    assert "ORDER NOT GUARANTEED" not in text
    assert (out / "megatron.txt").read_text() == text
    record = json.loads((out / "export.json").read_text())
    assert record["exact"] and record["stages"][0]["keys_via"].startswith("megatron-core 0.16")
    stages = mix.manifest["stages"]
    assert [s["name"] for s in stages] == ["main", "anneal"]
    lines = _stage_lines(text)
    assert len(lines) == len(stages)
    calls = BuildCalls(monkeypatch)
    before = _snapshot(out, *pool_dirs)
    identities = set()
    for st, line in zip(stages, lines, strict=True):
        end = st["first_sample"] + st["num_samples"]
        args_file = out / f"data-args-{st['name']}.txt"
        assert f"--data-args-path {args_file} --train-samples {end}" in line
        if legacy and "--legacy-tokenizer" not in line:
            line += " --legacy-tokenizer"
        ds, valid, test, tok = megatron_lm.build_datasets(line)
        identities.add(json.dumps(tok.unique_identifiers))
        assert calls.total == 0, f"megatron-core built indices: {calls.calls}"
        assert valid is None and test is None and len(ds) >= end
        # Stage k's data covers every sample up to its end: a resume at any step is exact.
        want = _schedule_tokens(mixture)
        same = sum(np.array_equal(_sample(ds, i), want[i]) for i in range(end))
        assert same == end, f"stage {st['name']}: {same} of {end} samples equal"
    assert _snapshot(out, *pool_dirs) == before  # nothing written: no cache, no pool files
    (ids,) = identities
    assert ("_NullTokenizer" in ids) == legacy
    return out, text


@pytest.mark.parametrize("legacy", [False, True], ids=["default-tokenizer", "legacy-tokenizer"])
def test_megatron_reads_the_mixture_exactly_from_the_cache(
    built, dist, tmp_path, monkeypatch, legacy
):
    root, pools = built
    assert all(Mixture(root / "mixture").pools) and all(
        len(read_manifest(p)["shards"]) >= 3 for p in pools.values()
    )
    _check_exact(
        tmp_path, monkeypatch, root / "mixture", root / "mixture", list(pools.values()), legacy
    )


@pytest.mark.parametrize("legacy", [False, True], ids=["default-tokenizer", "legacy-tokenizer"])
def test_megatron_reads_the_materialized_copy_exactly(built, dist, tmp_path, monkeypatch, legacy):
    root, pools = built
    flat = root / "flat"
    assert len(read_manifest(flat)["shards"]) >= 3
    _check_exact(tmp_path, monkeypatch, flat, root / "mixture", [flat, *pools.values()], legacy)


def test_a_mixture_past_megatron_cores_prefix_limit_is_fitted_and_read_exactly(
    built, dist, tmp_path, monkeypatch
):
    """``--fit DIR``: a stage listing more shard prefixes than megatron-core's int16 blend
    index holds (lowered to this mixture's count here; 32,766 in megatron-core) is
    materialized into DIR in shards of the size that fits, and that copy is exported: its
    stages fit, and megatron-core reads every sample of the mixture from it, building no
    index. A mixture that fits is exported as it is, nothing copied."""
    from shardcore.cli import main

    root, pools = built
    _, blends = mc.stage_blends(root / "mixture")
    most = max(len(b.prefixes) for b in blends)
    fitted = tmp_path / "fitted"
    assert main(["export", str(root / "mixture"), "--format", "megatron", "--out",
                 str(tmp_path / "as-is"), "--fit", str(fitted)]) == 0  # fmt: skip
    assert not fitted.exists()
    monkeypatch.setattr(mc, "MAX_PREFIXES", most - 1)
    text = export(root / "mixture", "megatron", out=tmp_path / "via-fit", seed=SEED, fit=fitted)
    copy = read_manifest(fitted)
    assert copy["num_records"] == Mixture(root / "mixture").num_samples
    _, fitted_blends = mc.stage_blends(fitted)
    assert max(len(b.prefixes) for b in fitted_blends) <= most - 1
    assert f"--data-args-path {tmp_path / 'via-fit'}" in text
    _check_exact(tmp_path, monkeypatch, fitted, root / "mixture", [fitted, *pools.values()])


def test_each_tokenizer_build_shares_one_set_of_index_arrays(built, tmp_path):
    root, _ = built
    out = tmp_path / "export"
    export(root / "mixture", "megatron", out=out)
    record = json.loads((out / "export.json").read_text())
    builds = [b for i in record["identities"] for b in i["builds"]]
    assert builds == list(mc.BUILDS) and len(record["identities"]) == 3
    for stage in record["stages"]:
        bases = [k["files"] for k in stage["keys"]]
        assert len(bases) == 3 and len({b[0] for b in bases}) == 3
        for suffix in ("document_index", "sample_index", "shuffle_index"):
            inodes = {(out / "cache" / f"{b[0]}-{suffix}.npy").stat().st_ino for b in bases}
            assert len(inodes) == 1  # hard links of one file
    text = (out / "megatron.txt").read_text()
    assert "megatron-core 0.18.x-0.19.x" in text and "0.16.0, 0.17.1, 0.18.2, 0.19.2" in text


def test_other_trainer_arguments_miss_the_cache_and_reorder(built, dist, tmp_path, monkeypatch):
    """The negative control: the printed line with another --seed is another key,
    megatron-core builds its own indices (the counters see it) and its samples are not
    ours; the same for the line with --legacy-tokenizer when the cache is keyed for
    megatron-core's tokenizer only."""
    root, pools = built
    mix = Mixture(root / "mixture")
    out = tmp_path / "export"
    text = export(root / "mixture", "megatron", out=out, tokenizer_build="default")
    line = _stage_lines(text)[0]
    end = mix.manifest["stages"][0]["num_samples"]
    for changed in (line.replace(f"--seed {SEED}", f"--seed {SEED + 1}"),
                    line + " --legacy-tokenizer"):  # fmt: skip
        assert changed != line
        calls = BuildCalls(monkeypatch)
        ds = megatron_lm.build_datasets(changed)[0]
        assert calls.calls.get("build_sample_idx", 0) > 0
        assert calls.calls.get("build_blending_indices")
        same = sum(np.array_equal(_sample(ds, i), mix.tokens(i)) for i in range(min(end, 200)))
        assert same < 20
        monkeypatch.undo()


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


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    """A real (tiny) HuggingFace tokenizer directory, as --tokenizer-model names one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["</s>"], show_progress=False)
    tok.train_from_iterator(["def f(x):\n    return x + 1\n"] * 20, trainer)
    d = tmp_path_factory.mktemp("hf")
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    return d


def test_tokenizer_identities_are_the_ones_megatron_core_builds(hf_dir):
    """Shardyard's identity for each 0.16 build equals the tokenizer megatron-core 0.16
    builds from the same printed arguments, for both tokenizer types and with
    --trust-remote-code (0.17-0.19: bench/megatron/newest.py)."""
    forms = [
        ("NullTokenizer:50304", ""),
        (f"HuggingFaceTokenizer:{hf_dir}", ""),
        (f"HuggingFaceTokenizer:{hf_dir}", " --trust-remote-code --tokenizer-hf-use-fast"),
    ]
    for spec, extra in forms:
        tok, named = mc.trainer_tokenizer(spec, None)
        assert named is None
        if extra:
            tok = megatron_check._tokenizer_of_argv(
                megatron_check._flags(shlex.split(tok.cli() + extra))
            )[0]
        line = f"--seq-length {SEQ} --split 100,0,0 {tok.cli()}"
        assert tok.cli().endswith(extra)
        real = megatron_lm.build_tokenizer(megatron_lm.parse(line))
        assert tok.identity("core-0.16") == dict(real.unique_identifiers), spec
        if "NullTokenizer" in spec:  # the legacy HF class needs Megatron-LM's code
            legacy = megatron_lm.build_tokenizer(megatron_lm.parse(line + " --legacy-tokenizer"))
            assert tok.identity("legacy-0.16") == dict(legacy.unique_identifiers)


def test_every_megatron_tokenizer_form_prints_a_complete_runnable_command(
    built, dist, tmp_path, hf_dir
):
    """NullTokenizer:VOCAB, HuggingFaceTokenizer:PATH and each JSON identity (0.16 legacy,
    0.16 default, 0.18+ default) print the arguments that build that tokenizer: the
    printed line parses as Megatron-LM's arguments and megatron-core builds its tokenizer
    and dataset from it, loading the cache."""
    root, _ = built
    vocab = int(Mixture(root / "mixture").manifest["tokenizer"]["vocab_size"])
    null = mc.TrainerTokenizer("NullTokenizer", vocab)
    forms = [
        f"NullTokenizer:{vocab}",
        f"HuggingFaceTokenizer:{hf_dir}",
        *(json.dumps(null.identity(b)) for b in ("legacy-0.16", "core-0.16", "core-0.18")),
        json.dumps(
            mc.TrainerTokenizer("HuggingFaceTokenizer", model=str(hf_dir)).identity("core-0.16")
        ),  # fmt: skip
    ]
    for n, form in enumerate(forms):
        out = tmp_path / f"export{n}"
        text = export(root / "mixture", "megatron", out=out, tokenizer=form)
        line = _stage_lines(text)[0]
        assert "--tokenizer-type " in line and mc.check_trainer_args(out, line) == []
        args = megatron_lm.parse(line)
        assert args.tokenizer_type in ("NullTokenizer", "HuggingFaceTokenizer")
        ds, _, _, tok = megatron_lm.build_datasets(line)
        keyed = [i["tokenizer"] for i in json.loads((out / "export.json").read_text())[
            "identities"]]  # fmt: skip
        assert dict(tok.unique_identifiers) in keyed
        if form.startswith("{"):
            assert json.loads(form) in keyed
    with pytest.raises(InputError, match="--megatron-tokenizer: the identity"):
        export(root / "mixture", "megatron", out=tmp_path / "x", tokenizer='{"class": "Mine"}')
    with pytest.raises(InputError, match="--megatron-tokenizer: unknown"):
        mc.trainer_tokenizer("SentencePiece:x", None)


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
        ("--split 100,0,0", "", "--split: missing"),  # megatron-core refuses the blend
        ("--vocab-size ", "--vocab-size 1", "--vocab-size"),
        ("--train-samples ", "--train-samples 1", "--train-samples"),
        ("--data-cache-path ", "--data-cache-path /elsewhere ", "--data-cache-path"),
        ("--seq-length ", "--dataloader-type cyclic --seq-length ", "cyclic"),
    ):
        problems = mc.check_trainer_args(out, main_line.replace(old, new, 1))
        assert any(says in p for p in problems), (old, problems)
    # The list inline: without --split, Megatron-LM's default split keeps part of each prefix.
    stage_file = out / "data-args-main.txt"
    inline = main_line.replace(
        f"--data-args-path {stage_file}", "--data-path " + " ".join(stage_file.read_text().split())
    )
    assert mc.check_trainer_args(out, inline) == []
    problems = mc.check_trainer_args(out, inline.replace("--split 100,0,0", ""))
    assert any("--split 969, 30, 1 differs" in p for p in problems), problems
    argv = ["export", str(root / "mixture"), "--format", "megatron", "--out", str(out)]
    assert main([*argv, "--check-trainer-args", main_line]) == 0
    assert "exact" in capsys.readouterr().out
    assert main([*argv, "--check-trainer-args", main_line.replace("--seed 1234", "")]) == 0
    assert main([*argv, "--check-trainer-args", main_line.replace("--seed 1234", "--seed 9")]) == 1
    assert "ORDER NOT GUARANTEED" in capsys.readouterr().out
    # Keyed for every build (the default): with and without --legacy-tokenizer.
    assert main([*argv, "--check-trainer-args", main_line + " --legacy-tokenizer"]) == 0
    capsys.readouterr()
    # An identity no build of the export has: a 0.18+ pad id.
    assert main([*argv, "--check-trainer-args", main_line + " --null-tokenizer-pad-id 0"]) == 1
    assert "--null-tokenizer-pad-id 0 differs" in capsys.readouterr().out


@pytest.mark.parametrize("build", ["legacy", "default"])
def test_check_trainer_args_refuses_the_other_tokenizer_build(built, tmp_path, capsys, build):
    """Keyed only for the legacy tokenizer, the check refuses the line without
    --legacy-tokenizer (pretrain_gpt would build megatron-core's tokenizer); keyed only for
    megatron-core's, it refuses the line with it; both naming --legacy-tokenizer. Through
    the command line, exit status 1."""
    from shardcore.cli import main

    root, _ = built
    out = tmp_path / "export"
    argv = ["export", str(root / "mixture"), "--format", "megatron", "--out", str(out)]
    assert main([*argv, "--megatron-tokenizer-build", build]) == 0
    line = _stage_lines(capsys.readouterr().out)[0]
    assert ("--legacy-tokenizer" in line) == (build == "legacy")
    builds = json.loads((out / "export.json").read_text())["identities"]
    assert [b for i in builds for b in i["builds"]] == list(mc.BUILD_CHOICES[build])
    assert main([*argv, "--check-trainer-args", line]) == 0
    assert "exact" in capsys.readouterr().out
    other = line.replace(" --legacy-tokenizer", "") if build == "legacy" else (
        line + " --legacy-tokenizer")  # fmt: skip
    assert main([*argv, "--check-trainer-args", other]) == 1
    said = capsys.readouterr().out
    assert "ORDER NOT GUARANTEED" in said and "--legacy-tokenizer" in said
    assert ("missing" in said) == (build == "legacy")


def _cli_check(out: Path, mixture: Path, line: str, capsys) -> tuple[int, str]:
    """``shardyard export ... --check-trainer-args LINE``: (exit status, what it printed)."""
    from shardcore.cli import main

    argv = ["export", str(mixture), "--format", "megatron", "--out", str(out)]
    code = main([*argv, "--check-trainer-args", line])
    return code, capsys.readouterr().out


def _reads_exactly(line: str, mixture: Path, monkeypatch, samples: int = 300) -> bool:
    """Whether megatron-core, building the dataset as pretrain_gpt does from ``line``, builds
    no index and gives the mixture's first ``samples`` samples."""
    calls = BuildCalls(monkeypatch)
    ds = megatron_lm.build_datasets(line)[0]
    want = _schedule_tokens(mixture)
    same = sum(np.array_equal(_sample(ds, i), want[i]) for i in range(samples))
    monkeypatch.undo()
    return calls.total == 0 and same == samples


@pytest.mark.parametrize("flag", ["--sft", "--fim-data"])
def test_check_trainer_args_refuses_the_arguments_that_build_another_dataset_class(
    built, dist, tmp_path, monkeypatch, capsys, flag
):
    """--sft and --fim-data make pretrain_gpt build SFTDataset / GPTFIMDataset, not
    GPTDataset: the check says ORDER NOT GUARANTEED naming the argument and the class. For
    --fim-data megatron-core itself shows why: it keys the indices by the class's name, so
    it builds its own and the samples are not the mixture's."""
    root, _ = built
    out = tmp_path / "export"
    line = _stage_lines(export(root / "mixture", "megatron", out=out))[0]
    assert _cli_check(out, root / "mixture", line, capsys)[0] == 0
    code, said = _cli_check(out, root / "mixture", f"{line} {flag}", capsys)
    assert code == 1 and "ORDER NOT GUARANTEED" in said, said
    cls = {"--sft": "SFTDataset", "--fim-data": "GPTFIMDataset"}[flag]
    assert f"- {flag}: pretrain_gpt.py then builds Megatron-LM's {cls}" in said
    if flag == "--fim-data":
        assert not _reads_exactly(f"{line} {flag}", root / "mixture", monkeypatch)
    else:
        with pytest.raises(NotImplementedError, match="SFTDataset"):
            megatron_lm.build_datasets(f"{line} {flag}")


def test_check_trainer_args_on_fast_cache_load_says_what_megatron_core_does(
    built, dist, tmp_path, monkeypatch, capsys
):
    """--dataloader-fast-cache-load: with a --data-args-path blend megatron-core refuses it
    at start-up, and so does the check (naming it); per split, megatron-core stops at
    start-up until the validation split's indices are in the cache, then reads exactly: the
    check says exact and notes the first run. --dataloader-defer-npy-index-mmap is exact."""
    root, _ = built
    mixture = root / "mixture"
    out = tmp_path / "export"
    line = _stage_lines(export(mixture, "megatron", out=out))[0]
    fast = f"{line} --dataloader-fast-cache-load"
    with pytest.raises(AssertionError, match="cannot be used together"):
        megatron_lm.build_datasets(fast)
    code, said = _cli_check(out, mixture, fast, capsys)
    assert code == 1 and "- --dataloader-fast-cache-load: megatron-core 0.16-0.19 refuse" in said
    assert "cannot be used together" in said and "--per-split" in said
    defer = f"{line} --dataloader-defer-npy-index-mmap"
    assert _reads_exactly(defer, mixture, monkeypatch)
    assert _cli_check(out, mixture, defer, capsys) == (
        0, "exact: Megatron reads the mixture's samples in Shardyard's order\n"
    )  # fmt: skip

    out = tmp_path / "per-split"
    line = _stage_lines(export(mixture, "megatron", out=out, per_split=True))[0]
    fast = f"{line} --dataloader-fast-cache-load"
    code, said = _cli_check(out, mixture, fast, capsys)
    assert code == 0 and said.startswith("exact:"), said
    assert "note: --dataloader-fast-cache-load:" in said and "run once without it" in said
    with pytest.raises(Exception, match="data cache"):
        megatron_lm.build_datasets(fast)  # the validation split's indices are not there
    assert megatron_lm.build_datasets(line)[1] is not None  # indexes the validation split
    assert _reads_exactly(fast, mixture, monkeypatch)


def test_check_trainer_args_accepts_the_stage_list_in_any_proportional_weights(
    built, dist, tmp_path, monkeypatch, capsys
):
    """megatron-core normalizes a blend's weights (each over their float64 sum), so the
    stage's list with every weight doubled is the same blend: megatron-core reads it
    exactly and the check says exact. A multiple whose normalized weights round to other
    floats is another blend key: megatron-core builds its own blend, and the check refuses
    it, saying so. The check's verdict is megatron-core's for each multiple."""
    from megatron.core.datasets.utils import normalize

    root, _ = built
    mixture = root / "mixture"
    out = tmp_path / "export"
    line = _stage_lines(export(mixture, "megatron", out=out))[0]
    stage_file = out / "data-args-main.txt"
    values = stage_file.read_text().split()
    weights = [float(w) for w in values[0::2]]

    def scaled(factor: float) -> str:
        pairs = [f"{w * factor!r} {p}" for w, p in zip(weights, values[1::2], strict=True)]
        return line.replace(f"--data-args-path {stage_file}", "--data-path " + " ".join(pairs))

    rounded = next(
        f for f in (0.1, 0.3, 0.7, 3.0, 7.0)
        if normalize([w * f for w in weights]) != normalize(weights)
    )  # fmt: skip
    for factor in (2.0, rounded):
        exact = _reads_exactly(scaled(factor), mixture, monkeypatch)
        assert exact == (factor == 2.0), factor
        code, said = _cli_check(out, mixture, scaled(factor), capsys)
        assert code == (0 if exact else 1), said
        if not exact:
            assert "--data-path: its weights are in the proportions of stage main's" in said
    # The same list in a file of the user's own: Megatron reads the list, not the file name.
    mine = tmp_path / "mine.txt"
    mine.write_text(" ".join(scaled(2.0).split("--data-path ")[1].split(" --")[0].split()))
    own = line.replace(str(stage_file), str(mine))
    assert _cli_check(out, mixture, own, capsys)[0] == 0


def test_check_trainer_args_notes_that_0_17_and_later_reject_legacy_tokenizer(
    built, tmp_path, capsys
):
    """--legacy-tokenizer reads the cache on megatron-core 0.16 (keyed for every build), but
    Megatron-LM 0.17 and later have no such argument: the check says exact and notes the
    releases that stop at start-up."""
    root, _ = built
    out = tmp_path / "export"
    line = _stage_lines(export(root / "mixture", "megatron", out=out))[0]
    code, said = _cli_check(out, root / "mixture", f"{line} --legacy-tokenizer", capsys)
    assert code == 0 and said.startswith("exact:")
    assert "note: --legacy-tokenizer: only Megatron-LM 0.16.x has it; 0.17 and later" in said
    assert "run without it" in said
    assert "note:" not in _cli_check(out, root / "mixture", line, capsys)[1]
    megatron_lm.parse(f"{line} --legacy-tokenizer", release=(0, 16))
    for release in ((0, 17), (0, 19)):  # Megatron-LM's parser at those tags
        with pytest.raises(SystemExit):
            megatron_lm.parse(f"{line} --legacy-tokenizer", release=release)
    legacy = tmp_path / "legacy"
    line = _stage_lines(export(root / "mixture", "megatron", out=legacy, tokenizer_build="legacy"))[
        0
    ]
    code, said = _cli_check(legacy, root / "mixture", line, capsys)
    assert code == 0 and "export with --megatron-tokenizer-build default" in said


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


def test_megatron_txt_names_only_the_releases_its_line_was_keyed_and_checked_for(
    built, tmp_path, hf_dir
):
    """A line that some supported release does not take (--tokenizer-hf-use-fast left
    megatron-core's arguments in 0.18) is keyed for 0.16-0.17 only: megatron.txt checks it
    with those releases and says the others are not keyed, instead of naming all four."""
    root, _ = built
    fast = mc.TrainerTokenizer("HuggingFaceTokenizer", model=str(hf_dir), hf_use_fast=True)
    text = export(root / "mixture", "megatron", out=tmp_path / "fast",
                  tokenizer=json.dumps(fast.identity("core-0.16")))  # fmt: skip
    assert "--tokenizer-hf-use-fast" in _stage_lines(text)[0]
    assert "# Checked with megatron-core 0.16.0, 0.17.1: every sample equal" in text
    assert "0.18.2" not in text and "0.19.2" not in text
    assert f"# NOT keyed for {mc.BUILDS['core-0.18']}:" in text
    text = export(root / "mixture", "megatron", out=tmp_path / "legacy", tokenizer_build="legacy")
    assert "# Checked with megatron-core 0.16.0: every sample equal" in text
    assert "(0.16.0 with --legacy-tokenizer)" in text and "NOT keyed" not in text
    text = export(root / "mixture", "megatron", out=tmp_path / "all")
    assert "# Checked with megatron-core 0.16.0, 0.17.1, 0.18.2, 0.19.2: every sample" in text
    assert "NOT keyed" not in text

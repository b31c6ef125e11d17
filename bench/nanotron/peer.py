"""The nanotron side of ``bench/nanotron/measure.py``: runs in its own virtual environment
(nanotron's main branch, datatrove 0.10.1, CPU torch) and reports, per launch document of
the export, what nanotron's own code does with it. Not imported by anything else.

Usage (measure.py calls it): python peer.py EXPORT.yaml NANOTRON_SRC OUT_DIR STUBS_DIR
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import traceback

import numpy as np
import yaml


def error_of(fn, *args, **kwargs):
    """None when ``fn(*args, **kwargs)`` runs, else the exception's type and first line."""
    try:
        fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - every failure is a result here
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def main() -> int:
    export_path, src, out, stubs = sys.argv[1:5]
    sys.path.insert(0, stubs)  # flash_attn / triton stand-ins: GPU-only imports
    import torch
    import torch.distributed as tdist
    from datatrove.utils.dataset import DatatroveFolderDataset

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    tdist.init_process_group("gloo", rank=0, world_size=1)

    from importlib.metadata import version

    report = {"versions": {"datatrove": version("datatrove"), "torch": torch.__version__}}
    import nanotron

    report["versions"]["nanotron"] = version("nanotron")
    report["versions"]["transformers"] = version("transformers")
    # Megatron's C++ blending helper, built as nanotron's compile_helper would (its Makefile
    # asks `python3`/`python3-config`, which here are not this interpreter).
    helpers_dir = os.path.join(os.path.dirname(nanotron.__file__), "data", "nemo_dataset")
    inc = subprocess.check_output([sys.executable, "-m", "pybind11", "--includes"], text=True)
    subprocess.run(
        ["make", "-s", "-C", helpers_dir, f"CPPFLAGS={inc.strip()}",
         f"LIBEXT={sysconfig.get_config_var('EXT_SUFFIX')}"],
        check=True,
    )  # fmt: skip
    from nanotron.config import get_config_from_dict
    from nanotron.data.nanoset import Nanoset
    from nanotron.data.nemo_dataset import BlendableDataset
    from nanotron.data.samplers import MegatronPretrainingSampler
    from nanotron.data.tokenized_bytes import build_dataset
    from transformers import AutoTokenizer

    base = yaml.safe_load(open(os.path.join(src, "examples", "config_nanoset.yaml")))
    docs = list(yaml.safe_load_all(open(export_path)))
    ctx = type("Ctx", (), {"world_pg": tdist.group.WORLD})()
    offsets: dict[str, int] = {}  # samples each folder gave earlier launches
    launches = []
    for k, doc in enumerate(docs):
        cfg = dict(base)
        cfg["tokens"] = {**base["tokens"], **doc["tokens"]}
        cfg["data_stages"] = doc["data_stages"]
        cfg["model"] = json.loads(json.dumps(base["model"]))
        cfg["model"]["model_config"]["vocab_size"] = -1  # taken from the dataset
        cfg.pop("tokenizer", None)  # taken from the dataset's tokenizer_name
        cfg["checkpoints"]["checkpoints_path"] = os.path.join(out, "checkpoints")
        res: dict = {"document": k + 1}
        try:
            config = get_config_from_dict(cfg)
            res["config"] = None
            res["stages"] = [[s.name, s.start_training_step] for s in config.data_stages]
            res["tokenizer_name_or_path"] = config.tokenizer.tokenizer_name_or_path
            res["model_vocab_size"] = config.model.model_config.vocab_size
        except BaseException:  # noqa: BLE001
            res["config"] = traceback.format_exc().strip().splitlines()[-1]
            launches.append(res)
            continue
        res["auto_tokenizer"] = error_of(
            AutoTokenizer.from_pretrained, config.tokenizer.tokenizer_name_or_path
        )
        if res["auto_tokenizer"] is None:  # run_train.py asserts it equals the model's
            tok = AutoTokenizer.from_pretrained(config.tokenizer.tokenizer_name_or_path)
            res["tokenizer_len"] = len(tok)
        stage = config.data_stages[-1]  # run_train.py: "we assume we train on last stage"
        ds = stage.data.dataset
        seq, gbs = config.tokens.sequence_length, config.global_batch_size
        res["nanotron_reader"] = error_of(
            build_dataset, ds.dataset_folder[0], seq, token_size=ds.token_size_in_bytes,
            return_positions=ds.return_positions, eos_token_id=None,
            shuffle=ds.shuffle_files, seed=stage.data.seed,
        )  # fmt: skip
        res["nanoset"] = error_of(
            Nanoset, dataset_folders=ds.dataset_folder, sequence_length=seq,
            token_size=ds.token_size_in_bytes, train_split_num_samples=gbs,
            dataset_weights=ds.dataset_weights, random_seed=stage.data.seed,
        )  # fmt: skip
        # The reader nanotron's subclass reduces to, with datatrove 0.10.1's argument names:
        # the folder's *.ds files in name order (shuffle_files false), items of seq + 1.
        readers = [
            DatatroveFolderDataset(
                f, seq_len=seq, filename_pattern="*.ds", recursive=False,
                token_size=ds.token_size_in_bytes, shuffle=bool(ds.shuffle_files),
                seed=stage.data.seed, return_positions=False,
            )
            for f in ds.dataset_folder
        ]  # fmt: skip
        for r in readers:
            r.subset_log = None  # the subclass's log record, only logged
        size = config.tokens.train_steps * gbs  # get_tb_datasets: train_steps * gbs
        blend = BlendableDataset(
            readers, ds.dataset_weights, size, parallel_context=ctx, seed=stage.data.seed,
            consumed_tokens_per_dataset_folder={}, offsets_in_samples=dict(offsets),
        )  # fmt: skip
        sampler = MegatronPretrainingSampler(
            total_samples=size, consumed_samples=0, micro_batch_size=gbs,
            data_parallel_rank=0, data_parallel_size=1, drop_last=True,
            global_batch_size=gbs, pad_samples_to_global_batch_size=False,
        )  # fmt: skip
        steps = config.tokens.train_steps - stage.start_training_step + 1
        idx = [i for _, batch in zip(range(steps), sampler, strict=False) for i in batch]
        folder = np.array([blend.dataset_index[i] for i in idx], dtype=np.int64)
        item = np.array(
            [blend.dataset_sample_index[i] + blend.offsets_in_samples[int(blend.dataset_index[i])]
             for i in idx], dtype=np.int64,
        )  # fmt: skip
        tokens = np.full((len(idx), seq + 1), -1, dtype=np.int64)
        res["read_errors"], res["first_read_error"] = 0, None
        for j, i in enumerate(idx):
            try:
                tokens[j] = blend[i]["input_ids"].numpy()
            except Exception as exc:  # noqa: BLE001 - counted and reported
                res["read_errors"] += 1
                if res["first_read_error"] is None:
                    res["first_read_error"] = f"sample {j}: {type(exc).__name__}: {exc}"
        np.save(os.path.join(out, f"launch{k + 1}-tokens.npy"), tokens)
        np.save(os.path.join(out, f"launch{k + 1}-folder.npy"), folder)
        np.save(os.path.join(out, f"launch{k + 1}-item.npy"), item)
        res["stage"] = stage.name
        res["folders"] = list(ds.dataset_folder)
        res["samples_read"] = len(idx)
        blend.update_consumption_metrics(0, len(idx), seq)
        res["consumption_stats"] = error_of(blend.get_consumption_stats)
        for d, r in enumerate(readers):  # what the trainer would record, by folder path
            offsets[r.folder_path] = offsets.get(r.folder_path, 0) + blend.consumed_tokens[d] // seq
        launches.append(res)
    report["launches"] = launches
    with open(os.path.join(out, "peer.json"), "w") as fh:
        json.dump(report, fh, indent=1)
    tdist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

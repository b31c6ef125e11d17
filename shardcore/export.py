"""Exports of a built mixture for trainers: Megatron-LM, OLMo-core, nanotron, plain JSON.

All exports name the pools' shard files; nothing is copied.

- Megatron (``shardcore.megatron_cache``): per stage a ``--data-args-path`` list (every shard
  read up to the stage's end), ``--train-samples`` (the stage's end), ``--split 100,0,0``
  (pools hold their validation slice apart), and, given an output directory, megatron-core's
  dataset index cache keyed for the trainer's arguments, so that with ``--data-cache-path``
  Megatron's sample i is the mixture's sample i. Reads mixtures and materialized mixtures.
- OLMo-core: ``SourceMixtureDatasetConfig`` fields: ``source_list.sources`` of
  ``{source_name, target_ratio, paths, max_repetition_ratio}`` and ``requested_tokens``.
- nanotron: ``data_stages`` with ``start_training_step`` (from the stage's first sample and
  the global batch size) and the Nanoset's ``dataset_folder`` / ``dataset_weights``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import yaml

from shardcore import manifest as mf
from shardcore.errors import InputError
from shardcore.mixture import KIND

FORMATS = ("megatron", "olmo", "nanotron", "json")


def _load(mixture_dir: str | os.PathLike) -> dict[str, Any]:
    manifest = mf.read_manifest(mixture_dir)
    if manifest.get("kind") != KIND:
        raise InputError(f"{mixture_dir}: not a mixture (kind {manifest.get('kind')!r})")
    return manifest


def _stage(manifest: dict[str, Any], stage: str | None) -> dict[str, Any]:
    stages = manifest["stages"]
    if stage is None:
        return stages[0]
    for st in stages:
        if st["name"] == stage:
            return st
    raise InputError(f"stage: no stage {stage!r}; stages: {[s['name'] for s in stages]}")


def _pool_shards(path: str) -> list[tuple[str, int]]:
    m = mf.read_manifest(path)
    return [(os.path.join(path, s["prefix"]), int(s["records"])) for s in m["shards"]]


def megatron_blend(
    mixture_dir: str | os.PathLike, stage: str | None = None
) -> tuple[list[float], list[str]]:
    """Weights and IndexedDataset prefixes of one stage's data-args list (default: the
    first stage): every shard read by samples [0, stage end), weighted by the stage's samples
    from it (``shardcore.megatron_cache.stage_blends``)."""
    from shardcore import megatron_cache

    _, blends = megatron_cache.stage_blends(mixture_dir)
    if stage is None:
        return blends[0].weights, blends[0].prefixes
    for b in blends:
        if b.name == stage:
            return b.weights, b.prefixes
    raise InputError(f"stage: no stage {stage!r}; stages: {[b.name for b in blends]}")


def megatron_data_args(mixture_dir: str | os.PathLike, stage: str | None = None) -> str:
    """The ``w1 prefix1 w2 prefix2 ...`` list, as for a ``--data-args-path`` file."""
    weights, prefixes = megatron_blend(mixture_dir, stage)
    return " ".join(f"{float(w)!r} {p}" for w, p in zip(weights, prefixes, strict=True))


def _olmo(manifest: dict[str, Any], mixture_dir: str | os.PathLike, **_: Any) -> str:
    stages = []
    for st in manifest["stages"]:
        sources = []
        for pool, share in zip(manifest["pools"], st["weights"], strict=True):
            if share <= 0:
                continue
            sources.append(
                {
                    "source_name": pool["key"],
                    "target_ratio": share,
                    "paths": [f"{p}.bin" for p, _ in _pool_shards(pool["path"])],
                    "max_repetition_ratio": max(1.0, math.ceil(pool["epochs"] * 100) / 100),
                }
            )
        stages.append(
            {
                "stage": st["name"],
                "source_mixture_config": {
                    "source_list": {"sources": sources},
                    "requested_tokens": st["num_tokens"],
                },
            }
        )
    out = {
        "sequence_length": manifest["seq_len"],
        "dtype": manifest["dtype"],
        "tokenizer": manifest.get("tokenizer"),
        "stages": stages,
    }
    return yaml.safe_dump(out, sort_keys=False)


def _nanotron(
    manifest: dict[str, Any],
    mixture_dir: str | os.PathLike,
    *,
    global_batch_size: int | None = None,
    **_: Any,
) -> str:
    gbs = int(global_batch_size or 1)
    token_size = 4 if str(manifest["dtype"]) in ("int32", "uint32") else 2
    stages = []
    for st in manifest["stages"]:
        folders, weights = [], []
        for pool, share in zip(manifest["pools"], st["weights"], strict=True):
            if share > 0:
                folders.append(os.path.join(pool["path"], "shards"))
                weights.append(share)
        stages.append(
            {
                "name": st["name"],
                "start_training_step": st["first_sample"] // gbs + 1,
                "data": {
                    "dataset": {
                        "dataset_folder": folders,
                        "dataset_weights": weights,
                        "token_size_in_bytes": token_size,
                    },
                    "num_loading_workers": 1,
                    "seed": int(manifest["spec"]["seed"]),
                },
            }
        )
    header = (
        f"# nanotron data_stages; start_training_step assumes a global batch of {gbs} "
        "samples (pass global_batch_size)\n"
    )
    return header + yaml.safe_dump({"data_stages": stages}, sort_keys=False)


def _json(manifest: dict[str, Any], mixture_dir: str | os.PathLike, **_: Any) -> str:
    out = {
        "fingerprint": manifest["fingerprint"],
        "seq_len": manifest["seq_len"],
        "num_samples": manifest["num_samples"],
        "num_tokens": manifest["num_tokens"],
        "order": manifest["order"],
        "schedule": {
            "pool": str(Path(mixture_dir, "schedule/pool.npy").resolve()),
            "record": str(Path(mixture_dir, "schedule/record.npy").resolve()),
        },
        "pools": manifest["pools"],
        "stages": manifest["stages"],
    }
    return json.dumps(out, indent=1, sort_keys=True)


def export(mixture_dir: str | os.PathLike, fmt: str, **options: Any) -> str:
    """The mixture in format ``fmt`` (megatron, olmo, nanotron, json) as text."""
    writers = {"olmo": _olmo, "nanotron": _nanotron, "json": _json}
    if fmt == "megatron":
        # Also reads materialized mixtures; ``out`` (a directory) gets the index cache.
        from shardcore.megatron_cache import export_megatron

        return export_megatron(mixture_dir, **options)
    if fmt not in writers:
        raise InputError(f"format: unknown export format {fmt!r}; known: {list(FORMATS)}")
    return writers[fmt](_load(mixture_dir), mixture_dir, **options)

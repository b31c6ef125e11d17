"""Exports of a built mixture for trainers: Megatron-LM, OLMo-core, nanotron, plain JSON.

All exports name the pools' shard files; nothing is copied. Megatron and nanotron blend
datasets with their own samplers, so an export reproduces the *shares* and the stage
boundaries, not our per-sample order; for our exact order use the mixture's schedule
(``shardcore.mixture.Mixture``, ``shardcore.loader``) or a materialized copy
(``shardcore.materialize``), which any IndexedDataset reader streams in order.

- Megatron: ``--data-path "w1 prefix1 w2 prefix2 ..."`` per stage, where each pool's share
  is split over its shards by record count (Megatron weights are per IndexedDataset
  prefix), the same list for a ``--data-args-path`` file, the stage's sample count, and
  ``--split`` advice: pools hold their validation slice apart, so train on ``--split
  100,0,0`` (or pass the pools' ``val/`` shards as ``--valid-data-path``).
- OLMo-core (``shardcore.export_olmo``): ``dataset``/``data_loader`` sections that load into
  ai2-olmo-core's config classes; exact (instance i is sample i) for a pool, a materialized
  mixture or a mixture given its materialized copy, shares only otherwise.
- nanotron (``shardcore.export_nanotron``): ``tokens`` and ``data_stages``, each pool seen
  through a datatrove view folder (``.ds`` links, ``.ds.index``, ``.ds.metadata``), stage
  boundaries on whole global batches, ``start_training_step`` exact.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

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
    """Weights and IndexedDataset prefixes of one stage (default: the first), each pool's
    share split over its shards in proportion to their records."""
    manifest = _load(mixture_dir)
    st = _stage(manifest, stage)
    weights, prefixes = [], []
    for pool, share in zip(manifest["pools"], st["weights"], strict=True):
        if share <= 0:
            continue
        shards = _pool_shards(pool["path"])
        total = sum(n for _, n in shards)
        for prefix, n in shards:
            if n:
                weights.append(share * n / total)
                prefixes.append(prefix)
    return weights, prefixes


def megatron_data_args(mixture_dir: str | os.PathLike, stage: str | None = None) -> str:
    """The ``w1 prefix1 w2 prefix2 ...`` list, as for a ``--data-args-path`` file."""
    weights, prefixes = megatron_blend(mixture_dir, stage)
    return " ".join(
        f"{repr(float(w))} {shlex.quote(p)}" for w, p in zip(weights, prefixes, strict=True)
    )


def _megatron(manifest: dict[str, Any], mixture_dir: str | os.PathLike, **_: Any) -> str:
    lines = [
        f"# Megatron-LM arguments for mixture {manifest['fingerprint']}",
        f"# seq_len {manifest['seq_len']}: pass --seq-length {manifest['seq_len']}.",
        "# Pools keep their validation slice apart (val/ in each pool): use --split 100,0,0",
        "# and give validation data with --valid-data-path if needed.",
    ]
    for st in manifest["stages"]:
        args = megatron_data_args(mixture_dir, st["name"])
        lines += [
            "",
            f"# stage {st['name']}: samples [{st['first_sample']}, "
            f"{st['first_sample'] + st['num_samples']}) -> --train-samples {st['num_samples']}",
            f"--data-path {args}",
            "--split 100,0,0",
            "# or write the list above to a file and pass --data-args-path FILE",
        ]
    return "\n".join(lines) + "\n"


def _olmo(manifest: dict[str, Any], mixture_dir: str | os.PathLike, **options: Any) -> str:
    from shardcore.export_olmo import olmo_config

    return olmo_config(mixture_dir, **options)


def _nanotron(manifest: dict[str, Any], mixture_dir: str | os.PathLike, **options: Any) -> str:
    from shardcore.export_nanotron import nanotron_config

    return nanotron_config(mixture_dir, **options)


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
    writers = {"megatron": _megatron, "olmo": _olmo, "nanotron": _nanotron, "json": _json}
    if fmt not in writers:
        raise InputError(f"format: unknown export format {fmt!r}; known: {list(FORMATS)}")
    if fmt == "olmo":  # also exports a pool or a materialized mixture, exactly
        return _olmo({}, mixture_dir, **options)
    return writers[fmt](_load(mixture_dir), mixture_dir, **options)

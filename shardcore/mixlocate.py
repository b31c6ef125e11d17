"""Resume positions in a mixture: a sample or token count -> (stage, pool, shard, record,
token offset), computed, never scanned.

A trainer that consumed T tokens consumed T // seq_len samples and is T % seq_len tokens
into the next. The stage is a binary search over the stages' first samples (a handful);
(pool, record) of the sample are one read each from the schedule's memory-mapped .npy
arrays; the shard within the pool is ``shardcore.resume.locate_pool`` (a binary search over
the pool's cumulative record counts). O(log shards) whatever the position.
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from typing import Any

import numpy as np

from shardcore import manifest as mf
from shardcore.errors import InputError
from shardcore.mixture import KIND, POOL_FILE, RECORD_FILE
from shardcore.resume import locate_pool

_pool_manifests: dict[str, dict[str, Any]] = {}


def _pool_manifest(path: str) -> dict[str, Any]:
    if path not in _pool_manifests:
        _pool_manifests[path] = mf.read_manifest(path)
    return _pool_manifests[path]


def locate_mixture(
    path_or_manifest: str | os.PathLike | dict[str, Any],
    *,
    sample: int | None = None,
    tokens: int | None = None,
    mixture_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Where training sample ``sample`` (or training token ``tokens``) of a mixture lives:
    ``{stage, sample, pool, pool_key, pool_path, shard, shard_prefix, record,
    record_in_shard, token_offset}``. With a manifest dict, pass ``mixture_dir`` too."""
    if isinstance(path_or_manifest, dict):
        manifest = path_or_manifest
        if mixture_dir is None:
            raise InputError("locate_mixture: a manifest needs mixture_dir (its directory)")
        root = Path(mixture_dir)
    else:
        root = Path(path_or_manifest)
        manifest = mf.read_manifest(root)
    if manifest.get("kind") != KIND:
        raise InputError(f"{root}: not a mixture (kind {manifest.get('kind')!r})")
    if (sample is None) == (tokens is None):
        raise InputError("locate needs exactly one of sample or tokens")
    seq_len = int(manifest["seq_len"])
    offset = 0
    if tokens is not None:
        if int(tokens) < 0:
            raise InputError(f"token position must be >= 0, got {tokens}")
        sample, offset = divmod(int(tokens), seq_len)
    sample = int(sample)
    total = int(manifest["num_samples"])
    if not 0 <= sample < total:
        what = f"token {tokens} (sample {sample})" if tokens is not None else f"sample {sample}"
        raise InputError(f"{what} is outside the mixture's {total} samples")
    stages = manifest["stages"]
    k = bisect.bisect_right([s["first_sample"] for s in stages], sample) - 1
    pool_idx = int(np.load(root / POOL_FILE, mmap_mode="r")[sample])
    record = int(np.load(root / RECORD_FILE, mmap_mode="r")[sample])
    pool = manifest["pools"][pool_idx]
    where = locate_pool(_pool_manifest(pool["path"]), sample=record)
    return {
        "stage": stages[k]["name"],
        "sample": sample,
        "pool": pool_idx,
        "pool_key": pool["key"],
        "pool_path": pool["path"],
        "shard": where["shard"],
        "shard_prefix": where["shard_prefix"],
        "record": record,
        "record_in_shard": where["record_in_shard"],
        "token_offset": offset,
    }


def locate_any(
    path: str | os.PathLike, *, sample: int | None = None, tokens: int | None = None
) -> dict[str, Any]:
    """Locate in whatever artifact ``path`` is: a mixture (schedule lookup), or a pool or a
    materialized mixture (both have shards and cumulative record counts)."""
    manifest = mf.read_manifest(path)
    kind = manifest.get("kind")
    if kind == KIND:
        return locate_mixture(manifest, sample=sample, tokens=tokens, mixture_dir=path)
    if kind in ("pool", "materialized"):
        return dict(locate_pool(manifest, sample=sample, tokens=tokens))
    raise InputError(f"{path}: a {kind!r} artifact is not a pool or a mixture: nothing to locate")

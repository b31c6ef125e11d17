"""Resume positions: a sample or token count -> where it lives in a pool, a materialized
mixture or a mixture, computed, never scanned.

A sample is one record of ``seq_len + 1`` tokens (inputs plus the shifted target); a
trainer that consumed T tokens consumed T // seq_len samples and is ``T % seq_len`` tokens
into the next.

- In a pool or a materialized mixture (``locate_pool``): one binary search over the
  manifest's ``cumulative_records`` (the shard table's memory-mapped column, or the list
  of a format-2 manifest: no conversion, no scan) gives the shard; the record in it is a
  subtraction, its name one row of the table.
- In a mixture (``locate_mixture``): the stage is a binary search over the stages' first
  samples (a handful); (pool, record) of the sample are one read each from the schedule's
  memory-mapped ``.npy`` arrays; the shard within the pool is ``locate_pool``.

Either way the answer costs O(log shards), whatever the position and the size.
``locate_any`` dispatches on the artifact's kind; ``cyclic_shard_order`` is the order in
which a streaming reader that resumes at shard k visits the shards: k, k+1, ..., then
wraps around (C, D, E, A, B).
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from typing import Any

import numpy as np

from shardcore import manifest as mf
from shardcore import storage
from shardcore.errors import InputError
from shardcore.mixture import KIND, POOL_FILE, RECORD_FILE, Mixture
from shardcore.positions import locate_pool, position

__all__ = ["cyclic_shard_order", "locate_any", "locate_mixture", "locate_pool"]


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
        manifest: dict[str, Any] | None = path_or_manifest
        if mixture_dir is None:
            raise InputError("locate_mixture: a manifest needs mixture_dir (its directory)")
        location = mixture_dir
    else:
        manifest, location = None, path_or_manifest
    # A mixture on object storage: the two values of its schedule read by checked ranges
    # (shardcore.storage.ranged), not the schedule copied.
    columns: Any
    if storage.is_remote(location):
        mix = Mixture(location, ranged=True)
        root: str | Path = mix.path
        manifest = manifest if manifest is not None else mix.manifest
        columns = (mix.pool_index, mix.record_index)
    else:
        root = Path(location)
        manifest = manifest if manifest is not None else mf.read_manifest(root)
        columns = None
    mf.check_kind(manifest, KIND, root)
    sample, offset = position(
        int(manifest["seq_len"]), int(manifest["num_samples"]), "mixture", sample, tokens
    )
    stages = manifest["stages"]
    k = bisect.bisect_right([s["first_sample"] for s in stages], sample) - 1
    if columns is None:
        assert isinstance(root, Path)
        columns = (
            np.load(root / POOL_FILE, mmap_mode="r"),
            np.load(root / RECORD_FILE, mmap_mode="r"),
        )
    pool_idx, record = int(columns[0][sample]), int(columns[1][sample])
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

    manifest = mf.read_manifest(path, kind=("pool", "materialized", KIND))
    if manifest.get("kind") == KIND:
        return locate_mixture(manifest, sample=sample, tokens=tokens, mixture_dir=path)
    return dict(locate_pool(manifest, sample=sample, tokens=tokens))


def cyclic_shard_order(num_shards: int, start_shard: int) -> np.ndarray:
    """Shards in the order a streaming reader resuming at ``start_shard`` visits them."""
    if num_shards < 0 or not (0 <= start_shard < max(num_shards, 1)):
        raise InputError(f"start shard {start_shard} outside [0, {num_shards})")
    return (np.arange(num_shards, dtype=np.int64) + start_shard) % max(num_shards, 1)

"""The pools a spec names and the plan of a schedule: samples per stage and per pool,
epochs, the records a continued run read before."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcore import blend, config
from shardcore import manifest as mf
from shardcore.errors import InputError, ManifestError
from shardcore.mixture import permute
from shardcore.mixture.layout import (
    MAX_SAMPLES_VARIABLE,
    SAMPLE_BYTES,
)
from shardcore.mixture.spec import MixtureSpec, flatten

# --------------------------------------------------------------------------- pools


@dataclass
class PoolInfo:
    key: str  # as written in the spec
    path: str
    manifest: dict[str, Any]

    @property
    def num_records(self) -> int:
        return int(self.manifest["num_records"])


def load_pools(spec: MixtureSpec) -> list[PoolInfo]:
    """Every pool the spec names, in first-mention order, validated: it exists, is a pool,
    is not empty, and all share one tokenizer and seq_len."""
    keys: list[str] = []
    for _, comps in spec.stage_components():
        for pool, _ in flatten(comps):
            if pool not in keys:
                keys.append(pool)
    if len(keys) > blend.MAX_POOLS:
        raise InputError(f"components: {len(keys)} pools, at most {blend.MAX_POOLS}")
    pools = []
    for key in keys:
        path = spec.resolve(key)
        try:
            manifest = mf.read_manifest(path)
        except ManifestError as exc:
            raise InputError(f"pool {key!r}: unknown pool ({exc})") from None
        mf.check_kind(manifest, ("pool", "materialized"), f"pool {key!r}: {path}")
        if int(manifest.get("num_records", 0)) <= 0:
            raise InputError(f"pool {key!r}: empty pool (0 records), nothing to sample")
        pools.append(PoolInfo(key, path, manifest))
    first = pools[0].manifest
    for p in pools[1:]:
        if int(p.manifest["seq_len"]) != int(first["seq_len"]):
            raise InputError(
                f"pool {p.key!r}: seq_len {p.manifest['seq_len']} differs from "
                f"{pools[0].key!r}'s {first['seq_len']}"
            )
        fp_a = (p.manifest.get("tokenizer") or {}).get("fingerprint")
        fp_b = (first.get("tokenizer") or {}).get("fingerprint")
        if fp_a != fp_b:
            raise InputError(f"pool {p.key!r}: tokenizer differs from {pools[0].key!r}'s")
    return pools


def _pools_from_manifests(
    spec: MixtureSpec, manifests: Mapping[str, Mapping[str, Any]]
) -> list[PoolInfo]:
    out: list[PoolInfo] = []
    for _, comps in spec.stage_components():
        for key, _ in flatten(comps):
            if any(p.key == key for p in out):
                continue
            if key not in manifests:
                raise InputError(f"pool {key!r}: unknown pool (not among the given manifests)")
            manifest = dict(manifests[key])
            if int(manifest.get("num_records", 0)) <= 0:
                raise InputError(f"pool {key!r}: empty pool (0 records), nothing to sample")
            out.append(PoolInfo(key, spec.resolve(key), manifest))
    return out


# --------------------------------------------------------------------------- planning


def stage_samples(spec: MixtureSpec, seq_len: int) -> list[tuple[str, int]]:
    """Samples per stage. The budget is ceil(tokens / seq_len) samples; each later stage
    takes ceil(its tokens / seq_len) of them at the end; "main" keeps the rest. So stage k
    starts at training token ``first_sample * seq_len``: exactly ``tokens - (tokens of
    the stages from k on)`` when the counts are multiples of seq_len. With a
    ``global_batch_size`` B, the budget and every later stage round up to whole batches of B
    samples, so every stage starts and ends on a step boundary."""

    def whole(n: int) -> int:
        b = spec.global_batch_size or 1
        return -(-n // b) * b

    total = whole(-(-spec.tokens // seq_len))
    later = [(s.name, whole(-(-s.tokens // seq_len))) for s in spec.stages]
    main = total - sum(n for _, n in later)
    if main <= 0:
        raise InputError(
            f"stages: they take all {total} samples of the budget ({spec.tokens} tokens, "
            f"seq_len {seq_len}), none left for the main stage"
        )
    return [(spec.first_stage, main), *later]


def _stage_weights(spec: MixtureSpec, pools: list[PoolInfo]) -> list[tuple[str, int, np.ndarray]]:
    index = {p.key: i for i, p in enumerate(pools)}
    seq_len = int(pools[0].manifest["seq_len"])
    sizes = dict(stage_samples(spec, seq_len))
    total, limit = sum(sizes.values()), config.max_schedule_samples()
    if total > limit:
        where = "on disk; it is built in chunks"
        raise InputError(
            f"tokens: a budget of {spec.tokens:,} tokens is {total:,} samples of {seq_len} "
            f"tokens; a schedule holds at most {limit:,} samples ({MAX_SAMPLES_VARIABLE}, "
            f"about {limit * SAMPLE_BYTES / 2**30:,.0f} GiB {where})"
        )
    out = []
    for name, comps in spec.stage_components():
        leaves = flatten(comps, where=spec.field_of(name))
        n = sizes[name]
        if n < len(leaves):
            raise InputError(
                f"tokens: budget too small: stage {name!r} has {n} samples for "
                f"{len(leaves)} components (need one sample per component)"
            )
        w = np.zeros(len(pools))
        for pool, share in leaves:
            w[index[pool]] = share
        out.append((name, n, w))
    return out


def _continued(spec: MixtureSpec, pools: list[PoolInfo]) -> tuple[np.ndarray, list[list[int]]]:
    """Per pool: the records a continued run already read of it (0 for a new pool) and the
    key of its epoch permutations, [seed, pool index] of the mixture that first read it."""
    read, keys, _ = _continued_epochs(spec, pools)
    return read, keys


def _continued_epochs(
    spec: MixtureSpec, pools: list[PoolInfo]
) -> tuple[np.ndarray, list[list[int]], list[str]]:
    """``_continued`` and, per pool, the algorithm of its epoch permutations: a pool new in
    this mixture takes ``permute.FEISTEL``; a continued pool keeps its mixture's."""
    read = np.zeros(len(pools), dtype=np.int64)
    keys = [[int(spec.seed), i] for i in range(len(pools))]
    algorithms = [permute.FEISTEL] * len(pools)
    if spec.continues is None:
        return read, keys, algorithms
    by_path = {os.path.abspath(p["path"]): p for p in spec.continues["pools"]}
    for i, p in enumerate(pools):
        prev = by_path.get(os.path.abspath(p.path))
        if prev is not None:
            read[i] = int(prev["read"])
            keys[i] = [int(k) for k in prev["epoch_key"]]
            algorithms[i] = prev.get("permutation", permute.NUMPY)
    return read, keys, algorithms


def _expected_counts(weights: np.ndarray, n: int) -> np.ndarray:
    """The blend's per-pool counts after n samples, without building it: each count is
    w*n rounded by largest remainder (the blend is never more than one sample behind)."""
    raw = weights * n
    counts = np.floor(raw).astype(np.int64)
    short = n - int(counts.sum())
    if short > 0:
        rem = np.where(weights > 0, raw - counts, -1.0)
        counts[np.argsort(-rem, kind="stable")[:short]] += 1
    return counts


def plan_epochs(
    spec: MixtureSpec | Mapping[str, Any],
    pools: list[PoolInfo] | Mapping[str, Mapping[str, Any]] | None = None,
    *,
    exact: bool = False,
) -> list[dict[str, Any]]:
    """Per pool: samples, tokens taken, epochs (samples / pool records), share. Checks
    ``max_repetitions`` and that every component gets a sample. ``exact`` counts with the
    real blend (O(samples)); otherwise by largest-remainder rounding, within a sample or
    two of it, instant for the mixture builder page. ``pools``: None (read the manifests
    the spec names), ``load_pools``' result, or a mapping from each pool as the spec names
    it to its manifest (e.g. from a catalog, without touching the files)."""
    if not isinstance(spec, MixtureSpec):
        spec = MixtureSpec.from_dict(spec)
    if pools is None:
        pools = load_pools(spec)
    elif isinstance(pools, Mapping):
        pools = _pools_from_manifests(spec, pools)
    seq_len = int(pools[0].manifest["seq_len"])
    taken = np.zeros(len(pools), dtype=np.int64)
    read, _ = _continued(spec, pools)
    per_stage = []
    for name, n, w in _stage_weights(spec, pools):
        if exact:
            di, _ = blend.build_blending_indices(w[w > 0], n)
            counts = np.zeros(len(pools), dtype=np.int64)
            counts[np.flatnonzero(w > 0)] = np.bincount(di, minlength=int((w > 0).sum()))
        else:
            counts = _expected_counts(w, n)
        missing = np.flatnonzero((w > 0) & (counts == 0))
        if missing.size:
            p = pools[int(missing[0])]
            raise InputError(
                f"tokens: budget too small: pool {p.key!r} gets no sample in stage {name!r} "
                f"(share {w[missing[0]]:.3g} x {n} samples < 1)"
            )
        taken += counts
        per_stage.append((name, counts))
    total = int(taken.sum())
    out = []
    _check_repetitions(spec, pools, taken + read, read)
    for i, p in enumerate(pools):
        epochs = taken[i] / p.num_records
        out.append(
            {
                "pool": p.key,
                "path": p.path,
                "records": p.num_records,
                "samples": int(taken[i]),
                "tokens": int(taken[i]) * seq_len,
                "epochs": float(epochs),
                "share": float(taken[i] / total) if total else 0.0,
                "stages": {name: int(c[i]) for name, c in per_stage},
            }
        )
    return out


def _check_repetitions(
    spec: MixtureSpec, pools: list[PoolInfo], samples: np.ndarray, before: np.ndarray
) -> None:
    """Refuse a schedule that reads a pool more than ``spec.max_repetitions`` times;
    ``samples`` counts, for a continued run, the ``before`` records it read already."""
    for i, p in enumerate(pools):
        epochs = samples[i] / p.num_records
        if epochs > spec.max_repetitions:
            raise InputError(
                f"max_repetitions: pool {p.key!r} would be read {epochs:.2f} times "
                f"({int(samples[i] - before[i])} samples from {p.num_records} records"
                f"{f', after the {int(before[i])} the run read before' if before[i] else ''}), "
                f"above max_repetitions={spec.max_repetitions:g}; add data, lower its weight "
                f"or the budget, or raise max_repetitions"
            )

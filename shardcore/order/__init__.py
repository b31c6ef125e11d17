"""Orderings of a mixture's samples, registered by name.

An ordering takes the per-sample characteristics of a schedule (``families``: name ->
one label per sample, in schedule order) and returns a permutation: ``order[k]`` is the
schedule position that is trained on k-th.

- ``blend``: the identity; the blend schedule's own interleaving (Megatron-exact).
- ``diversity``: greedy "don't shuffle, optimize" ordering that keeps every window close to
  the global share of every characteristic (see ``shardcore.order.diversity``).
- ``greedy_block``: the recipe's greedy on token counts (``shardcore.order.greedy``, windowed
  greedy), then whole global batches of ``batch_size`` samples shuffled (seeded).
- ``random``: a seeded uniform permutation, the baseline the quality page compares against.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from shardcore.errors import InputError
from shardcore.order import greedy, recipe
from shardcore.order.diversity import diversity_order
from shardcore.order.windowed import pool_families, sample_characteristics

Ordering = Callable[..., np.ndarray]


def _num_samples(families: Mapping[str, np.ndarray]) -> int:
    sizes = {len(v) for v in families.values()}
    if len(sizes) != 1:
        raise InputError(f"families: label arrays differ in length: {sorted(sizes)}")
    return sizes.pop()


def blend_order(families: Mapping[str, np.ndarray], *, seed: int = 0, **_: Any) -> np.ndarray:
    """The schedule as built: the identity permutation."""
    return np.arange(_num_samples(families), dtype=np.int64)


def random_order(families: Mapping[str, np.ndarray], *, seed: int = 0, **_: Any) -> np.ndarray:
    """A uniform random permutation seeded by ``seed``."""
    return np.random.default_rng(seed).permutation(_num_samples(families)).astype(np.int64)


def _diversity(
    families: Mapping[str, np.ndarray],
    *,
    seed: int = 0,
    weights: Mapping[str, float] | None = None,
    **_: Any,
) -> np.ndarray:
    names = list(families)
    lam = [float((weights or {}).get(name, 1.0)) for name in names]
    return diversity_order([families[n] for n in names], weights=lam, seed=seed)


def schedule_characteristics(
    pool_of: np.ndarray,
    records: np.ndarray,
    pools: Sequence[str | os.PathLike],
    options: Mapping[str, Any] | None = None,
) -> tuple[recipe.Characteristics, np.ndarray]:
    """Per sample of a schedule (``pool_of``: its pool's index in ``pools``, ``records``:
    its record there), its characteristic vector from the pools' segments (the pool, each
    property in ``options["by"]``, ``options["length_bins"]`` document-length quantile
    bins: a number, default 100; false: none), and one id per distinct pool record (the
    copies of a record read in several epochs share it)."""
    fam = pool_families(pools, options)
    pool_of = np.asarray(pool_of, dtype=np.int64)
    rows = fam.first[pool_of] + np.asarray(records, dtype=np.int64)
    return sample_characteristics(fam, pool_of, records), rows


def greedy_block_order(
    families: Mapping[str, np.ndarray],
    *,
    seed: int = 0,
    weights: Mapping[str, float] | None = None,
    batch_size: int = 256,
    groups: np.ndarray | None = None,
    characteristics: recipe.Characteristics | None = None,
    pools: Sequence[str | os.PathLike] | None = None,
    records: np.ndarray | None = None,
    options: Mapping[str, Any] | None = None,
    **_: Any,
) -> np.ndarray:
    """The recipe's greedy order (``shardcore.order.greedy``), cut into global batches of
    ``batch_size`` whose order is shuffled. On ``characteristics`` when given; else, for a
    schedule (``pools``: the pools' paths, ``records``: each sample's record in its pool,
    ``families["pool"]``: each sample's pool), on the samples' token counts from the pools'
    segments: the pool, each document property in ``options["by"]`` and document-length
    quantile bins (``options["length_bins"]``: a number, default 100; false: none), with
    the copies of one record (read in several epochs) spaced apart; else one label per
    sample and family. ``groups``: one duplicate-group id per sample."""
    n = _num_samples(families)
    if characteristics is None and pools is not None and records is not None:
        ch, rows = schedule_characteristics(families["pool"], records, pools, options)
        groups = rows if groups is None else groups
    else:
        ch = characteristics if characteristics is not None else recipe.from_labels(families)
    if ch.num_records != n:
        raise InputError(f"characteristics: {ch.num_records} records for {n} samples")
    lam = {k: float(v) for k, v in (weights or {}).items() if k in ch.families}
    order = greedy.greedy_order(ch, weights=lam, seed=seed, groups=groups)
    return greedy.block_shuffle(order, batch_size, seed=seed)


ORDERINGS: dict[str, Ordering] = {
    "blend": blend_order,
    "diversity": _diversity,
    "greedy_block": greedy_block_order,
    "random": random_order,
}


def get_ordering(name: str) -> Ordering:
    try:
        return ORDERINGS[name]
    except KeyError:
        raise InputError(f"order: unknown ordering {name!r}; known: {sorted(ORDERINGS)}") from None

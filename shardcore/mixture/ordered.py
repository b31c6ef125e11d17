"""A non-blend ordering (``diversity``, ``greedy_block``, ``random``) applied window by
window, so that a schedule of any length is ordered in memory bounded by a window.

The blend unit writes the blend's pool column to ``BLEND_FILE``; each record unit then
takes its chunks from it, computes their records as for the blend order, and orders each
window: the samples of one stage inside one chunk (a chunk that holds a stage boundary
has a window on each side, so no sample leaves its stage). The ordering's objective is
the same in every window (every window close to the shares of its stage; the blend
already spreads each pool evenly over the stage, so a window's shares are the stage's).
A stage inside one chunk is one window: its order is the whole-stage order, seeded as
before. Ordering only inside a chunk leaves each pool's samples before every chunk
boundary unchanged, so the per-chunk counts of the blend stay exact.

What an ordering reads of the pools (per-record labels, lengths, characteristics) is read
once per unit and indexed per window: it grows with the pools' records, not with the
schedule's samples.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from shardcore import props, verify
from shardcore.errors import InputError
from shardcore.mixture.layout import LENGTH_FAMILY, SCHEDULE_DIR
from shardcore.mixture.plan import PoolInfo, _stage_weights
from shardcore.mixture.spec import MixtureSpec
from shardcore.order import get_ordering, pool_characteristics_for
from shardcore.order.recipe import document_columns
from shardcore.pool import PoolReader

# The blend's pool column, before ordering (kept until the manifest is written).
BLEND_FILE = f"{SCHEDULE_DIR}/blend-pool.npy"
N_TOKENS = f"{props.FACTS}.n_tokens"
# Seeds: stage k's first window is seeded as the whole stage was; window j > 0 adds j times
# this (a prime, as the stage's 7919).
STAGE_SEED = 7919
WINDOW_SEED = 104_729


def pool_labels(pools: list[PoolInfo], options: Mapping[str, Any]) -> list[dict[str, np.ndarray]]:
    """Per pool, per record, the labels the diversity ordering reads: each property named
    in ``options["by"]`` (its main document's) and, unless ``length_bins`` is off, the
    document-length bin (log2 of the main document's tokens)."""
    by = list(options.get("by") or [])
    want_length = bool(options.get("length_bins", True))
    out: list[dict[str, np.ndarray]] = []
    if not by and not want_length:
        return [{} for _ in pools]
    for p in pools:
        pool = PoolReader(p.path)
        # The tables read below (documents, per-shard segments) are checked against the
        # pool's checksums first: a corrupt pool fails the build naming file and range.
        verify.check_files_read(
            pool.path,
            pool.manifest,
            pool.document_files()
            + [f"{sh['prefix']}.segments.npz" for sh in pool.manifest["shards"]],
        )
        # Only the columns the labels need, never the whole documents table.
        _, values = document_columns(pool, by)
        main = pool.main_documents()
        labels = {prop: values[prop][main] for prop in by}
        if want_length:
            try:
                _, lengths = document_columns(pool, [N_TOKENS])
            except InputError:  # a table without token counts: no length family
                lengths = {}
            if lengths:
                n_tok = lengths[N_TOKENS].astype(np.int64)[main]
                labels[LENGTH_FAMILY] = np.floor(np.log2(np.maximum(n_tok, 1))).astype(np.int64)
        out.append(labels)
    return out


def families_of(
    per_pool: list[dict[str, np.ndarray]],
    names: list[str],
    pool_idx: np.ndarray,
    record: np.ndarray,
) -> dict[str, np.ndarray]:
    """Characteristics per sample (``pool_idx``, ``record``): the pool, then each of
    ``names`` that every pool has, from ``pool_labels``."""
    fams: dict[str, np.ndarray] = {"pool": pool_idx.astype(np.int64)}
    for name in names:
        if not all(name in lab for lab in per_pool):
            continue
        values = [lab[name] for lab in per_pool]
        out = np.empty(
            pool_idx.size, dtype=object if values[0].dtype == object else values[0].dtype
        )
        for i, v in enumerate(values):
            sel = pool_idx == i
            out[sel] = v[record[sel]]
        fams[name] = out.astype(str) if out.dtype == object else out
    return fams


def family_names(options: Mapping[str, Any]) -> list[str]:
    by = list(options.get("by") or [])
    return by + ([LENGTH_FAMILY] if options.get("length_bins", True) else [])


def stage_order(
    spec: MixtureSpec,
    pools: list[PoolInfo],
    stage: int,
    window: int,
    pool_idx: np.ndarray,
    record: np.ndarray,
    *,
    labels: list[dict[str, np.ndarray]] | None = None,
    characteristics: tuple[Any, np.ndarray] | None = None,
) -> np.ndarray:
    """The permutation ``spec.order`` gives window ``window`` of stage ``stage`` (its
    samples ``pool_idx``, ``record``), seeded by both. ``labels`` (``pool_labels``) and
    ``characteristics`` (``pool_characteristics_for``) are what the ordering reads of the
    pools, computed here when not given."""
    seed = spec.seed + STAGE_SEED * stage + WINDOW_SEED * window
    options = spec.order_options
    lam = options.get("lambda") or {}
    paths = [p.path for p in pools]
    if spec.order == "diversity":
        per_pool = labels if labels is not None else pool_labels(pools, options)
        fams = families_of(per_pool, family_names(options), pool_idx, record)
    else:
        fams = {"pool": pool_idx}
    extra: dict[str, Any] = {}
    if spec.order == "greedy_block" and characteristics is not None:
        ch, first = characteristics
        rows = first[np.asarray(pool_idx, dtype=np.int64)] + np.asarray(record, dtype=np.int64)
        extra = {"characteristics": ch.take(rows), "groups": rows}
    return get_ordering(spec.order)(
        fams, seed=seed, weights=lam, pools=paths, records=record, options=options, **extra
    )


class WindowOrder:
    """``spec.order`` applied to the windows of a range of a schedule (see the module):
    what it reads of the pools is read on first use and kept for the unit's chunks."""

    def __init__(self, spec: MixtureSpec, pools: list[PoolInfo], chunk: int):
        self.spec, self.pools, self.chunk = spec, pools, int(chunk)
        self.stages = []
        start = 0
        for _, n, _ in _stage_weights(spec, pools):
            self.stages.append((start, n))
            start += n
        self._labels: list[dict[str, np.ndarray]] | None = None
        self._characteristics: tuple[Any, np.ndarray] | None = None

    def windows(self, a: int, b: int) -> Iterator[tuple[int, int, int, int]]:
        """(stage, window, first sample, end) of each window in samples [a, b)."""
        for k, (start, n) in enumerate(self.stages):
            lo, hi = max(a, start), min(b, start + n)
            while lo < hi:
                end = min(hi, (lo // self.chunk + 1) * self.chunk)
                yield k, lo // self.chunk - start // self.chunk, lo, end
                lo = end

    def apply(self, pool_idx: np.ndarray, record: np.ndarray, a: int) -> None:
        """Order in place the samples [a, a + len) given by their columns."""
        for k, j, lo, hi in self.windows(a, a + pool_idx.size):
            s = slice(lo - a, hi - a)
            perm = stage_order(
                self.spec,
                self.pools,
                k,
                j,
                pool_idx[s],
                record[s],
                labels=self._pool_labels(),
                characteristics=self._pool_characteristics(),
            )
            pool_idx[s], record[s] = pool_idx[s][perm], record[s][perm]

    def _pool_labels(self) -> list[dict[str, np.ndarray]] | None:
        if self.spec.order != "diversity":
            return None
        if self._labels is None:
            self._labels = pool_labels(self.pools, self.spec.order_options)
        return self._labels

    def _pool_characteristics(self) -> tuple[Any, np.ndarray] | None:
        if self.spec.order != "greedy_block":
            return None
        if self._characteristics is None:
            paths = [p.path for p in self.pools]
            self._characteristics = pool_characteristics_for(paths, self.spec.order_options)
        return self._characteristics


def spans_windows(spec: MixtureSpec, stages: list[dict[str, Any]], chunk: int) -> bool:
    """Whether some stage of a non-blend schedule spans several windows (its order then
    differs from a whole-stage order: the manifest says so, and so does the fingerprint)."""
    if spec.order == "blend":
        return False
    return any(
        st["num_samples"] > 0
        and st["first_sample"] // chunk != (st["first_sample"] + st["num_samples"] - 1) // chunk
        for st in stages
    )

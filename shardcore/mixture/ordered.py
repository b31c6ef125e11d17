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
from shardcore.mixture.layout import LENGTH_FAMILY, SCHEDULE_DIR
from shardcore.mixture.plan import PoolInfo, _stage_weights
from shardcore.mixture.spec import MixtureSpec
from shardcore.order import get_ordering
from shardcore.order.windowed import PoolFamilies, pool_families, sample_characteristics
from shardcore.pool import PoolReader

# The blend's pool column, before ordering (kept until the manifest is written).
BLEND_FILE = f"{SCHEDULE_DIR}/blend-pool.npy"
N_TOKENS = f"{props.FACTS}.n_tokens"
# Seeds: stage k's first window is seeded as the whole stage was; window j > 0 adds j times
# this (a prime, as the stage's 7919).
STAGE_SEED = 7919
WINDOW_SEED = 104_729


def sample_families(
    readers: list[PoolReader],
    options: Mapping[str, Any],
    pool_idx: np.ndarray,
    record: np.ndarray,
) -> dict[str, np.ndarray]:
    """Characteristics per sample (``pool_idx``, ``record``): the pool, each property in
    ``options["by"]`` of the record's main document and, unless ``length_bins`` is off
    (or a pool's table lacks token counts), the document-length bin (log2 of the main
    document's tokens). Only these samples' records are read: their main documents'
    values by row range (``PoolReader.record_labels``), so memory grows with the samples,
    not with the pools."""
    fams: dict[str, np.ndarray] = {"pool": pool_idx.astype(np.int64)}
    present = [int(i) for i in np.unique(pool_idx)]
    by = list(options.get("by") or [])
    wanted: list[tuple[str, str]] = [(prop, prop) for prop in by]
    if options.get("length_bins", True) and all(
        _has_token_counts(readers[i]) for i in range(len(readers))
    ):
        wanted.append((LENGTH_FAMILY, N_TOKENS))
    for family, prop in wanted:
        values = {}
        for i in present:
            sel = pool_idx == i
            got = readers[i].record_labels(prop, record[sel])
            if family == LENGTH_FAMILY:
                got = np.floor(np.log2(np.maximum(got.astype(np.int64), 1))).astype(np.int64)
            values[i] = (sel, got)
        dtypes = {v.dtype for _, v in values.values()}
        dtype = object if object in dtypes or len(dtypes) != 1 else dtypes.pop()
        out = np.empty(pool_idx.size, dtype=dtype)
        for sel, got in values.values():
            out[sel] = got
        fams[family] = out.astype(str) if out.dtype == object else out
    return fams


def _has_token_counts(reader: PoolReader) -> bool:
    """Whether the pool's documents table has its documents' token counts."""
    return N_TOKENS.split(".", 1)[1] in reader.document_schema.names


def stage_order(
    spec: MixtureSpec,
    pools: list[PoolInfo],
    stage: int,
    window: int,
    pool_idx: np.ndarray,
    record: np.ndarray,
    *,
    characteristics: PoolFamilies | None = None,
    families: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """The permutation ``spec.order`` gives window ``window`` of stage ``stage`` (its
    samples ``pool_idx``, ``record``), seeded by both. ``characteristics``
    (``pool_families``: what greedy_block's vectors of any window share) and ``families``
    (``sample_families``: the diversity ordering's characteristics of exactly these
    samples) are what the ordering reads of
    the pools, computed here when not given."""
    seed = spec.seed + STAGE_SEED * stage + WINDOW_SEED * window
    options = spec.order_options
    lam = options.get("lambda") or {}
    paths = [p.path for p in pools]
    if spec.order == "diversity" and families is not None:
        fams = families
    elif spec.order == "diversity":  # these samples' labels alone, read by range
        readers = [PoolReader(p.path) for p in pools]
        fams = sample_families(readers, options, pool_idx, record)
    else:
        fams = {"pool": pool_idx}
    extra: dict[str, Any] = {}
    if spec.order == "greedy_block" and characteristics is not None:
        fam = characteristics
        pool_of = np.asarray(pool_idx, dtype=np.int64)
        rows = fam.first[pool_of] + np.asarray(record, dtype=np.int64)
        extra = {
            "characteristics": sample_characteristics(fam, pool_of, record),
            "groups": rows,
        }
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
        self._readers: list[PoolReader] | None = None
        self._characteristics: PoolFamilies | None = None

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
        fams = self._families(pool_idx, record)
        for k, j, lo, hi in self.windows(a, a + pool_idx.size):
            s = slice(lo - a, hi - a)
            perm = stage_order(
                self.spec,
                self.pools,
                k,
                j,
                pool_idx[s],
                record[s],
                characteristics=self._pool_characteristics(),
                families=None if fams is None else {f: v[s] for f, v in fams.items()},
            )
            pool_idx[s], record[s] = pool_idx[s][perm], record[s][perm]

    def _families(self, pool_idx: np.ndarray, record: np.ndarray) -> dict[str, np.ndarray] | None:
        """The diversity ordering's characteristics of these samples, read by range (the
        pools' tables they read are checked against their checksums once a unit)."""
        if self.spec.order != "diversity":
            return None
        if self._readers is None:
            self._readers = [PoolReader(p.path) for p in self.pools]
            for pool in self._readers:
                verify.check_files_read(
                    pool.path,
                    pool.manifest,
                    pool.document_files()
                    + [f"{sh['prefix']}.segments.npz" for sh in pool.manifest["shards"]],
                )
        return sample_families(self._readers, self.spec.order_options, pool_idx, record)

    def _pool_characteristics(self) -> PoolFamilies | None:
        if self.spec.order != "greedy_block":
            return None
        if self._characteristics is None:
            paths = [p.path for p in self.pools]
            self._characteristics = pool_families(paths, self.spec.order_options)
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

"""Shuffle and mixture quality metrics, as plain numbers, lists and dicts for plotting.

Given one label per training sample in training order (its pool, source, cluster, length
bin...), with global share ``p_j`` of label j:

- window deviation: for every window of n consecutive samples (all M - n + 1 of them) and
  every label, ``|share of j in the window - p_j|``; its max and 99th percentile (over
  windows) per label and window size, against the ideal ``sqrt(2 p (1 - p) / (pi n))``, the
  mean absolute deviation of a perfect sample-level shuffle (a binomial proportion);
- distinct labels per batch (consecutive, non-overlapping batches): worst, best, mean;
- composition over position: the share of each (top) label in each of B position bins.

Algorithm. The count of label j in the window starting at a is a step function of a that
only changes where an occurrence of j enters or leaves the window, so it is evaluated only
at those O(m_j) breakpoints (by binary search over j's sorted positions), each weighted by
the number of windows it stands for. All labels are done at once with one sorted key
``label * (M + 1) + position``. Cost O(M log M) per window size instead of O(M * labels);
exact, not sampled.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from shardcore import pack
from shardcore.errors import InputError
from shardcore.manifest import read_manifest
from shardcore.mixture import Mixture
from shardcore.order import greedy, recipe, windowed
from shardcore.pool import PoolReader


def ideal_bound(p: float | np.ndarray, n: int | np.ndarray) -> float | np.ndarray:
    """Expected |window share - p| for n samples drawn independently: sqrt(2p(1-p)/(pi n))."""
    p = np.asarray(p, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    out = np.sqrt(2.0 * p * (1.0 - p) / (math.pi * n))
    return float(out) if out.ndim == 0 else out


class Coded:
    """Labels as integer codes (4 bytes a sample, whatever a label's text): ``codes`` index
    ``names``, numbered in the labels' sort order (the order ``np.unique`` gives the
    labels themselves), so every measurement is the same as on the labels. Sliced and
    indexed like an array."""

    __slots__ = ("codes", "names")

    def __init__(self, codes: np.ndarray, names: Sequence[str]):
        self.codes = np.asarray(codes)
        self.names = [str(x) for x in names]

    @classmethod
    def of(cls, labels: Sequence[Any] | np.ndarray) -> Coded:
        """``labels`` (one per sample) as codes in their sort order."""
        values, codes = np.unique(np.asarray(labels), return_inverse=True)
        return cls(codes.astype(np.int32), [str(x) for x in values.tolist()])

    @property
    def size(self) -> int:
        return int(self.codes.size)

    @property
    def ndim(self) -> int:
        return int(self.codes.ndim)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: Any) -> Coded:  # any numpy index of the codes
        return Coded(self.codes[index], self.names)


def _labels(labels: Sequence[Any] | np.ndarray | Coded) -> np.ndarray | Coded:
    return labels if isinstance(labels, Coded) else np.asarray(labels)


def encode_labels(labels: Sequence[Any] | np.ndarray | Coded) -> tuple[np.ndarray, list[str]]:
    """Integer codes 0..K-1 (in sorted label order) and the label names as strings, for the
    labels present."""
    if isinstance(labels, Coded):
        if labels.ndim != 1:
            raise InputError(f"labels: need one label per sample, got shape {labels.codes.shape}")
        present = np.unique(labels.codes)
        codes = np.searchsorted(present, labels.codes)
        return codes.astype(np.int64), [labels.names[int(i)] for i in present]
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise InputError(f"labels: need one label per sample, got shape {arr.shape}")
    names, codes = np.unique(arr, return_inverse=True)
    return codes.astype(np.int64), [str(x) for x in names.tolist()]


def default_window_sizes(num_samples: int, *, largest: int = 1 << 16) -> list[int]:
    """Powers of two from 2 up to min(largest, num_samples / 4)."""
    sizes, n = [], 2
    while n <= min(largest, num_samples // 4):
        sizes.append(n)
        n *= 2
    return sizes or [max(1, num_samples)]


class _Positions:
    """Label-grouped sample positions, sorted once and reused for every window size."""

    def __init__(self, codes: np.ndarray, k: int):
        self.m = codes.size
        self.k = k
        self.positions = np.argsort(codes, kind="stable")  # by label, positions ascending
        self.stride = self.m + 1
        self.keys = codes[self.positions] * self.stride + self.positions
        counts = np.bincount(codes, minlength=k)
        self.share = counts / self.m
        # Label c's occurrences are positions[first[c] : first[c + 1]].
        self.first = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(counts, out=self.first[1:])


# Labels measured together hold at most this many occurrences (one label more than this
# is measured alone): each label's breakpoints are independent, so the window statistics
# need arrays of a group's size, not of the whole sample.
_GROUP_OCCURRENCES = 1 << 16


def _window_stats(pos: _Positions, n: int, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Per label: max and q-quantile over all windows of n samples of |share - p|,
    computed for groups of labels in turn."""
    mx, pq = np.zeros(pos.k), np.zeros(pos.k)
    a = 0
    while a < pos.k:
        if pos.first[a + 1] - pos.first[a] > _GROUP_OCCURRENCES:
            mx[a], pq[a] = _label_stats(pos, a, n, q)
            a += 1
            continue
        # The labels [a, b): as many as fit _GROUP_OCCURRENCES.
        limit = pos.first[a] + _GROUP_OCCURRENCES
        b = max(a + 1, int(np.searchsorted(pos.first, limit, side="right")) - 1)
        mx[a:b], pq[a:b] = _group_stats(pos, a, b, n, q)
        a = b
    return mx, pq


def _label_stats(pos: _Positions, c: int, n: int, q: float) -> tuple[float, float]:
    """``_window_stats`` of label ``c`` alone, a range of window starts at a time, for a
    label with more occurrences than one group holds. A window of n samples holds 0..n of
    the label, so its deviation is one of n + 1 values: the windows are counted per count
    of the label (their weight), range by range, and the max and the weighted quantile read
    from those n + 1 totals. A range's start is a breakpoint of its own (the count there
    is the count of the windows before it: splitting a run of windows changes no total)."""
    stride, last = pos.stride, pos.m - n  # window starts 0..last
    occ = pos.positions[pos.first[c] : pos.first[c + 1]]
    base = c * stride
    weight = np.zeros(n + 1, dtype=np.float64)  # windows holding i of the label, per i
    # Range j starts where occurrence j * _GROUP_OCCURRENCES enters a window.
    bounds = [
        0,
        *np.clip(occ[_GROUP_OCCURRENCES::_GROUP_OCCURRENCES] - n + 1, 0, last + 1).tolist(),
    ]
    bounds.append(last + 1)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        if hi <= lo:
            continue
        # Breakpoints in [lo, hi): lo, just after each occurrence, where each one enters.
        near = occ[np.searchsorted(occ, lo - 1) : np.searchsorted(occ, hi + n - 1)]
        cand = np.concatenate([[lo], near + 1, near - n + 1])
        cand = np.unique(cand[(cand >= lo) & (cand < hi)])
        in_window = np.searchsorted(pos.keys, base + cand + n) - np.searchsorted(
            pos.keys, base + cand
        )
        widths = np.diff(np.r_[cand, hi])
        weight += np.bincount(in_window, weights=widths, minlength=n + 1)
    dev = np.abs(np.arange(n + 1) / n - pos.share[c])
    seen = np.flatnonzero(weight > 0)
    order = seen[np.argsort(dev[seen], kind="stable")]
    cum = np.cumsum(weight[order])
    at = min(int(np.searchsorted(cum, q * (last + 1), side="left")), order.size - 1)
    return float(dev[seen].max()), float(dev[order[at]])


def _group_stats(
    pos: _Positions, a: int, b: int, n: int, q: float
) -> tuple[np.ndarray, np.ndarray]:
    """``_window_stats`` of the labels [a, b)."""
    stride, last = pos.stride, pos.m - n  # window starts 0..last
    lo, hi = int(pos.first[a]), int(pos.first[b])
    positions = pos.positions[lo:hi]
    codes = np.repeat(np.arange(a, b, dtype=np.int64), np.diff(pos.first[a : b + 1]))
    # Breakpoints per label: 0, just after each occurrence, where each occurrence enters.
    cand_pos = np.concatenate([np.zeros(b - a, np.int64), positions + 1, positions - n + 1])
    np.clip(cand_pos, 0, last, out=cand_pos)
    cand = np.concatenate([np.arange(a, b), codes, codes]) * stride + cand_pos
    del cand_pos, codes
    cand.sort()
    bkeys = cand[np.r_[True, cand[1:] != cand[:-1]]]
    del cand
    blabel = bkeys // stride
    bpos = bkeys - blabel * stride
    in_window = np.searchsorted(pos.keys, bkeys + n) - np.searchsorted(pos.keys, bkeys)
    del bkeys
    dev = np.abs(in_window / n - pos.share[blabel])
    # Each breakpoint stands for the windows up to the next breakpoint of the same label.
    first = np.r_[True, blabel[1:] != blabel[:-1]]
    starts = np.flatnonzero(first)
    nxt = np.empty_like(bpos)
    nxt[:-1] = bpos[1:]
    nxt[np.r_[starts[1:] - 1, bpos.size - 1]] = last + 1
    weight = nxt - bpos
    max_dev = np.maximum.reduceat(dev, starts)
    # Weighted quantile per label: sort by (label, dev) through one float key (dev < 2),
    # then the first cumulative weight >= q * (number of windows).
    order = np.argsort((blabel - a) * 4.0 + dev)
    cum = np.cumsum(weight[order])
    group_end = np.r_[starts[1:], dev.size] - 1
    group_base = np.r_[0, cum[group_end[:-1]]]
    idx = np.minimum(np.searchsorted(cum, group_base + q * (last + 1), side="left"), group_end)
    return max_dev, dev[order][idx]


def window_deviation(
    labels: Sequence[Any] | np.ndarray | Coded,
    window_sizes: Sequence[int] | None = None,
    *,
    quantile: float = 0.99,
) -> dict[str, Any]:
    """Deviation of every window's composition from the global composition.

    Returns ``{"labels": [...], "share": [...], "window_sizes": [...], "max": [[per label]
    per size], "p99": [[...]], "ideal": [[...]], "max_all": [per size], "p99_all": [...],
    "ideal_all": [...]}``; ``*_all`` is the worst label (for ideal: the largest bound).
    """
    codes, names = encode_labels(labels)
    m = codes.size
    if m == 0:
        raise InputError("labels: empty, nothing to measure")
    sizes = list(window_sizes) if window_sizes is not None else default_window_sizes(m)
    for n in sizes:
        if not 1 <= int(n) <= m:
            raise InputError(f"window_sizes: {n} is not in [1, {m}] (number of samples)")
    k = len(names)
    pos = _Positions(codes, k)
    share = pos.share
    result: dict[str, Any] = {
        "labels": names,
        "share": share.tolist(),
        "num_samples": int(m),
        "window_sizes": [int(n) for n in sizes],
        "max": [],
        "p99": [],
        "ideal": [],
        "max_all": [],
        "p99_all": [],
        "ideal_all": [],
        "quantile": quantile,
    }
    for n in sizes:
        mx, pq = _window_stats(pos, int(n), quantile)
        ideal = ideal_bound(share, int(n))
        result["max"].append(mx.tolist())
        result["p99"].append(pq.tolist())
        result["ideal"].append(np.atleast_1d(ideal).tolist())
        result["max_all"].append(float(mx.max()))
        result["p99_all"].append(float(pq.max()))
        result["ideal_all"].append(float(np.max(ideal)))
    return result


def batch_diversity(labels: Sequence[Any] | np.ndarray | Coded, batch_size: int) -> dict[str, Any]:
    """Distinct labels per consecutive batch of ``batch_size`` samples (a last partial batch
    is ignored): worst (fewest), best (most), mean, and the per-batch list."""
    codes, names = encode_labels(labels)
    if batch_size < 1:
        raise InputError(f"batch_size: must be >= 1, got {batch_size}")
    nb = codes.size // batch_size
    if nb == 0:
        raise InputError(f"batch_size: {batch_size} exceeds the {codes.size} samples")
    grid = np.sort(codes[: nb * batch_size].reshape(nb, batch_size), axis=1)
    distinct = 1 + (np.diff(grid, axis=1) != 0).sum(axis=1)
    return {
        "batch_size": int(batch_size),
        "num_batches": int(nb),
        "possible": int(min(len(names), batch_size)),
        "worst": int(distinct.min()),
        "best": int(distinct.max()),
        "mean": float(distinct.mean()),
        "per_batch": distinct.tolist(),
    }


def composition(
    labels: Sequence[Any] | np.ndarray | Coded, *, bins: int = 100, top: int = 20
) -> dict[str, Any]:
    """Share of each of the ``top`` most frequent labels (the rest as "other") in each of
    ``bins`` equal position ranges: a heat map of composition over training position."""
    codes, names = encode_labels(labels)
    m = codes.size
    bins = max(1, min(bins, m))
    freq = np.bincount(codes, minlength=len(names))
    keep = np.argsort(-freq, kind="stable")[:top]
    remap = np.full(len(names), len(keep), dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    rows = [names[i] for i in keep] + (["other"] if len(names) > len(keep) else [])
    position_bin = np.arange(m) * bins // m
    flat = np.bincount(position_bin * len(rows) + remap[codes], minlength=bins * len(rows))
    grid = flat.reshape(bins, len(rows)).astype(np.float64)
    grid /= np.maximum(grid.sum(axis=1, keepdims=True), 1.0)
    edges = [int(b * m // bins) for b in range(bins + 1)]
    return {"labels": rows, "bin_edges": edges, "share": grid.T.tolist()}


def report(
    labels: Sequence[Any] | np.ndarray | Coded,
    *,
    batch_size: int = 1024,
    window_sizes: Sequence[int] | None = None,
    bins: int = 100,
) -> dict[str, Any]:
    """Everything the quality page plots, as one JSON-able dict."""
    arr = _labels(labels)
    batch_size = max(1, min(batch_size, arr.size))
    return {
        "windows": window_deviation(arr, window_sizes),
        "batches": batch_diversity(arr, batch_size),
        "composition": composition(arr, bins=bins),
    }


def document_shuffle_reference(
    doc_labels: Sequence[Any] | np.ndarray,
    doc_lengths: Sequence[int] | np.ndarray,
    seq_len: int,
    window_sizes: Sequence[int],
    *,
    trials: int = 8,
    seed: int = 0,
) -> dict[str, Any]:
    """What a perfect document-level shuffle reaches on these documents: ``trials``
    uniformly random permutations of them, each packed into records of ``seq_len + 1``
    tokens as a pool packs them and labelled by each record's main document, measured
    like the pool (``max_all`` per window size). A long document fills many consecutive
    records, so this, not the i.i.d. bound, is what a document shuffle can be held to.

    Returns ``{"window_sizes", "mean", "lo", "hi", "trials", "labels", "mean_by_label"}``
    (lo/hi: the spread over the trials; the last: per window size, each label's mean max
    deviation, in ``labels`` order, for the labels every trial's records have)."""

    labels = np.asarray(doc_labels)
    lengths = np.asarray(doc_lengths, dtype=np.int64)
    if labels.size != lengths.size:
        raise InputError(f"{labels.size} labels for {lengths.size} documents")
    rng = np.random.default_rng(seed)
    runs = []
    by_label: list[dict[str, np.ndarray]] = []
    for _ in range(max(1, trials)):
        perm = rng.permutation(labels.size)
        main = pack.plan_packing(lengths[perm], seq_len).segments.main_document()
        measured = window_deviation(labels[perm][main[main >= 0]], window_sizes)
        runs.append(measured["max_all"])
        mx = np.asarray(measured["max"], dtype=np.float64)
        by_label.append({str(x): mx[:, j] for j, x in enumerate(measured["labels"])})
    arr = np.asarray(runs, dtype=np.float64)
    # A short document may be no record's main document in some packings: such a label
    # has no reference of its own.
    common = [x for x in by_label[0] if all(x in t for t in by_label)]
    per_label = np.asarray([[t[x] for x in common] for t in by_label], dtype=np.float64)
    return {
        "window_sizes": [int(n) for n in window_sizes],
        "mean": arr.mean(axis=0).tolist(),
        "lo": arr.min(axis=0).tolist(),
        "hi": arr.max(axis=0).tolist(),
        "trials": int(arr.shape[0]),
        "labels": common,
        "mean_by_label": per_label.mean(axis=0).T.tolist() if common else [],
    }


EVENER = 0.8  # a ratio below this is worth saying: the order is more even than a shuffle


def verdict(
    window_sizes: Sequence[int],
    observed: Sequence[float],
    reference: Sequence[float],
    *,
    tolerance: float = 1.25,
) -> dict[str, Any]:
    """A sentence a person can act on: the smallest window size from which on the
    observed max deviation stays within ``tolerance`` x the reference's, and the worst
    ratio there. ``{"ok", "from_window", "ratio", "text"}``."""
    ratios = [
        o / r if r > 0 else (1.0 if o <= 0 else math.inf)
        for o, r in zip(observed, reference, strict=True)
    ]
    if not ratios:
        return {"ok": False, "from_window": None, "ratio": None, "text": "no windows measured"}
    start = None
    for i in range(len(ratios) - 1, -1, -1):
        if ratios[i] <= tolerance:
            start = i
        else:
            break
    if start is None:
        worst = max(range(len(ratios)), key=lambda i: ratios[i])
        return {
            "ok": False,
            "from_window": None,
            "ratio": ratios[worst],
            "text": f"not within {tolerance:g}x of a perfect shuffle at any window size "
            f"(worst {ratios[worst]:.1f}x at {window_sizes[worst]:,} samples)",
        }
    ratio = max(ratios[start:])
    best = min(range(start, len(ratios)), key=lambda i: ratios[i])
    # Below 1x the order deviates less than a shuffle does: "better than", not "within".
    where = f"at windows of {window_sizes[start]:,} samples and more"
    head = (
        f"better than a perfect shuffle {where} (at most {ratio:.2f}x its deviation)"
        if ratio < 0.995
        else f"within {ratio:.2f}x of a perfect shuffle {where}"
    )
    return {
        "ok": start == 0,
        "from_window": int(window_sizes[start]),
        "ratio": ratio,
        "text": head
        + ("" if start == 0 else f" ({max(ratios[:start]):.1f}x at smaller windows)")
        # An ordering that spreads values on purpose (a blend, diversity) beats a shuffle.
        + (
            f"; more even than one at {window_sizes[best]:,} samples ({ratios[best]:.2f}x)"
            if ratios[best] < EVENER
            else ""
        ),
    }


def sample_shuffle_reference(
    labels: Sequence[Any] | np.ndarray | Coded,
    window_sizes: Sequence[int],
    *,
    trials: int = 8,
    seed: int = 0,
) -> dict[str, Any]:
    """What a perfect sample-level shuffle reaches on these samples: ``trials`` uniformly
    random permutations of them, measured like the schedule (``max_all`` per window size).
    A mixture's schedule orders samples (records), not documents, so this is its
    reference. Returns ``{"window_sizes", "mean", "lo", "hi", "trials", "labels",
    "mean_by_label"}`` (the last: per window size, each label's mean max deviation, in
    ``labels`` order)."""
    arr = _labels(labels)
    rng = np.random.default_rng(seed)
    measured = [
        window_deviation(arr[rng.permutation(arr.size)], window_sizes)
        for _ in range(max(1, trials))
    ]
    out = np.asarray([m["max_all"] for m in measured], dtype=np.float64)
    by_label = np.asarray([m["max"] for m in measured], dtype=np.float64)
    return {
        "window_sizes": [int(n) for n in window_sizes],
        "mean": out.mean(axis=0).tolist(),
        "lo": out.min(axis=0).tolist(),
        "hi": out.max(axis=0).tolist(),
        "trials": int(out.shape[0]),
        "labels": [str(x) for x in measured[0]["labels"]],
        "mean_by_label": by_label.mean(axis=0).tolist(),
    }


def label_verdicts(windows: dict[str, Any], reference: dict[str, Any]) -> list[dict[str, Any]]:
    """Each label's own verdict (``verdict`` of its max deviation against what a perfect
    shuffle reaches for that label), largest share first: ``[{"label", "share",
    "verdict"}]``. The worst label's verdict alone hides a label that mixes well."""
    if not reference.get("mean_by_label"):
        return []
    sizes = windows["window_sizes"]
    ref = np.asarray(reference["mean_by_label"], dtype=np.float64)
    col = {label: j for j, label in enumerate(reference["labels"])}
    mx = np.asarray(windows["max"], dtype=np.float64)
    out = []
    for j, label in enumerate(windows["labels"]):
        if str(label) not in col:
            continue
        out.append(
            {
                "label": str(label),
                "share": float(windows["share"][j]),
                "verdict": verdict(sizes, mx[:, j].tolist(), ref[:, col[str(label)]].tolist()),
            }
        )
    return sorted(out, key=lambda r: -r["share"])


# Per stage (a longer stage is measured on its start): a version's build measures the
# schedule once and the reference `trials` times, about 4 s in all for 65,536 samples of
# four pools on a loaded core; windows up to 16,384 samples.
MIXTURE_QUALITY_SAMPLES = 1 << 16


def mixture_quality(
    path: str,
    *,
    by: str = "pool",
    batch_size: int = 256,
    trials: int = 4,
    seed: int = 0,
    max_samples: int = MIXTURE_QUALITY_SAMPLES,
) -> dict[str, Any]:
    """The quality of a built mixture's schedule, labelled ``by`` (``pool``, ``stage`` or
    a document property): per stage, since each stage has its own shares, its window
    deviation against random permutations of the same samples and a verdict. The first
    stage's full report (``windows``, ``batches``, ``composition``, ``reference``,
    ``verdict``) is the top level, the same shape as a pool's; ``stages`` holds every
    stage's ``{"name", "num_samples", "measured", "verdict"}``. A stage longer than
    ``max_samples`` is measured on its first ``max_samples`` samples (``measured``)."""

    mix = Mixture(path)
    out: dict[str, Any] = {"label": by, "stages": []}
    for i, st in enumerate(mix.manifest["stages"]):
        first, n = int(st["first_sample"]), int(st["num_samples"])
        # Only the samples measured are read and labelled (as integer codes).
        seg = mixture_labels(mix, by, first, first + min(n, max_samples))
        if seg.size < 8:  # too short for a window of 2 to say anything
            out["stages"].append(
                {
                    "name": st["name"],
                    "num_samples": n,
                    "measured": int(seg.size),
                    "verdict": {
                        "ok": False,
                        "from_window": None,
                        "ratio": None,
                        "text": f"too few samples ({seg.size}) to measure",
                    },
                }
            )
            continue
        values = np.unique(seg.codes)
        if values.size == 1:  # nothing to mix: every window holds the one value alone
            value = seg.names[int(values[0])]
            out["stages"].append(
                {
                    "name": st["name"],
                    "num_samples": n,
                    "measured": int(seg.size),
                    "verdict": {
                        "ok": True,
                        "from_window": None,
                        "ratio": None,
                        "value": value,
                        "text": f"one {by} only ({value}): nothing to mix",
                    },
                }
            )
            continue
        rep = report(seg, batch_size=min(batch_size, seg.size))
        rep["batches"].pop("per_batch", None)  # one number per batch: not kept
        sizes = rep["windows"]["window_sizes"]
        ref = sample_shuffle_reference(seg, sizes, trials=trials, seed=seed + i)
        rep["reference"] = ref
        rep["verdict"] = verdict(sizes, rep["windows"]["max_all"], ref["mean"])
        out["stages"].append(
            {
                "name": st["name"],
                "num_samples": n,
                "measured": int(seg.size),
                "verdict": rep["verdict"],
                "labels": label_verdicts(rep["windows"], ref),
            }
        )
        if i == 0:
            out.update(rep)
    return out


def mixture_labels(mix: Mixture, by: str, start: int, stop: int) -> Coded:
    """The labels of samples [start, stop) of a built mixture ``mix``
    (``shardcore.mixture.Mixture``) as integer codes: ``pool`` (its key), ``stage`` (its
    name) or a property of each sample's record's main document
    (``PoolReader.record_labels``). Reads that range of the schedule only (and, for a
    property, the documents of the pools it reads); numbered as the labels' own sort
    order, so the numbers measured are those of ``Mixture.labels(by)[start:stop]``."""
    stop = max(start, min(int(stop), mix.num_samples))
    pidx = np.asarray(mix.pool_index[start:stop]).astype(np.int64)
    if by == "pool":
        keys = np.array([str(p["key"]) for p in mix.pools])
        order = np.argsort(keys, kind="stable")
        rank = np.empty(len(keys), dtype=np.int32)
        rank[order] = np.arange(len(keys), dtype=np.int32)
        return Coded(rank[pidx], keys[order].tolist())
    if by == "stage":
        stages = mix.manifest["stages"]
        starts = np.array([int(st["first_sample"]) for st in stages], dtype=np.int64)
        which = np.searchsorted(starts, np.arange(start, stop, dtype=np.int64), side="right") - 1
        names = np.array([str(st["name"]) for st in stages])
        return Coded.of(names[which])

    rec = np.asarray(mix.record_index[start:stop]).astype(np.int64)
    values = np.empty(stop - start, dtype=object)
    for i in np.unique(pidx).tolist():
        sel = pidx == i
        pool = PoolReader(mix.pools[i]["path"], ranged=True)  # on object storage: not copied
        values[sel] = pool.record_labels(by, rec[sel])
    return Coded.of(values)


# A pool's recipe measurement reads at most the records holding this many documents.
RECIPE_DOCUMENTS = 1 << 19


def recipe_quality(
    path: str,
    *,
    by: str | None = None,
    length_bins: int = 100,
    batch_size: int = 256,
    trials: int = 8,
    checkpoints: int = 20,
    seed: int = 0,
    with_greedy: bool = False,
    limit: int | None = None,
    pool_sources: bool = False,
    max_documents: int = RECIPE_DOCUMENTS,
) -> dict[str, Any]:
    """The diversity recipe's measurements (``shardcore.order.recipe.recipe_report``) of a
    pool (records in pool order, against random orders of the same documents packed alike:
    ``recipe.document_shuffles``) or a mixture (samples in schedule order), on token-count
    characteristic vectors from the pools' segments: the document property ``by`` (none:
    only length), ``length_bins`` document-length quantile bins and, for a mixture of
    several pools, the pool. ``with_greedy`` also measures the recipe's greedy order of
    the same records (``greedy``, against random orders of those records); ``limit``: only
    the first that many records of the order (a mixture's: of each stage);
    ``pool_sources``: a pool of several tokenized sources also balances the source
    (``_doc.source``); ``max_documents``: a pool is measured on no more records than hold
    that many documents (the random orders it is held to shuffle them, ~400 bytes a
    document: a pool of small documents packs dozens into a record). Returns ``{"order": report, "greedy": report?}``.

    A mixture is measured stage by stage, like with like: each stage's samples (its
    first ``limit``) against random orders of the same stage's samples, with that stage's
    own shares (a stage has its own weights: random orders that mix the stages, or the
    whole schedule's shares, would make every staged order look uneven). A mixture's
    report is its first stage's, with ``stages``: every stage's report, with its
    ``name``, ``first_sample``, ``num_samples`` and ``measured``."""

    kind = read_manifest(path).get("kind")
    props = [by] if by and by not in ("pool", "stage") else []
    if kind == "pool":
        if pool_sources and len(read_manifest(path).get("sources") or []) > 1:
            props = ["_doc.source", *props]
        # Ranged: on object storage the segments and columns read, not a copy of the pool.
        reader = PoolReader(path, ranged=True)
        within = reader.records_holding(max_documents)
        limit = within if limit is None else min(limit, within)
        ch, docs = recipe.pool_characteristics(
            [reader],
            by=props,
            length_bins_count=length_bins,
            limit=limit,
            documents=True,
        )
        order = np.arange(ch.num_records)
        # A pool's order is a document shuffle: held to random orders of its documents.
        shuffle = recipe.document_shuffles(docs)
    elif kind == "mixture":
        return _mixture_recipe(
            Mixture(path),
            props,
            length_bins=length_bins,
            limit=limit,
            with_greedy=with_greedy,
            batch_size=batch_size,
            trials=trials,
            checkpoints=checkpoints,
            seed=seed,
        )
    else:
        raise InputError(f"{path}: quality needs a pool or a mixture, not a {kind!r}")
    measure = functools.partial(
        recipe.recipe_report, batch_size=batch_size, trials=trials, checkpoints=checkpoints
    )
    out: dict[str, Any] = {"order": measure(ch, order, seed=seed, shuffle=shuffle)}
    if with_greedy:
        # The greedy orders records: held to random orders of the same records.
        out["greedy"] = measure(ch, greedy.greedy_order(ch, seed=seed), seed=seed)
    return out


def _mixture_recipe(
    mix: Mixture,
    props: list[str],
    *,
    length_bins: int,
    limit: int | None,
    with_greedy: bool,
    batch_size: int,
    trials: int,
    checkpoints: int,
    seed: int,
) -> dict[str, Any]:
    """``recipe_quality`` of a schedule: stage by stage (see there)."""
    measure = functools.partial(
        recipe.recipe_report, batch_size=batch_size, trials=trials, checkpoints=checkpoints
    )
    # The measured samples' vectors read by range (the pools' families in streamed passes):
    # what ``pool_characteristics(pools).take(rows)`` gives, in memory that follows the
    # samples measured, not the pools.
    paths = [p["path"] for p in mix.pools]
    fam = windowed.pool_families(paths, {"by": props, "length_bins": length_bins or False})
    out: dict[str, Any] = {}
    for i, st in enumerate(mix.manifest["stages"]):
        a, n = int(st["first_sample"]), int(st["num_samples"])
        b = a + (n if limit is None else min(n, limit))
        part = windowed.sample_characteristics(
            fam, np.asarray(mix.pool_index[a:b]), np.asarray(mix.record_index[a:b])
        )
        order = np.arange(b - a)
        where = {"name": st["name"], "first_sample": a, "num_samples": n, "measured": b - a}
        reports = {"order": measure(part, order, seed=seed + i)}
        if with_greedy:
            reports["greedy"] = measure(part, greedy.greedy_order(part, seed=seed), seed=seed + i)
        for key, rep in reports.items():
            if i == 0:
                out[key] = {**rep, "stages": []}
            out[key]["stages"].append({**where, **rep})
    return out

"""Labels per training sample and their window deviation (``shardcore.quality``'s first
measure): for every window of n consecutive samples and every label, how far the label's
share in the window is from its global share.

Algorithm. The count of label j in the window starting at a is a step function of a that
only changes where an occurrence of j enters or leaves the window, so it is evaluated only
at those O(m_j) breakpoints (by binary search over j's sorted positions), each weighted by
the number of windows it stands for. All labels are done at once with one sorted key
``label * (M + 1) + position``. Cost O(M log M) per window size instead of O(M * labels);
exact, not sampled.

Memory: the labels are measured a group at a time (labels holding at most
``_GROUP_OCCURRENCES`` occurrences together), and a label with more occurrences than that
a range of window starts at a time, its windows totalled per count of the label (a window
holds 0..n of it: n + 1 deviations); every array is a group's or a range's size, not the
sample's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from shardcore.errors import InputError


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


def as_labels(labels: Sequence[Any] | np.ndarray | Coded) -> np.ndarray | Coded:
    """Labels as an array, or as the codes they already are."""
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

"""Quantiles of integers given by their counts, as numpy computes them on the integers
themselves: what the recipe's length bins need of every document's length, held as a
histogram (memory the largest length, not the documents) rather than as one value per
document."""

from __future__ import annotations

import numpy as np

from shardcore.errors import InputError


def quantiles_of_counts(counts: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``np.quantile(values, q)`` (its default, linear method) of the non-negative integers
    ``values`` given by their counts (``counts[v]``: how many are ``v``), computed as numpy
    computes it on the values sorted, to the bit: the sorted values at the two indexes
    around ``(n - 1) * q``, interpolated by numpy's ``_lerp``."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    q = np.asarray(q, dtype=np.float64)
    if n == 0:
        raise InputError("quantiles: no values")
    cum = np.cumsum(counts)
    virtual = (n - 1) * q
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1  # numpy takes the last value (index -1) for both
    previous[above] = -1
    following[above] = -1
    gamma = virtual - previous

    def sorted_at(index: np.ndarray) -> np.ndarray:
        k = np.where(index < 0, n - 1, index).astype(np.int64)
        return np.searchsorted(cum, k, side="right").astype(np.float64)

    a, b = sorted_at(previous), sorted_at(following)
    diff = b - a
    out = a + diff * gamma
    return np.where(gamma >= 0.5, b - diff * (1 - gamma), out)

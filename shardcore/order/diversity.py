"""Diversity ordering ("don't shuffle, optimize"): a greedy order that keeps every window
of training close to the global composition of every characteristic.

Each sequence has one label per *family* of characteristics (its pool or source, a
categorical property such as a cluster id or language, a document-length bin). With T_v
the sequences placed so far that carry value v, tau_v its global share and S the number
placed, the next sequence minimizes::

    sum_f lambda_f * sum_{v in f} [(T_v + [v in s]) - tau_v (S + 1)]^2

Sequences here are pool records, all seq_len + 1 tokens long, so the same objective over
token counts (T_v and S in tokens, S + L after a sequence of L tokens) is this one times a
constant: counting sequences is exact.

Decomposition. Expanding the squares, every term that does not depend on the candidate is
the same for all candidates, and what remains is additive over families::

    score(s) = sum_f lambda_f * (T_{s_f} - tau_{s_f} (S + 1))    (+ a constant)

so the score depends only on the candidate's *class*, its tuple of values (s_1, ..., s_F),
and is a sum of per-family terms. Sequences are bucketed by class (in a seeded random order
inside each class), and each step finds the best class that still has sequences by branch
and bound over the values of the *outer* family (the one with most values, so that each of
its values owns few classes): outer values are visited in increasing term order, each
contributes a lower bound ``term(v) + sum of the other families' minimum terms``, and the
classes of a visited value are scored exactly in one vectorized gather. The search stops as
soon as the bound reaches the best score found, typically after one or two values.

A step therefore costs O(sum of family sizes + classes of the visited values) numpy work,
never a scan over the sequences or all classes: M sequences cost O(M * (V + C/V_outer)), no
O(M^2). The result is the exact greedy optimum at every step; ties go to the first class
found. The trade-off against an exact shuffle: the order is deterministic given the seed,
and each characteristic's window deviation stays near the one-sample floor instead of
growing like sqrt(p(1-p)/n) as in a random order.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shardcore.errors import InputError
from shardcore.kernels import compile_kernel

_C_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXF 8

typedef struct { double score; int32_t pivot; int32_t r[MAXF]; } entry;

static void heap_push(entry *h, int64_t *n, const entry *e) {
    int64_t i = (*n)++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (h[p].score <= e->score) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = *e;
}

static void heap_pop(entry *h, int64_t *n, entry *top) {
    *top = h[0];
    entry last = h[--(*n)];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].score < h[c].score) c++;
        if (last.score <= h[c].score) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
}

/* Greedy diversity order. Returns 0, or -1 on allocation failure, -2 on bad input.
   F families with cards[f] values; tau[V] (lambda-scaled shares), lam[F];
   C classes: vals[C*F] (value within family), size[C]; members[M] grouped by class. */
int sy_diversity(int32_t F, const int64_t *cards, const double *tau, const double *lam,
                 int64_t C, const int64_t *vals, const int64_t *size, const int64_t *members,
                 int64_t M, int64_t budget, int64_t *out) {
    if (F < 1 || F > MAXF) return -2;
    int64_t off[MAXF + 1], radix[MAXF];
    off[0] = 0;
    for (int f = 0; f < F; ++f) off[f + 1] = off[f] + cards[f];
    radix[0] = 1;
    for (int f = 1; f < F; ++f) radix[f] = radix[f - 1] * cards[f - 1];
    int64_t V = off[F];
    int64_t hsize = 1;
    while (hsize < 2 * C + 2) hsize <<= 1;
    double *term = malloc(sizeof(double) * V), *placed = calloc(V, sizeof(double));
    int32_t *ord = malloc(sizeof(int32_t) * V);
    int64_t *hkey = malloc(sizeof(int64_t) * hsize), *hval = malloc(sizeof(int64_t) * hsize);
    int64_t *rem = malloc(sizeof(int64_t) * C), *next = malloc(sizeof(int64_t) * C);
    int64_t *live = malloc(sizeof(int64_t) * C), *where = malloc(sizeof(int64_t) * C);
    int64_t hcap = budget * F + 2;
    entry *heap = malloc(sizeof(entry) * hcap);
    int rc = 0;
    if (!term || !placed || !ord || !hkey || !hval || !rem || !next || !live || !where || !heap) {
        rc = -1;
        goto done;
    }
    for (int64_t v = 0; v < V; ++v) ord[v] = 0;
    for (int f = 0; f < F; ++f)
        for (int64_t v = 0; v < cards[f]; ++v) ord[off[f] + v] = (int32_t)v;
    for (int64_t i = 0; i < hsize; ++i) hkey[i] = -1;
    int64_t start = 0;
    for (int64_t c = 0; c < C; ++c) {
        int64_t key = 0;
        for (int f = 0; f < F; ++f) key += vals[c * F + f] * radix[f];
        uint64_t h = ((uint64_t)key * 0x9E3779B97F4A7C15ULL) & (uint64_t)(hsize - 1);
        while (hkey[h] != -1) h = (h + 1) & (uint64_t)(hsize - 1);
        hkey[h] = key;
        hval[h] = c;
        rem[c] = size[c];
        next[c] = start;
        start += size[c];
        live[c] = c;
        where[c] = c;
    }
    int64_t nlive = C;
    for (int64_t step = 0; step < M; ++step) {
        double s1 = (double)(step + 1);
        for (int64_t v = 0; v < V; ++v) term[v] = placed[v] - tau[v] * s1;
        /* Keep each family's values sorted by term: nearly sorted already, insertion sort. */
        for (int f = 0; f < F; ++f) {
            int32_t *o = ord + off[f];
            const double *t = term + off[f];
            for (int64_t i = 1; i < cards[f]; ++i) {
                int32_t x = o[i];
                double tx = t[x];
                int64_t j = i - 1;
                while (j >= 0 && t[o[j]] > tx) { o[j + 1] = o[j]; --j; }
                o[j + 1] = x;
            }
        }
        int64_t best = -1;
        if (nlive > budget) {
            /* Best-first enumeration of value tuples by increasing score. */
            int64_t hn = 0, pops = 0;
            entry e;
            e.pivot = 0;
            e.score = 0.0;
            for (int f = 0; f < F; ++f) { e.r[f] = 0; e.score += term[off[f] + ord[off[f]]]; }
            heap_push(heap, &hn, &e);
            while (hn > 0 && pops < budget) {
                entry top;
                heap_pop(heap, &hn, &top);
                ++pops;
                int64_t key = 0;
                for (int f = 0; f < F; ++f) key += (int64_t)ord[off[f] + top.r[f]] * radix[f];
                uint64_t h = ((uint64_t)key * 0x9E3779B97F4A7C15ULL) & (uint64_t)(hsize - 1);
                while (hkey[h] != -1 && hkey[h] != key) h = (h + 1) & (uint64_t)(hsize - 1);
                if (hkey[h] == key && rem[hval[h]] > 0) { best = hval[h]; break; }
                for (int f = top.pivot; f < F; ++f) {
                    int32_t r = top.r[f] + 1;
                    if (r >= cards[f]) continue;
                    entry ch = top;
                    ch.r[f] = r;
                    ch.pivot = f;
                    ch.score = top.score + term[off[f] + ord[off[f] + r]] - term[off[f] + ord[off[f] + r - 1]];
                    if (hn < hcap) heap_push(heap, &hn, &ch);
                }
            }
        }
        if (best < 0) {
            /* Few classes left, or the enumeration ran out of budget: scan the live ones. */
            double bs = 0.0;
            for (int64_t k = 0; k < nlive; ++k) {
                int64_t c = live[k];
                double s = 0.0;
                for (int f = 0; f < F; ++f) s += term[off[f] + vals[c * F + f]];
                if (best < 0 || s < bs || (s == bs && c < best)) { bs = s; best = c; }
            }
        }
        out[step] = members[next[best]++];
        if (--rem[best] == 0) {
            int64_t k = where[best], lastc = live[--nlive];
            live[k] = lastc;
            where[lastc] = k;
        }
        for (int f = 0; f < F; ++f) placed[off[f] + vals[best * F + f]] += lam[f];
    }
done:
    free(term); free(placed); free(ord); free(hkey); free(hval);
    free(rem); free(next); free(live); free(where); free(heap);
    return rc;
}
"""

_TOP_K = 24


def _encode(families: Sequence[np.ndarray]) -> tuple[np.ndarray, list[int]]:
    if not families:
        raise InputError("families: need at least one characteristic")
    sizes = {len(f) for f in families}
    if len(sizes) != 1:
        raise InputError(f"families: label arrays differ in length: {sorted(sizes)}")
    codes, cards = [], []
    for labels in families:
        _, inv = np.unique(np.asarray(labels), return_inverse=True)
        codes.append(inv.astype(np.int64).ravel())
        cards.append(int(inv.max()) + 1 if inv.size else 0)
    return np.stack(codes, axis=1), cards


@dataclass(frozen=True)
class _Classes:
    """Sequences grouped by class (their tuple of family values), as both branches need."""

    m: int  # sequences
    cards: list[int]  # values per family
    lam: np.ndarray  # lambda per family
    members: np.ndarray  # sequences by class, in a seeded random order inside each class
    class_size: np.ndarray  # sequences per class
    class_vals: np.ndarray  # (classes, families): each class's value of each family
    tau: np.ndarray  # each value's global share times its family's lambda


def _classes(
    families: Sequence[np.ndarray], weights: Sequence[float] | None, seed: int
) -> _Classes | None:
    """Validate ``weights`` and group the sequences by class; None when there are none."""
    codes, cards = _encode(families)
    m, nf = codes.shape
    lam = np.ones(nf) if weights is None else np.asarray(weights, dtype=np.float64)
    if lam.shape != (nf,):
        raise InputError(f"weights: need {nf} values (one per family), got {lam.size}")
    if (~np.isfinite(lam) | (lam < 0)).any():
        raise InputError(f"weights: lambda must be finite and >= 0, got {lam.tolist()}")
    if m == 0:
        return None
    if float(np.prod([float(c) for c in cards])) >= 2.0**62:
        raise InputError("families: too many distinct value combinations to index")
    radix = np.cumprod([1, *cards[:-1]]).astype(np.int64)
    class_keys, class_of = np.unique(codes @ radix, return_inverse=True)
    perm = np.random.default_rng(seed).permutation(m)
    share = np.concatenate([np.bincount(codes[:, f], minlength=cards[f]) / m for f in range(nf)])
    return _Classes(
        m=m,
        cards=cards,
        lam=lam,
        members=perm[np.argsort(class_of[perm], kind="stable")],
        class_size=np.bincount(class_of, minlength=class_keys.size).astype(np.int64),
        class_vals=np.stack([(class_keys // radix[f]) % cards[f] for f in range(nf)], axis=1),
        tau=share * np.repeat(lam, cards),
    )


def _diversity_numpy(
    families: Sequence[np.ndarray],
    *,
    weights: Sequence[float] | None = None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """``diversity_order`` by numpy branch and bound (same arguments, same order)."""
    k = _classes(families, weights, seed)
    if k is None:
        return np.zeros(0, dtype=np.int64)
    m, nf, cards, lam = k.m, len(k.cards), k.cards, k.lam
    members, class_size, class_vals = k.members, k.class_size, k.class_vals
    offsets = np.r_[0, np.cumsum(cards)].astype(np.int64)
    tau = k.tau  # pre-scaled by lambda: term_v = lam*T_v - lam*tau_v*(S+1)
    placed = np.zeros(int(offsets[-1]), dtype=np.float64)  # lam * T_v
    class_flat = class_vals + offsets[:-1][None, :]  # each class's value slots in `term`

    outer = int(np.argmax(cards))
    o_lo, o_hi = int(offsets[outer]), int(offsets[outer + 1])
    by_outer = np.argsort(class_vals[:, outer], kind="stable")
    bounds = np.searchsorted(class_vals[by_outer, outer], np.arange(cards[outer] + 1))
    live: list[np.ndarray] = [by_outer[bounds[v] : bounds[v + 1]] for v in range(cards[outer])]
    live_vals = np.array([v for v in range(cards[outer]) if live[v].size], dtype=np.int64)
    remaining = class_size.tolist()
    next_member = np.r_[0, np.cumsum(class_size)[:-1]].tolist()
    lam_l = lam.tolist()
    out = np.empty(m, dtype=np.int64)
    report_every = max(1, m // 100)
    fam_starts = offsets[:-1]

    for step in range(m):
        term = placed - tau * (step + 1)
        mins = np.minimum.reduceat(term, fam_starts)
        rest_min = float(mins.sum() - mins[outer])
        outer_terms = term[o_lo:o_hi][live_vals]
        if outer_terms.size > _TOP_K:
            cand = np.argpartition(outer_terms, _TOP_K - 1)[:_TOP_K]
            cand = cand[np.argsort(outer_terms[cand], kind="stable")]
        else:
            cand = np.argsort(outer_terms, kind="stable")
        best, best_score = -1, np.inf
        cand_l = cand.tolist()
        bound_l = (outer_terms[cand] + rest_min).tolist()
        for i, c in enumerate(cand_l):
            if bound_l[i] >= best_score:
                break
            ids = live[live_vals[c]]
            scores = term[class_flat[ids]].sum(axis=1)
            j = int(np.argmin(scores))
            if scores[j] < best_score:
                best_score, best = float(scores[j]), int(ids[j])
        else:
            if cand.size < outer_terms.size:
                # The top-k did not settle it: score every live class (rare, exact).
                ids = np.concatenate([live[v] for v in live_vals.tolist()])
                scores = term[class_flat[ids]].sum(axis=1)
                best = int(ids[int(np.argmin(scores))])
        out[step] = members[next_member[best]]
        next_member[best] += 1
        remaining[best] -= 1
        if remaining[best] == 0:
            v = int(class_vals[best, outer])
            live[v] = live[v][live[v] != best]
            if live[v].size == 0:
                live_vals = live_vals[live_vals != v]
        for f in range(nf):
            placed[class_flat[best, f]] += lam_l[f]
        if progress is not None and (step + 1) % report_every == 0:
            progress(step + 1, m)
    return out


_MAX_FAMILIES = 8
_BUDGET = 256


def _kernel() -> ctypes.CDLL | None:
    lib = compile_kernel("diversity", _C_SOURCE)
    if lib is not None and not getattr(lib, "_sy_typed", False):
        i64 = np.ctypeslib.ndpointer(np.int64, flags="C")
        f64 = np.ctypeslib.ndpointer(np.float64, flags="C")
        lib.sy_diversity.argtypes = [
            ctypes.c_int32,
            i64,
            f64,
            f64,
            ctypes.c_int64,
            i64,
            i64,
            i64,
            ctypes.c_int64,
            ctypes.c_int64,
            i64,
        ]
        lib.sy_diversity.restype = ctypes.c_int
        lib._sy_typed = True  # type: ignore[attr-defined]  # a mark on the loaded library
    return lib


def diversity_order(
    families: Sequence[np.ndarray],
    *,
    weights: Sequence[float] | None = None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """The greedy diversity order of M sequences as a permutation of ``range(M)``.

    ``families``: F arrays of M labels (any hashable dtype). ``weights``: lambda per family
    (default 1 each; lambda_f of the objective in the module docstring). Runs the
    compiled kernel (best-first enumeration over the families' values kept sorted by
    insertion sort, an exact scan of the live classes when few remain); without a C
    compiler, the numpy branch and bound (same objective, slower).
    """
    lib = _kernel()
    if lib is None or len(families) > _MAX_FAMILIES:
        return _diversity_numpy(families, weights=weights, seed=seed, progress=progress)
    k = _classes(families, weights, seed)
    if k is None:
        return np.zeros(0, dtype=np.int64)
    m = k.m
    out = np.empty(m, dtype=np.int64)
    rc = lib.sy_diversity(
        len(k.cards),
        np.asarray(k.cards, np.int64),
        np.ascontiguousarray(k.tau, np.float64),
        np.ascontiguousarray(k.lam),
        k.class_size.size,
        np.ascontiguousarray(k.class_vals, np.int64),
        np.ascontiguousarray(k.class_size, np.int64),
        np.ascontiguousarray(k.members, np.int64),
        m,
        _BUDGET,
        out,
    )
    if rc != 0:
        raise MemoryError(f"shardcore.order.diversity: kernel failed with code {rc}")
    if progress is not None:
        progress(m, m)
    return out

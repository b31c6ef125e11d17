"""The blend schedule: which pool each training sample comes from, Megatron-exact.

Algorithm ("largest error first", megatron-core ``build_blending_indices``): for sample i,
with x = max(i, 1) as a double, pick the pool d maximizing ``w[d] * x - count[d]`` (ties to
the lowest d), emit (d, count[d]) and increment count[d]. No pool ever falls more than
one sample behind its share, and any window of W samples holds ``w*W`` samples of each
pool up to ``D - 1`` (worst case; below 2 in practice, see ``window_tolerance``).

Exactness: the arrays must equal megatron-core's byte for byte, so the floating-point
operations are the same (one rounded multiply, one rounded subtract, no fused multiply-add,
strict ``>`` scanning from d = 0). Trade-off: the schedule is inherently sequential (each
pick changes one count that the next pick reads), so it cannot be vectorized across samples
in numpy. We compile a small C kernel of our own (below, by ``shardcore.kernels``) on first
use, into the cache directory, and call it through ctypes. For up to 32 pools it evaluates
all errors in AVX2 registers, reduces them with a max tree and finds the first maximal pool
with a bit scan, which removes the data-dependent branches of the scalar loop; above 32
pools it makes two vector passes (the max, then the first lane equal to it); without AVX2
it runs the scalar loop. Without a C compiler it falls back to a
pure Python/numpy loop (exact, slow: several microseconds per sample) and says so once.

dtypes are Megatron's: ``dataset_index`` int16 (so at most 32,767 pools), ``dataset_sample_index``
int64.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from types import ModuleType

import numpy as np

from shardcore.errors import InputError
from shardcore.kernels import compile_kernel

MAX_POOLS = int(np.iinfo(np.int16).max)
_CHUNK = 1 << 22  # samples per kernel call: bounded latency for progress callbacks

_C_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <immintrin.h>

#define MAXV 8

/* Unrolled for a constant number V of 4-double vectors (D <= 4V pools). */
__attribute__((target("avx2,bmi")))
static inline __attribute__((always_inline)) void body_avx2(
    const int V, const double *wp, int64_t start, int64_t n, int64_t *counts,
    double *cdp, int16_t *di, int64_t *si) {
    __m256d w[MAXV], c[MAXV], iota[MAXV];
    const __m256d one = _mm256_set1_pd(1.0);
    for (int k = 0; k < V; ++k) {
        w[k] = _mm256_loadu_pd(wp + 4 * k);
        c[k] = _mm256_loadu_pd(cdp + 4 * k);
        iota[k] = _mm256_set_pd(4 * k + 3, 4 * k + 2, 4 * k + 1, 4 * k);
    }
    for (int64_t j = 0; j < n; ++j) {
        int64_t i = start + j;
        __m256d x = _mm256_set1_pd(i > 1 ? (double)i : 1.0);
        __m256d e[MAXV], t[MAXV];
        for (int k = 0; k < V; ++k) {
            e[k] = _mm256_sub_pd(_mm256_mul_pd(w[k], x), c[k]);
            t[k] = e[k];
        }
        int len = V;
        while (len > 1) {
            int h = len / 2;
            for (int k = 0; k < h; ++k) t[k] = _mm256_max_pd(t[2 * k], t[2 * k + 1]);
            if (len & 1) { t[h] = t[len - 1]; len = h + 1; } else { len = h; }
        }
        __m256d s = _mm256_max_pd(t[0], _mm256_permute2f128_pd(t[0], t[0], 1));
        s = _mm256_max_pd(s, _mm256_permute_pd(s, 5));
        uint32_t bits = 0;
        for (int k = 0; k < V; ++k)
            bits |= (uint32_t)_mm256_movemask_pd(_mm256_cmp_pd(e[k], s, _CMP_EQ_OQ)) << (4 * k);
        int best = __builtin_ctz(bits);  /* first pool whose error equals the max */
        __m256d b = _mm256_set1_pd((double)best);
        for (int k = 0; k < V; ++k)
            c[k] = _mm256_add_pd(c[k], _mm256_and_pd(_mm256_cmp_pd(iota[k], b, _CMP_EQ_OQ), one));
        di[j] = (int16_t)best;
        si[j] = counts[best]++;
    }
    for (int k = 0; k < V; ++k) _mm256_storeu_pd(cdp + 4 * k, c[k]);
}

__attribute__((target("avx2,bmi")))
static void dispatch_avx2(int V, const double *wp, int64_t start, int64_t n, int64_t *counts,
                          double *cdp, int16_t *di, int64_t *si) {
    switch (V) {
    case 1: body_avx2(1, wp, start, n, counts, cdp, di, si); break;
    case 2: body_avx2(2, wp, start, n, counts, cdp, di, si); break;
    case 3: body_avx2(3, wp, start, n, counts, cdp, di, si); break;
    case 4: body_avx2(4, wp, start, n, counts, cdp, di, si); break;
    case 5: body_avx2(5, wp, start, n, counts, cdp, di, si); break;
    case 6: body_avx2(6, wp, start, n, counts, cdp, di, si); break;
    case 7: body_avx2(7, wp, start, n, counts, cdp, di, si); break;
    default: body_avx2(8, wp, start, n, counts, cdp, di, si); break;
    }
}

/* Any number of pools: two passes over the vectors (max, then the first lane equal to it). */
__attribute__((target("avx2,bmi")))
static void body_avx2_any(int64_t V, const double *wp, int64_t start, int64_t n,
                          int64_t *counts, double *cdp, int16_t *di, int64_t *si) {
    for (int64_t j = 0; j < n; ++j) {
        int64_t i = start + j;
        __m256d x = _mm256_set1_pd(i > 1 ? (double)i : 1.0);
        __m256d m = _mm256_set1_pd(-__builtin_inf());
        for (int64_t k = 0; k < V; ++k)
            m = _mm256_max_pd(m, _mm256_sub_pd(_mm256_mul_pd(_mm256_loadu_pd(wp + 4 * k), x),
                                               _mm256_loadu_pd(cdp + 4 * k)));
        __m256d s = _mm256_max_pd(m, _mm256_permute2f128_pd(m, m, 1));
        s = _mm256_max_pd(s, _mm256_permute_pd(s, 5));
        int64_t best = 0;
        for (int64_t k = 0; k < V; ++k) {
            __m256d e = _mm256_sub_pd(_mm256_mul_pd(_mm256_loadu_pd(wp + 4 * k), x),
                                      _mm256_loadu_pd(cdp + 4 * k));
            int mask = _mm256_movemask_pd(_mm256_cmp_pd(e, s, _CMP_EQ_OQ));
            if (mask) { best = 4 * k + __builtin_ctz((unsigned)mask); break; }
        }
        cdp[best] += 1.0;
        di[j] = (int16_t)best;
        si[j] = counts[best]++;
    }
}

/* Samples [start, start + n) of the schedule; counts[] (in/out) holds the picks so far. */
int sy_blend(const double *w, int32_t D, int64_t start, int64_t n, int64_t *counts,
             int16_t *di, int64_t *si) {
    if (D <= 4 * MAXV && __builtin_cpu_supports("avx2")) {
        int V = (D + 3) / 4;
        double wp[4 * MAXV], cdp[4 * MAXV];
        for (int k = 0; k < 4 * V; ++k) {
            wp[k] = k < D ? w[k] : 0.0;
            cdp[k] = k < D ? (double)counts[k] : __builtin_inf();  /* padding never wins */
        }
        dispatch_avx2(V, wp, start, n, counts, cdp, di, si);
        return 1;
    }
    if (__builtin_cpu_supports("avx2")) {
        int64_t V = ((int64_t)D + 3) / 4;
        double *wp = malloc(sizeof(double) * 4 * (size_t)V);
        double *cdp = malloc(sizeof(double) * 4 * (size_t)V);
        if (!wp || !cdp) { free(wp); free(cdp); return -1; }
        for (int64_t k = 0; k < 4 * V; ++k) {
            wp[k] = k < D ? w[k] : 0.0;
            cdp[k] = k < D ? (double)counts[k] : __builtin_inf();
        }
        body_avx2_any(V, wp, start, n, counts, cdp, di, si);
        free(wp);
        free(cdp);
        return 2;
    }
    double *cd = malloc(sizeof(double) * (size_t)D);
    if (!cd) return -1;
    for (int32_t d = 0; d < D; ++d) cd[d] = (double)counts[d];
    for (int64_t j = 0; j < n; ++j) {
        int64_t i = start + j;
        double x = i > 1 ? (double)i : 1.0;
        int32_t best = 0;
        double bm = w[0] * x - cd[0];
        for (int32_t d = 1; d < D; ++d) {
            double e = w[d] * x - cd[d];
            if (e > bm) { bm = e; best = d; }
        }
        di[j] = (int16_t)best;
        si[j] = counts[best]++;
        cd[best] += 1.0;
    }
    free(cd);
    return 0;
}
"""


def _load_kernel() -> ctypes.CDLL | None:
    lib = compile_kernel("blend", _C_SOURCE)
    if lib is not None and not getattr(lib, "_sy_typed", False):
        ptr = np.ctypeslib.ndpointer
        lib.sy_blend.argtypes = [
            ptr(np.float64, flags="C"),
            ctypes.c_int32,
            ctypes.c_int64,
            ctypes.c_int64,
            ptr(np.int64, flags="C"),
            ptr(np.int16, flags="C"),
            ptr(np.int64, flags="C"),
        ]
        lib.sy_blend.restype = ctypes.c_int
        lib._sy_typed = True  # type: ignore[attr-defined]  # a mark on the loaded library
    return lib


def check_weights(weights: Sequence[float] | np.ndarray, *, field: str = "weights") -> np.ndarray:
    """Weights as float64, validated: finite, positive, between 1 and 32,767 of them."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise InputError(f"{field}: need a non-empty list of weights, got shape {w.shape}")
    if w.size > MAX_POOLS:
        raise InputError(f"{field}: {w.size} pools; Megatron's int16 index allows {MAX_POOLS}")
    bad = np.flatnonzero(~np.isfinite(w) | (w <= 0))
    if bad.size:
        raise InputError(f"{field}[{int(bad[0])}] = {w[bad[0]]!r}: weights must be positive")
    return w


def normalize(weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """``w / sum(w)`` in float64, as megatron-core's ``utils.normalize`` computes it."""
    w = check_weights(weights)
    return w / np.sum(w)


def _megatron_helper() -> ModuleType | None:
    """megatron-core's compiled helper if installed (a fallback when ours cannot build)."""
    try:
        from megatron.core.datasets import helpers_cpp
    except Exception:  # not installed, or its own import fails: not our concern here
        return None
    return helpers_cpp


def _blend_python(
    w: np.ndarray, start: int, counts: np.ndarray, di: np.ndarray, si: np.ndarray
) -> None:
    # Same float operations as the kernel: numpy float64 multiply then subtract, elementwise.
    cd = counts.astype(np.float64)
    for j in range(di.size):
        i = start + j
        x = float(i) if i > 1 else 1.0
        best = int(np.argmax(w * x - cd))  # argmax returns the first maximum: ties to low d
        di[j] = best
        si[j] = counts[best]
        counts[best] += 1
        cd[best] += 1.0


def build_blending_indices(
    weights: Sequence[float] | np.ndarray,
    size: int,
    *,
    normalized: bool = True,
    progress: Callable[[int, int], None] | None = None,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The schedule of ``size`` samples: ``(dataset_index int16, dataset_sample_index int64)``.

    ``weights`` are normalized to sum 1 first (as Megatron's blended dataset config does)
    unless ``normalized=False``, in which case they are used exactly as given. ``out`` may
    supply the two arrays (e.g. np.memmap files); ``progress(done, size)`` is called per chunk.
    """
    w = normalize(weights) if normalized else check_weights(weights)
    size = int(size)
    if size < 0:
        raise InputError(f"size: must be >= 0, got {size}")
    if out is None:
        di = np.empty(size, dtype=np.int16)
        si = np.empty(size, dtype=np.int64)
    else:
        di, si = out
        if (
            di.shape != (size,)
            or di.dtype != np.int16
            or si.shape != (size,)
            or si.dtype != np.int64
        ):
            raise InputError("out: need (int16[size], int64[size]) arrays")
    counts = np.zeros(w.size, dtype=np.int64)
    lib = _load_kernel()
    helper = _megatron_helper() if lib is None else None
    if helper is not None and di.flags.c_contiguous and si.flags.c_contiguous:
        # No kernel of ours: megatron-core's helper is the same algorithm (same arrays).
        helper.build_blending_indices(di, si, w, w.size, size, False)
        if progress is not None:
            progress(size, size)
        return di, si
    for start in range(0, size, _CHUNK):
        stop = min(size, start + _CHUNK)
        blend_range(w, start, counts, (di[start:stop], si[start:stop]))
        if progress is not None:
            progress(stop, size)
    return di, si


_PICK_CHUNK = 1 << 16  # samples per kernel call of ``blend_at``: a small buffer, reused


def blend_at(weights: Sequence[float] | np.ndarray, sample: int) -> tuple[int, int]:
    """Sample ``sample`` of the schedule of ``weights`` (normalized first):
    ``(dataset_index, dataset_sample_index)``, the same as
    ``build_blending_indices(weights, sample + 1)`` answers at ``sample``, without the two
    arrays of ``sample + 1`` entries (80 MB for 8 M samples): the blend runs in chunks
    through one small buffer, keeping only the counts (its state). The answer depends on
    nothing else, so the process keeps the latest ones (a page asking again is answered
    at once)."""
    sample = int(sample)
    if sample < 0:
        raise InputError(f"sample: must be >= 0, got {sample}")
    return _blend_at(tuple(check_weights(weights).tolist()), sample)


@functools.lru_cache(maxsize=256)
def _blend_at(weights: tuple[float, ...], sample: int) -> tuple[int, int]:
    if _load_kernel() is None:  # the fallback reads megatron-core's helper when installed
        di, si = build_blending_indices(weights, sample + 1)
        return int(di[sample]), int(si[sample])
    w = normalize(weights)
    counts = np.zeros(w.size, dtype=np.int64)
    size = min(_PICK_CHUNK, sample + 1)
    di, si = np.empty(size, dtype=np.int16), np.empty(size, dtype=np.int64)
    start = 0
    while True:
        n = min(size, sample + 1 - start)
        blend_range(w, start, counts, (di[:n], si[:n]))
        if start + n > sample:
            return int(di[n - 1]), int(si[n - 1])
        start += n


def blend_range(
    w: np.ndarray, start: int, counts: np.ndarray, out: tuple[np.ndarray, np.ndarray]
) -> None:
    """Samples [start, start + len(out[0])) of the schedule of the (already normalized)
    weights ``w``, continuing from ``counts`` (per pool: its picks among samples [0,
    start)), which it advances. The state of the blend at a sample is exactly these counts
    (the kernel rebuilds its float errors from them), so a schedule built range by range,
    from the counts the previous range left, is the one built in a single pass."""
    di, si = out
    lib = _load_kernel()
    if lib is not None and di.flags.c_contiguous and si.flags.c_contiguous:
        rc = lib.sy_blend(w, w.size, int(start), di.size, counts, di, si)
        if rc < 0:
            raise MemoryError("shardcore.blend: the C kernel could not allocate")
    else:
        _blend_python(w, int(start), counts, di, si)


def window_tolerance(weights: Sequence[float] | np.ndarray) -> float:
    """Guaranteed bound on ``|count of pool d in any window of W samples - w_d * W|``: D - 1.

    Proof sketch. Let E_d(n) = w_d*n - count_d(n) after n samples; the E_d sum to 0. A pool
    is picked only when its E is the largest, hence >= 0, and the pick lowers it by
    1 - w_d, so E_d(n) >= -(1 - w_d) always; with the sum 0 that gives E_d(n) <= D - 2 + w_d.
    A window [a, b) holds w_d*(b-a) + E_d(a) - E_d(b) samples of d, off by at most D - 1.
    For two pools that is 1; measured on random weights the deviation stays below 2 even for
    20 pools (the bound is worst case). A tiny slack covers float rounding of the errors.
    """
    w = check_weights(weights)
    return float(max(w.size - 1, 1)) + 1e-6

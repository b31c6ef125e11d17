"""Shuffle and mixture quality metrics, as plain numbers, lists and dicts for plotting.

Given one label per training sample in training order (its pool, source, cluster, length
bin...), with global share ``p_j`` of label j:

- window deviation: for every window of n consecutive samples (all M - n + 1 of them) and
  every label, ``|share of j in the window - p_j|``; its max and 99th percentile (over
  windows) per label and window size, against the ideal ``sqrt(2 p (1 - p) / (pi n))``, the
  mean absolute deviation of a perfect sample-level shuffle (a binomial proportion);
- distinct labels per batch (consecutive, non-overlapping batches): worst, best, mean;
- composition over position: the share of each (top) label in each of B position bins.

The window deviation's algorithm is in ``shardcore.window_deviation``.
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
from shardcore.window_deviation import Coded, as_labels, encode_labels, window_deviation

# The labels' measures that callers reach through this module.
from shardcore.window_deviation import default_window_sizes as default_window_sizes
from shardcore.window_deviation import ideal_bound as ideal_bound


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
    arr = as_labels(labels)
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
    arr = as_labels(labels)
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

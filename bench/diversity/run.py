"""Scale of the diversity recipe's windowed greedy: M records x clusters x length bins.

``python bench/diversity/run.py [--records 10000000] [--clusters 1000] [--bins 100]
[--budget 600] [--docs-per-record 3] [--window 2048 --behind 8 --heads 1]`` builds
synthetic characteristic vectors (each record holds 1 to ``--docs-per-record`` documents' tokens, Zipf-distributed clusters, lognormal
document lengths cut into quantile bins), then times, in this one process:

- setup of the windowed greedy (``shardcore.order.greedy``: stream, queues) and its steps;
  the greedy stops after ``--budget`` seconds of steps and the full time is extrapolated
  from the steps done (said so in the report);
- the existing ``diversity`` ordering (compiled kernel over one label per family per
  record: the dominant cluster and bin) on the same records, as the side-by-side peer;
- a numpy random permutation (the shuffle baseline).

Prints the machine, load, wall / CPU time, peak RSS (VmHWM) and the recipe measurements
of the (completed prefix of the) order against random permutations.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import machine, peak_rss_mb  # noqa: E402
from shardcore.order import greedy, recipe  # noqa: E402
from shardcore.order.diversity import diversity_order  # noqa: E402


class _Stop(Exception):
    pass


def synthetic(m: int, clusters: int, bins: int, docs: int, seed: int = 0):
    """Characteristics of m records of 2048 tokens, each from 1..docs documents."""
    rng = np.random.default_rng(seed)
    width = 2 * docs
    n_docs = rng.integers(1, docs + 1, m)
    cuts = np.sort(rng.random((m, docs - 1)), axis=1)
    share = np.diff(np.c_[np.zeros(m), cuts, np.ones(m)], axis=1)
    share[np.arange(docs)[None, :] >= n_docs[:, None]] = 0.0
    share /= share.sum(1, keepdims=True)
    tokens = np.round(share * 2048).astype(np.float32)
    tokens[:, 0] += 2048 - tokens.sum(1)
    cl = (rng.zipf(1.3, (m, docs)) - 1) % clusters
    lengths = rng.lognormal(6.0, 1.3, (m, docs))
    edges = np.quantile(lengths[:, 0], np.arange(1, bins) / bins)
    lb = np.searchsorted(edges, lengths).astype(np.int64)
    idx = np.full((m, width), recipe.PAD, dtype=np.int32)
    val = np.zeros((m, width), dtype=np.float32)
    on = tokens > 0
    idx[:, :docs] = np.where(on, cl, recipe.PAD)
    idx[:, docs:] = np.where(on, clusters + lb, recipe.PAD)
    val[:, :docs] = tokens
    val[:, docs:] = tokens
    # Merge duplicate characteristics inside a record (two documents of one cluster).
    for lo in (0, docs):
        blk = idx[:, lo : lo + docs]
        vb = val[:, lo : lo + docs]
        for a in range(docs):
            for b in range(a + 1, docs):
                same = (blk[:, a] == blk[:, b]) & (blk[:, b] >= 0)
                vb[same, a] += vb[same, b]
                vb[same, b] = 0.0
                blk[same, b] = recipe.PAD
    family_of = np.r_[np.zeros(clusters, np.int64), np.ones(bins, np.int64)]
    names = [[str(i) for i in range(clusters)], [str(i) for i in range(bins)]]
    return recipe.Characteristics(idx, val, family_of, ["cluster", "length"], names)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--bins", type=int, default=100)
    ap.add_argument("--docs-per-record", type=int, default=3)
    ap.add_argument("--budget", type=float, default=600.0, help="seconds of greedy steps")
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--window", type=int, default=2048, help="greedy_order window")
    ap.add_argument("--behind", type=int, default=8, help="greedy_order behind")
    ap.add_argument("--heads", type=int, default=1, help="greedy_order heads")
    a = ap.parse_args()
    print(f"machine: {machine()}; load {os.getloadavg()[0]:.1f} at start")
    print(f"greedy_order window={a.window} behind={a.behind} heads={a.heads}")
    t0, c0 = time.perf_counter(), time.process_time()
    ch = synthetic(a.records, a.clusters, a.bins, a.docs_per_record)
    print(f"records {a.records:,} x {a.clusters} clusters x {a.bins} bins, slots "
          f"{ch.idx.shape[1]}; data {time.perf_counter() - t0:.1f} s, rss {peak_rss_mb():.0f} MB")  # fmt: skip
    done = [0]
    state = {"t": None}

    def progress(k: int, m: int) -> None:
        if state["t"] is None:
            state["t"] = time.perf_counter()
        done[0] = k
        if time.perf_counter() - state["t"] > a.budget:
            raise _Stop

    t1, c1 = time.perf_counter(), time.process_time()
    first_step = [None]

    def progress_wrap(k: int, m: int) -> None:
        if first_step[0] is None:
            first_step[0] = (time.perf_counter(), k)
        progress(k, m)

    finished = True
    try:
        order = greedy.greedy_order(
            ch, seed=0, window=a.window, behind=a.behind, heads=a.heads, progress=progress_wrap
        )
    except _Stop:
        finished = False
        order = None
    wall, cpu = time.perf_counter() - t1, time.process_time() - c1
    k = done[0] if not finished else a.records
    if first_step[0] is not None and k > first_step[0][1]:
        rate = (k - first_step[0][1]) / (time.perf_counter() - first_step[0][0] - 0.0)
    else:
        rate = k / wall
    setup = (first_step[0][0] - t1) if first_step[0] else 0.0
    est = setup + a.records / rate
    print(f"greedy_order: {'finished' if finished else 'stopped'} after {k:,} of "
          f"{a.records:,} steps, wall {wall:.1f} s (cpu {cpu:.1f} s), setup ~{setup:.1f} s, "
          f"{rate:,.0f} steps/s -> full order {'took' if finished else 'would take'} "
          f"~{est:.0f} s ({est / 60:.1f} min); peak rss {peak_rss_mb():.0f} MB")  # fmt: skip
    if finished:
        rep = recipe.recipe_report(ch, order, batch_size=1024, trials=4, checkpoints=20)
        for fam, d in rep["families"].items():
            print(f"  {fam}: cumulative below every random at every checkpoint: "
                  f"{d['cumulative']['below_all']} (max ratio {d['cumulative']['max_ratio']:.3f}); "
                  f"worst batch {d['batches']['order_worst']:.4f} vs random best "
                  f"{d['batches']['random_best']:.4f}, mean {d['batches']['random_mean']:.4f}")  # fmt: skip
    if not a.skip_peer:
        dom_c = ch.idx[:, 0].astype(np.int64)
        dom_l = ch.idx[:, a.docs_per_record].astype(np.int64)
        t2, c2 = time.perf_counter(), time.process_time()
        diversity_order([dom_c, dom_l], seed=0)
        print(f"diversity (record labels, compiled kernel): wall "
              f"{time.perf_counter() - t2:.1f} s, cpu {time.process_time() - c2:.1f} s")  # fmt: skip
    t3 = time.perf_counter()
    np.random.default_rng(0).permutation(a.records)
    print(f"numpy permutation: {time.perf_counter() - t3:.2f} s")
    print(f"peak rss {peak_rss_mb():.0f} MB; load {os.getloadavg()[0]:.1f} at end; "
          f"total wall {time.perf_counter() - t0:.0f} s, cpu {time.process_time() - c0:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

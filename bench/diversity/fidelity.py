"""The windowed greedy against the exact greedy on 10^4 records, per parameter setting.

``python bench/diversity/fidelity.py [--seeds 5] [--config 2048,8,1 ...]`` builds the unit
test's data (``tests.unit.test_order_recipe._synthetic``: 10,018 records of 256 tokens from
9,500 lognormal-length documents, 30 Zipf clusters, 20 length bins), orders it with the
exact greedy once and with ``greedy_order(window, behind, heads)`` for each ``--config``
and seeds 0..``--seeds``-1, and prints per family the ratio to the exact greedy of the
max (and 99th percentile) over windows of the token-share deviation at window sizes
2..1,024: range over seeds and sizes, each seed's worst size, and the geometric mean over
sizes. A window of M-100 is the exact greedy except in its first 100 steps. Last, the
exact greedy on its records renumbered (``--renumbered`` times): its sensitivity to ties.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import machine  # noqa: E402
from shardcore.order import greedy, recipe  # noqa: E402
from tests.unit.test_order_recipe import _synthetic  # noqa: E402

SIZES = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
DEFAULT = ["2048,8,1", "2048,30,1", "2048,30,4", "2048,8,4", "1024,30,4", "512,30,8",
           "4096,8,1", "4096,30,4", "8192,8,1", "256,8,1", "M-100,0,1"]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--config", nargs="*", default=DEFAULT, help="window,behind,heads")
    ap.add_argument("--renumbered", type=int, default=3, help="exact greedy, renumbered")
    a = ap.parse_args()
    print(f"machine: {machine()}; load {os.getloadavg()[0]:.1f}")
    ch, *_ = _synthetic(9_500)
    m = ch.num_records
    t0 = time.process_time()
    exact = greedy.greedy_exact(ch)
    print(f"{m:,} records; exact greedy {time.process_time() - t0:.1f} CPU s")
    ex = recipe.window_deviation(ch, exact, SIZES)
    ex99 = recipe.window_deviation(ch, exact, SIZES, quantile=0.99)
    for cfg in a.config:
        w, b, h = cfg.split(",")
        window = m - 100 if w == "M-100" else int(w)
        t1 = time.process_time()
        rows = {f: {"max": [], "worst": [], "gm": [], "p99": []} for f in ch.families}
        for seed in range(a.seeds):
            o = greedy.greedy_order(ch, seed=seed, window=window, behind=int(b), heads=int(h))
            fa = recipe.window_deviation(ch, o, SIZES)
            f99 = recipe.window_deviation(ch, o, SIZES, quantile=0.99)
            for f in ch.families:
                r = np.asarray(fa[f]) / np.asarray(ex[f])
                rows[f]["max"] += [r.min(), r.max()]
                rows[f]["worst"].append(r.max())
                rows[f]["gm"].append(np.exp(np.log(r).mean()))
                rows[f]["p99"] += list(np.asarray(f99[f]) / np.asarray(ex99[f]))
        print(f"window {w}, behind {b}, heads {h} ({time.process_time() - t1:.1f} CPU s)")
        for f, d in rows.items():
            print(f"  {f}: per size {min(d['max']):.2f}-{max(d['max']):.2f}x; each seed's "
                  f"worst {' / '.join(f'{x:.2f}' for x in d['worst'])}; geometric mean "
                  f"{min(d['gm']):.2f}-{max(d['gm']):.2f}x; 99th percentile "
                  f"{min(d['p99']):.2f}-{max(d['p99']):.2f}x")  # fmt: skip
    # The exact greedy on its records renumbered (ties between equal scores go otherwise).
    for k in range(a.renumbered):
        perm = np.random.default_rng(100 + k).permutation(m)
        dev = recipe.window_deviation(ch, perm[greedy.greedy_exact(ch.take(perm))], SIZES)
        print(f"exact greedy, records renumbered ({k}): " + "; ".join(
            f"{f} {np.min(np.asarray(dev[f]) / ex[f]):.3f}-{np.max(np.asarray(dev[f]) / ex[f]):.3f}x"
            for f in ch.families))  # fmt: skip
    print(f"load {os.getloadavg()[0]:.1f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

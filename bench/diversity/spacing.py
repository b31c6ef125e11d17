"""Duplicate spacing on real text: a small pool read several epochs in one mixture, so each
record has one copy per epoch; how close do copies come in each ordering?

``python bench/diversity/spacing.py --out /tmp/spacing [--epochs 4] [--seeds 3]`` builds a
pool of CPython standard-library modules (``tests.unit.mix_fixtures``, 64-token records)
and mixtures reading it ``--epochs`` times with the orders ``random`` (a uniform
permutation of the schedule), ``diversity`` and ``greedy_block`` (the recipe's greedy,
which spaces copies of one record: ``shardcore.order.greedy``; also its greedy order before
the block shuffle), and prints per order the
smallest distance between two copies of a record (``recipe.min_copy_distance``), the
median over records of their closest pair, and the share of records with two copies
closer than a tenth of an epoch.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from bench.common import machine  # noqa: E402
from shardcore import manifest as mf  # noqa: E402
from shardcore.mixture import Mixture, build_mixture  # noqa: E402
from shardcore.order import greedy, recipe, schedule_characteristics  # noqa: E402
from tests.unit import mix_fixtures  # noqa: E402

ORDERS = ("random", "diversity", "greedy_block")


def closest(groups: np.ndarray) -> np.ndarray:
    """Per group with two or more copies, the smallest distance between two of them."""
    pos = np.argsort(groups, kind="stable")
    g = groups[pos]
    gap = np.diff(pos)
    same = g[1:] == g[:-1]
    out: dict[int, int] = {}
    for k, d in zip(g[1:][same].tolist(), gap[same].tolist(), strict=True):
        out[k] = min(out.get(k, d), d)
    return np.array(list(out.values()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    out = Path(a.out)
    print(f"machine: {machine()}; load {os.getloadavg()[0]:.1f}")
    pool = mix_fixtures.build_pools(out / "pools", seq_len=64, n_docs=300)["middle"]
    m = mf.read_manifest(pool)
    n = int(m["num_records"])
    print(f"pool: {n:,} records of 64 + 1 tokens, read {a.epochs} times")
    print(
        "| order | min distance between copies | median closest pair | records with copies < epoch/10 |"
    )
    print("|---|---:|---:|---:|")
    rows_out, unblocked = [], ([], [], [])
    for order in ORDERS:
        mins, meds, close = [], [], []
        for seed in range(a.seeds):
            path = out / "mixtures" / f"{order}-{seed}"
            if not (path / mf.MANIFEST_NAME).exists():
                build_mixture({"components": [{"pool": str(pool), "weight": 1}],
                               "tokens": a.epochs * n * 64, "seed": seed, "order": order,
                               "max_repetitions": a.epochs}, path)  # fmt: skip
            rec = np.asarray(Mixture(path).record_index).astype(np.int64)
            c = closest(rec)
            mins.append(recipe.min_copy_distance(rec, np.arange(rec.size)))
            meds.append(float(np.median(c)))
            close.append(float((c < n / 10).mean()))
            if order == "greedy_block":  # the greedy order before its blocks are shuffled
                ch, rows = schedule_characteristics(np.zeros(rec.size), rec, [pool])
                g = rows[greedy.greedy_order(ch, seed=seed, groups=rows)]
                c = closest(g)
                unblocked[0].append(recipe.min_copy_distance(g, np.arange(g.size)))
                unblocked[1].append(float(np.median(c)))
                unblocked[2].append(float((c < n / 10).mean()))
        rows_out.append((order, mins, meds, close))
    rows_out.append(("greedy, before the block shuffle", *unblocked))
    for order, mins, meds, close in rows_out:
        print(f"| {order} | {min(mins):,}-{max(mins):,} | {min(meds):,.0f}-{max(meds):,.0f} | "
              f"{min(close):.1%}-{max(close):.1%} |")  # fmt: skip
    print(f"(ranges over {a.seeds} seeds; an epoch is {n:,} samples; load "
          f"{os.getloadavg()[0]:.1f} at end)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

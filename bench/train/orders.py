"""The tiny GPT on the same documents in three orders: a random permutation of the
schedule (the exact shuffle), ``diversity`` and ``greedy_block`` (the recipe's greedy on
token counts, whole global batches shuffled), three seeds each.

Data (``bench/train/prepare.py``): two pools of real text from this machine's CPython
standard library, module code and docstrings, each with a held-out ``val/`` slice. Each
mixture reads both pools once (weights = the pools' token counts, a budget of all
their records but 4), so every run trains on the same samples; only the order differs. A seed
changes the order (the mixture's seed: its permutation, its greedy's stream and block
shuffle) and the model's initialisation together. One pass over the data, then the
validation loss per source (each pool's ``val/`` slice) is recorded; printed as a table
of mean and spread (min-max) over the seeds.

    python bench/train/orders.py --data /tmp/recipe-train --out /tmp/recipe-train/runs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from bench.train.prepare import SOURCES, prepare  # noqa: E402
from bench.train.tiny_gpt import Config, train  # noqa: E402
from shardcore import manifest as mf  # noqa: E402
from shardcore.mixture import build_mixture  # noqa: E402

ORDERS = ("random", "diversity", "greedy_block")


def mixture(paths: dict[str, str], out: Path, order: str, seed: int, batch: int) -> Path:
    """Both pools read once, in ``order`` (built unless its manifest exists)."""
    path = out / "mixtures" / f"{order}-{seed}"
    if not (path / mf.MANIFEST_NAME).exists():
        pools = [paths[f"pool/{s}"] for s in SOURCES]
        tokens = [int(mf.read_manifest(p)["num_tokens"]) for p in pools]
        seq_len = int(mf.read_manifest(pools[0])["seq_len"])
        spec = {
            "components": [{"pool": p, "weight": t} for p, t in zip(pools, tokens, strict=True)],
            # every record about once: both pools' records less a few (the blend rounds
            # a pool's share up), in sequence-length units
            "tokens": (sum(int(mf.read_manifest(p)["num_records"]) for p in pools) - 4) * seq_len,
            "seed": seed,
            "order": order,
            "max_repetitions": 1,
        }
        if order == "greedy_block":
            spec["order_options"] = {}
        build_mixture(spec, path)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="prepare.py's folder (built if missing)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-kb", type=int, default=400, help="text per source, in KiB")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=96)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    paths = prepare(args.data, max_kb=args.max_kb)
    out = Path(args.out)
    results: dict[str, list[dict[str, float]]] = {o: [] for o in ORDERS}
    print(f"load {os.getloadavg()[0]:.1f} at start")
    for seed in range(args.seeds):
        for order in ORDERS:
            mix = mixture(paths, out, order, seed, args.batch)
            n = int(mf.read_manifest(mix)["num_samples"])
            steps = n // args.batch
            cfg = Config(batch_size=args.batch, steps=steps, eval_every=max(1, steps // 4),
                         d_model=args.d_model, seed=seed)  # fmt: skip
            run = out / "runs" / f"{order}-{seed}"
            hist = train(str(mix), run, cfg, log=lambda *_: None)
            last = hist["val"][-1]["losses"]
            loss = {Path(s["pool"]).name: s["loss"] for s in last if not s["source"]}
            results[order].append(loss)
            print(f"{order} seed {seed}: {steps} steps of {args.batch}, {n:,} samples; val "
                  + ", ".join(f"{k} {v:.4f}" for k, v in loss.items())
                  + f"; cpu {hist['cpu_seconds']:.0f} s", flush=True)  # fmt: skip
    print(f"\n| order | {' | '.join(f'val loss, {s} (mean, min-max)' for s in SOURCES)} |")
    print("|---|" + "---:|" * len(SOURCES))
    for order in ORDERS:
        cells = []
        for s in SOURCES:
            v = np.array([r[s] for r in results[order]])
            cells.append(f"{v.mean():.4f} ({v.min():.4f}-{v.max():.4f})")
        print(f"| {order} | {' | '.join(cells)} |")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"load {os.getloadavg()[0]:.1f} at end; wall {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

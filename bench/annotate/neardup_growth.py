"""The cross-source near-duplicate units (stage ``annotate.neardup``) from 10^5 to a few
million documents: CPU time and peak memory of each phase against documents, to say on
paper how it reaches 10^9 (bench/annotate/README.md).

Synthetic signatures (128 permutations, 16 bands; 5% of documents a near-copy of another
with 10% of its permutations redrawn, Jaccard ~0.9; 1% exact copies) in shards of 100,000
documents, written by the signature units' own ``write_keys``; then every bucket unit and
the clusters unit as the job engine runs them, one process. Peak memory is traced
(tracemalloc: numpy's and scipy's buffers) per unit; ``--memory-mb`` is the budget that
sets the number of partitions.

    PYTHONPATH=$PWD python bench/annotate/neardup_growth.py [--sizes 1e5,1e6,3e6] [--memory-mb 256]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

_CHILD = r"""
import json, sys, tempfile, time, tracemalloc
import numpy as np
from shardcore import units
from shardcore.annotate import neardup
n, budget = int(sys.argv[1]), int(sys.argv[2])
near, exact_share = float(sys.argv[3]), float(sys.argv[4])
shard = 100_000
rng = np.random.default_rng(0)
sizes = [min(shard, n - lo) for lo in range(0, n, shard)]
with tempfile.TemporaryDirectory(prefix="sy-annmod-growth-") as out:
    ann = neardup.NearDuplicates(memory_mb=budget)
    partitions = neardup.partitions_for(n, ann.params)
    meta = {"sources": [{"fingerprint": "synthetic", "offset": 0, "documents": n,
                         "shards": [{"documents": s, "first_doc_id": 0} for s in sizes]}],
            "documents": n, "partitions": partitions, "rounds": neardup.ROUNDS}
    plan = units.Plan(neardup.STAGE, out, dict(ann.params), [], meta)
    sig = rng.integers(0, 2**32, size=(n, 128), dtype=np.uint32)
    exact = rng.integers(0, 2**63, size=n, dtype=np.uint64)
    k, e = int(n * near), int(n * exact_share)
    exact[n - k - e:n - k] = exact[:e]
    sig[n - k - e:n - k] = sig[:e]
    src = rng.integers(0, n - k, size=k)
    sig[n - k:] = sig[src]
    noise = rng.random((k, 128)) < 0.1
    sig[n - k:][noise] = rng.integers(0, 2**32, size=int(noise.sum()), dtype=np.uint32)
    t0 = time.process_time()
    for j, lo in enumerate(range(0, n, shard)):
        neardup.write_keys(plan, f"0-{j}", sig[lo:lo + shard], exact[lo:lo + shard], lo)
    t_sig = time.process_time() - t0
    del sig
    t_bucket, peak_bucket, edges = 0.0, 0, 0
    for q in range(partitions):
        tracemalloc.start()
        t0 = time.process_time()
        edges += neardup._run_bucket(plan, {"partition": q})["edges"]
        t_bucket += time.process_time() - t0
        peak_bucket = max(peak_bucket, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    comp = neardup._components_of(plan)
    rounds = neardup.ROUNDS
    half_edges = [comp.adjacency(q).shape[1] for q in range(partitions)]
    steps = [(f"round-{r}", lambda q, r=r: comp.run_round(r, q)) for r in range(1, rounds + 1)]
    steps += [("resolve", lambda q: comp.run_resolve(rounds) if q == 0 else {}),
              ("count", lambda q: comp.run_count(rounds, q)), ("tally", comp.run_tally)]
    t_clusters, peak_clusters, changed, pending, peaks = 0.0, 0, [], 0, {}
    for name, step in steps:
        for q in range(partitions):
            tracemalloc.start()
            t0 = time.process_time()
            got = step(q)
            t_clusters += time.process_time() - t0
            peak = tracemalloc.get_traced_memory()[1]
            peak_clusters = max(peak_clusters, peak)
            step_name = name.split("-")[0]
            peaks[step_name] = max(peaks.get(step_name, 0), round(peak / 2**20, 1))
            tracemalloc.stop()
            if name.startswith("round-") and q == 0:
                changed.append(0)
            changed[-1] += got.get("changed", 0) if name.startswith("round-") else 0
            pending += got.get("pending", 0)
    tracemalloc.start()
    t0 = time.process_time()
    comp.cluster_columns(n - sizes[-1], n)  # what one write unit reads: its shard's columns
    t_write = time.process_time() - t0
    peak_write = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    cluster = comp.cluster_columns(0, n)[0]
    found = float((cluster[n - k:] == cluster[src]).mean())
    found_exact = float((cluster[n - k - e:n - k] == cluster[:e]).mean())
print(json.dumps({"documents": n, "partitions": partitions,
    "near": near, "exact": exact_share,
    "signature_keys_cpu_s": round(t_sig, 2), "buckets_cpu_s": round(t_bucket, 2),
    "clusters_cpu_s": round(t_clusters, 2), "write_unit_cpu_s": round(t_write, 3),
    "us_per_document": round((t_sig + t_bucket + t_clusters) / n * 1e6, 2),
    "bucket_unit_peak_mb": round(peak_bucket / 2**20, 1),
    "cluster_unit_peak_mb": round(peak_clusters / 2**20, 1),
    "write_unit_peak_mb": round(peak_write / 2**20, 1), "cluster_peaks_mb": peaks,
    "changed_per_round": changed, "pending_after_rounds": pending,
    "half_edges_per_range_max": max(half_edges), "documents_per_range": -(-n // partitions),
    "edges": edges, "planted_near_found": round(found, 4),
    "planted_exact_found": round(found_exact, 4)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e5,1e6,3e6")
    ap.add_argument("--memory-mb", type=int, default=256)
    ap.add_argument("--near", type=float, default=0.05, help="share of near-copies")
    ap.add_argument("--exact", type=float, default=0.01, help="share of exact copies")
    args = ap.parse_args()
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.1f}; budget {args.memory_mb} MB",
        flush=True,
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    for size in args.sizes.split(","):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(int(float(size))), str(args.memory_mb),
             str(args.near), str(args.exact)],
            capture_output=True, text=True, check=True, env=env,
        )  # fmt: skip
        print(out.stdout.strip(), flush=True)
    print(json.dumps({"load_after": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()

"""The recipe with topic clusters as the family, on real text: CPython stdlib modules cut
into documents (``tests.unit.annotate_corpus.stdlib_package_documents``: the first three
1,500-character pieces of each module, labelled by top-level package), annotated with
``topics`` (the default static encoder, k-means with ``--k`` clusters), a pool joining the
annotation (seq_len 64), and the recipe's measurements (``shardcore.quality
.recipe_quality``) of the pool's own order (the exact shuffle) and of the recipe's
windowed greedy order of the same records, with ``topics.cluster`` and ``--bins``
document-length quantile bins as the families, against ``--trials`` random permutations.

``python bench/diversity/topics.py --out /tmp/recipe-topics [--per-package 60] [--k 24]
[--bins 20] [--batch 32] [--trials 8]``

Prints the cumulative-error table (order against the lowest and the mean random
permutation at each checkpoint), the per-batch comparison (worst batch of the order
against the best and the mean random batch) per family, and the clusters' purity
against the package label (reported, not a target), with the purity of k-means on
shuffled labels as the chance level.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import machine  # noqa: E402
from bench.diversity.tables import table  # noqa: E402
from shardcore import quality  # noqa: E402
from shardcore.annotate.artifact import annotate, read_annotation  # noqa: E402
from shardcore.pool import build_pool  # noqa: E402
from shardcore.tokenize import tokenize  # noqa: E402
from tests.unit.annotate_corpus import stdlib_package_documents  # noqa: E402


def packages() -> tuple[str, ...]:
    """The stdlib's top-level packages (directories with an __init__.py), tests excluded."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "idlelib", "site-packages", "tkinter", "turtledemo", "ensurepip"}
    return tuple(sorted(p.name for p in root.iterdir()
                        if (p / "__init__.py").exists() and p.name not in skip))  # fmt: skip


def purity(cluster: np.ndarray, labels: list[str]) -> float:
    return sum(
        Counter(labels[i] for i in np.flatnonzero(cluster == c)).most_common(1)[0][1]
        for c in np.unique(cluster)
    ) / len(labels)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--per-package", type=int, default=60)
    ap.add_argument("--k", type=int, default=24)
    ap.add_argument("--bins", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--trials", type=int, default=8)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}; load {os.getloadavg()[0]:.1f}")
    docs = stdlib_package_documents(per_package=a.per_package, packages=packages())
    labels = [p for p, _ in docs]
    print(f"{len(docs):,} documents from {len(set(labels))} stdlib packages, "
          f"{sum(len(t) for _, t in docs) / 1e6:.1f} M characters")  # fmt: skip
    src = out / "docs.jsonl"
    if not src.exists():
        src.write_text("".join(json.dumps({"text": t}) + "\n" for _, t in docs))
    if not (out / "tok" / "manifest.json").exists():
        tokenize([str(src)], str(out / "tok"), shard_size=1_000_000)
    t0 = time.process_time()
    ann = out / f"topics-k{a.k}"
    annotate(out / "tok", ann, "topics", {"k": a.k})
    print(f"topics (static encoder, k={a.k}): {time.process_time() - t0:.1f} CPU s")
    cluster = np.asarray(read_annotation(ann).column("cluster"))
    rng = np.random.default_rng(0)
    chance = np.mean([purity(cluster, list(rng.permutation(labels))) for _ in range(5)])
    sizes = np.bincount(cluster, minlength=a.k)
    print(f"cluster purity against the package: {purity(cluster, labels):.3f} "
          f"(same cluster sizes, shuffled labels: {chance:.3f}); "
          f"cluster sizes {sizes.min()}-{sizes.max()}")  # fmt: skip
    pool = out / f"pool-k{a.k}"
    if not (pool / "manifest.json").exists():
        build_pool([str(out / "tok")], str(pool), seq_len=64, seed=1, annotations=[str(ann)])
    t1 = time.process_time()
    rep = quality.recipe_quality(str(pool), by="topics.cluster", length_bins=a.bins,
                                 batch_size=a.batch, trials=a.trials, checkpoints=20,
                                 with_greedy=True)  # fmt: skip
    print(f"measured in {time.process_time() - t1:.1f} CPU s; "
          f"{rep['greedy']['num_records']:,} records, batches of {a.batch}, "
          f"{a.trials} random permutations")  # fmt: skip
    table("pool order (exact shuffle)", rep["order"])
    table("greedy", rep["greedy"])
    print(f"\nload {os.getloadavg()[0]:.1f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

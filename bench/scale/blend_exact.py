"""The chunked blend against megatron-core's ``build_blending_indices`` at 10^8 samples.

    python -m bench.scale.blend_exact [--samples 100000000] [--pools 20] [--chunk 8388608]

megatron-core's helper builds the whole schedule in one call; ours runs it range by range,
each range starting from nothing but the per-pool counts the previous one left (what a
schedule's blend unit carries across its chunks), and every range is compared with
megatron-core's rows. Prints the number of differing rows (0 when identical) and timings.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from bench.scale.common import machine, peak_rss_mb


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=100_000_000)
    ap.add_argument("--pools", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=1 << 23)
    args = ap.parse_args(argv)
    from megatron.core.datasets import helpers_cpp

    from shardcore import blend

    w = blend.normalize(np.random.default_rng(2).random(args.pools) ** 2 + 1e-3)
    di = np.empty(args.samples, dtype=np.int16)
    si = np.empty(args.samples, dtype=np.int64)
    t0 = time.perf_counter()
    helpers_cpp.build_blending_indices(di, si, w, w.size, args.samples, False)
    theirs_s = time.perf_counter() - t0
    counts = np.zeros(w.size, dtype=np.int64)
    d = np.empty(args.chunk, dtype=np.int16)
    s = np.empty(args.chunk, dtype=np.int64)
    differ, chunks = 0, 0
    t0 = time.perf_counter()
    for a in range(0, args.samples, args.chunk):
        b = min(args.samples, a + args.chunk)
        state = counts.copy()  # all a unit starting at ``a`` knows
        blend.blend_range(w, a, state, (d[: b - a], s[: b - a]))
        differ += int(np.count_nonzero(d[: b - a] != di[a:b]))
        differ += int(np.count_nonzero(s[: b - a] != si[a:b]))
        counts = state
        chunks += 1
    ours_s = time.perf_counter() - t0
    print(machine())
    print(
        json.dumps(
            {
                "samples": args.samples,
                "pools": args.pools,
                "chunks": chunks,
                "differing_rows": differ,
                "megatron_core_s": round(theirs_s, 2),
                "chunked_s": round(ours_s, 2),
                "peak_rss_mb": round(peak_rss_mb(), 1),
            }
        )
    )


if __name__ == "__main__":
    main()

"""What answering a run's resume position costs when its schedule is on object storage, as
the schedule grows: the schedule read by checked ranges (``Mixture(url, ranged=True)``: the
per-chunk counts and the blocks holding the samples asked for) against a checked local copy
of the whole schedule first (``Mixture(url)``, what every question did before). Not a test.

    python -m bench.scale.resume_s3 [--sizes 20,24,27] [--pools 100]

Per size (log2 of the samples), the schedule of ``bench.scale.schedule`` (100 metadata-only
pools, a last stage on ten of them) is built on disk and published to moto's S3 server
(started here, reached over HTTP as a deployment reaches S3 or MinIO). Then, each in a fresh
interpreter with an empty cache (its peak RSS and its bytes fetched its own), ten
questions a resume asks (``reads_before`` of a sample in the second half, the sample's
pool and record, ``locate_mixture``): by ranges, and from the copy. The answers are
compared equal. Bytes fetched are counted at the store's reads.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.scale.common import fit_power, machine, markdown_table, peak_rss_mb, run_child


def _count_reads() -> dict[str, int]:
    """Count the bytes every S3 read of this process returns."""
    from shardcore import storage

    fetched = {"bytes": 0}
    read_range, read_bytes = storage.S3Store.read_range, storage.S3Store.read_bytes

    def counted_range(self, key, start, stop):
        data = read_range(self, key, start, stop)
        fetched["bytes"] += len(data)
        return data

    def counted_bytes(self, key):
        data = read_bytes(self, key)
        fetched["bytes"] += len(data)
        return data

    storage.S3Store.read_range = counted_range  # type: ignore[method-assign]
    storage.S3Store.read_bytes = counted_bytes  # type: ignore[method-assign]
    return fetched


def _cached_bytes() -> int:
    """What the local copies in this process's cache hold (the copy's download)."""
    cache = Path(os.environ["SHARDYARD_CACHE"])
    return sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())


def child(url: str, ranged: bool) -> dict:
    from shardcore.locate import locate_mixture
    from shardcore.mixture import Mixture

    fetched = _count_reads()
    t0 = time.perf_counter()
    mix = Mixture(url, ranged=ranged)
    opened = time.perf_counter() - t0
    n = mix.num_samples
    picks = np.random.default_rng(n).integers(n // 2, n, 10).tolist()
    answers, times = [], []
    for s in picks:
        t0 = time.perf_counter()
        p, r = mix.sample(s)
        before = int(mix.reads_before(s)[p])
        where = locate_mixture(url, sample=s) if ranged else locate_mixture(mix.path, sample=s)
        times.append(time.perf_counter() - t0)
        answers.append([p, r, before, where["shard"], where["record_in_shard"]])
    return {
        "open_s": opened,
        "first_s": opened + times[0],
        "query_ms": 1000 * float(np.median(times)),
        "fetched_mb": (fetched["bytes"] + _cached_bytes()) / 1e6,
        "peak_rss_mb": peak_rss_mb(),
        "answers": answers,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="20,24,27")
    ap.add_argument("--pools", type=int, default=100)
    ap.add_argument("--child", nargs=2, metavar=("URL", "MODE"))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1] == "ranged")))
        return

    from bench.scale import schedule as sched
    from shardcore import units
    from shardcore.storage import artifact_cache
    from tests.support.s3 import MotoServer

    print(machine())
    server = MotoServer()
    os.environ.update(server.env())
    bucket = server.new_bucket()
    root = Path(tempfile.mkdtemp(prefix="bench-resume-s3-"))
    rows, out = [], []
    try:
        (root / "pools").mkdir()
        for i, n in enumerate(sched._pool_records(args.pools).tolist()):
            sched.write_pool(root / "pools" / f"p{i:03d}", n, i)
        for size in [int(s) for s in args.sizes.split(",")]:
            plan = sched._plan(root, size, args.pools)
            units.run_local(plan)
            schedule_mb = (
                sum(f.stat().st_size for f in (root / f"mix-{size}" / "schedule").iterdir()) / 1e6
            )
            url = f"s3://{bucket}/mix-{size}"
            artifact_cache.publish_directory(root / f"mix-{size}", url)
            shutil.rmtree(root / f"mix-{size}")
            got = {}
            for mode in ("ranged", "copy"):
                cache = Path(tempfile.mkdtemp(prefix="bench-resume-cache-"))
                try:
                    got[mode] = run_child(
                        ["bench.scale.resume_s3", "--child", url, mode],
                        env={"SHARDYARD_CACHE": str(cache)},
                    )
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
            assert got["ranged"]["answers"] == got["copy"]["answers"], size
            r, c = got["ranged"], got["copy"]
            row = {"size": size, "schedule_mb": schedule_mb, "ranged": r, "copy": c}
            print(json.dumps({k: v for k, v in row.items()}, default=str)[:2000], flush=True)
            out.append(row)
            rows.append([
                f"2^{size}", schedule_mb, r["first_s"], r["query_ms"], r["fetched_mb"],
                r["peak_rss_mb"], c["first_s"], c["query_ms"], c["fetched_mb"],
                c["peak_rss_mb"], c["first_s"] / r["first_s"],
            ])  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
        server.stop()
    print(
        markdown_table(
            [
                "samples",
                "schedule MB",
                "ranged: first answer s",
                "ranged: answer ms",
                "ranged: fetched MB",
                "ranged: peak RSS MB",
                "copy: first answer s",
                "copy: answer ms",
                "copy: fetched MB",
                "copy: peak RSS MB",
                "first answer, copy / ranged",
            ],
            rows,
        )  # fmt: skip
    )
    sizes = [1 << r["size"] for r in out]
    for mode in ("ranged", "copy"):
        for key in ("first_s", "fetched_mb", "peak_rss_mb"):
            fit = fit_power(sizes, [r[mode][key] for r in out])
            print(f"{mode} {key}: ~ samples^{fit.slope:.2f}, {fit.at(2**31):.3g} at 2^31")
    print(machine())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()

"""Peak memory and CPU of building an ordered mixture of a fixed size over pools that grow:
``build_mixture`` (what ``shardyard mix --order diversity|greedy_block`` runs) of
``--samples`` samples over two pools of N documents each, N 10x apart, each build in a
fresh process (VmHWM minus the RSS before the call; user + system CPU), with the growth
fitted. ``--before REV`` also builds with the code of commit ``REV`` (``git archive``) on
the same pools (the schedule's files' checksums are printed: the same bytes). Not a test.

    PYTHONPATH=$PWD .venv/bin/python bench/scale/mix_orders.py \\
        [--docs 100000,1000000,10000000] [--samples 65536] [--orders diversity,greedy_block]
        [--before REV]

The pools are synthetic and hold what an ordering reads (``bench/scale/pool_quality.py``'s
pools: documents sidecars of 100-999 tokens, two sources, partitioned documents table),
with every shard's segments and the manifest's checksums of those files; no token files
(a schedule never reads tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale import pool_quality  # noqa: E402
from bench.scale.common import fit_power, machine  # noqa: E402

STEP = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from shardcore.mixture import MixtureSpec, build_mixture

def vm(name):
    for line in open("/proc/self/status"):
        if line.startswith(name):
            return int(line.split()[1]) * 1024

spec = MixtureSpec.from_dict({spec!r})
before, t0 = vm("VmRSS"), time.perf_counter()
r0 = resource.getrusage(resource.RUSAGE_SELF)
m = build_mixture(spec, {out!r})
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"peak": vm("VmHWM") - before, "wall": time.perf_counter() - t0,
                   "cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                   "samples": m["num_samples"],
                   "files": sorted((f["path"], f["xxh3"]) for f in m["files"])}}))
"""


def pool(work: Path, docs: int, name: str) -> Path:
    """A synthetic pool of ``docs`` documents with every shard's segments and the
    manifest's checksums of its sidecars and segments."""
    from shardcore import manifest as mf
    from shardcore.verify import file_entry

    pool_quality.SEGMENT_RECORDS = 1 << 62  # every shard's segments
    path = pool_quality.build(work / name, docs)
    manifest = mf.read_manifest(path)
    if manifest["files"]:
        return path
    files = []
    for k in range(len(manifest["shards"])):
        prefix = mf.shard_prefix(manifest, k)
        files += [file_entry(path, f"{prefix}{ext}") for ext in (".docs.parquet", ".segments.npz")]
    manifest["files"] = files
    manifest["fingerprint"] = f"bench-mix-orders-{name}-{docs}"
    mf.write_manifest(path, manifest)
    return path


def build(root: str, pools: list[Path], order: str, samples: int, out: Path) -> dict:
    seq = pool_quality.SEQ_LEN
    spec = {
        "tokens": seq * samples,
        "seed": 5,
        "order": order,
        "components": [{"pool": str(p), "weight": 1} for p in pools],
    }
    code = STEP.format(root=root, spec=spec, out=str(out))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(res.stderr[-3000:])
    return json.loads(res.stdout.splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", default="100000,1000000,10000000")
    ap.add_argument("--samples", type=int, default=1 << 16)
    ap.add_argument("--orders", default="diversity,greedy_block")
    ap.add_argument("--before", help="also build with the code of this commit")
    ap.add_argument("--work", type=Path, default=Path("/tmp/shardyard-bench-mix-orders"))
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    print(f"# {machine()}", flush=True)
    codes = [("now", str(ROOT))]
    if a.before:
        codes.append((a.before, pool_quality._before(a.before, a.work)))
    sizes = [int(float(x)) for x in a.docs.split(",")]
    rows = []
    for docs in sizes:
        pools = [pool(a.work, docs, name) for name in ("a", "b")]
        for order in a.orders.split(","):
            for name, root in codes:
                out = a.work / f"mix-{name}-{order}-{docs}"
                subprocess.run(["rm", "-rf", str(out)], check=True)
                got = build(root, pools, order, a.samples, out)
                row = {"code": name, "docs": docs, "order": order,
                       "peak_MB": round(got["peak"] / 2**20, 1), "cpu_s": round(got["cpu"], 2),
                       "wall_s": round(got["wall"], 2), "load": round(os.getloadavg()[0], 2),
                       "files": hash(json.dumps(got["files"]))}  # fmt: skip
                print(json.dumps(row), flush=True)
                rows.append(row)
    for name, _ in codes:
        for order in a.orders.split(","):
            mine = [r for r in rows if r["code"] == name and r["order"] == order]
            if len(mine) > 1:
                fit = fit_power([r["docs"] for r in mine], [r["peak_MB"] for r in mine])
                print(f"{name} {order}: peak ~ docs^{fit.slope:.2f} "
                      f"({mine[0]['peak_MB']} -> {mine[-1]['peak_MB']} MB)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Peak memory of what the service adds around a pool's finalize: the recorder's quality
report (``pool_quality_measure``), its recipe measurement (``recipe_measure``) and the
Shard rows built from the manifest (``shards_record``'s objects), each in a fresh process
(VmHWM minus the RSS before the call), at two pool sizes. Not a test.

    PYTHONPATH=$PWD .venv/bin/python bench/scale/finalize_memory.py [--docs 200000,800000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

STEP = r"""
import json, os, sys
sys.path.insert(0, {root!r})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
os.environ.setdefault("DEBUG", "1")  # no production SECRET_KEY needed to measure
import django
django.setup()
from webapp.catalog.measures.pools import _measure
from webapp.catalog.services.recipe import recipe_measure
from webapp.catalog.models import Shard
from webapp.catalog.services.common import files_by_path
from shardcore.manifest import read_manifest

def vm(name):
    for line in open("/proc/self/status"):
        if line.startswith(name):
            return int(line.split()[1]) * 1024

path, step = {path!r}, {step!r}
before = vm("VmRSS")
if step == "quality":
    _measure(path)
elif step == "recipe":
    recipe_measure(path=path)
elif step == "shards":
    m = read_manifest(path)
    files = files_by_path(m)
    rows = [Shard(index=i, prefix=sh["prefix"], num_records=sh["records"],
                  num_bytes=files.get(sh["prefix"] + ".bin", {{}}).get("size", 0))
            for i, sh in enumerate(m["shards"])]
print(json.dumps({{"peak": vm("VmHWM") - before}}))
"""


def build(work: Path, docs: int) -> Path:
    from bench.scale.pool import write_source
    from shardcore import units
    from shardcore.pool import plan_pool

    out = work / f"pool-{docs}"
    if (out / "manifest.json").exists():
        return out
    src = write_source(work / f"src-{docs}", docs, 64)
    plan = plan_pool([str(src)], str(out), seq_len=255, memory=256 << 20, shard_size=1 << 20)
    units.run_local(plan)
    return out


def main() -> int:
    from shardcore.manifest import read_manifest

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", default="200000,800000")
    ap.add_argument("--workdir", default="/tmp/shardyard-bench-finalize-memory")
    ap.add_argument("--fresh", action="store_true")
    args = ap.parse_args()
    work = Path(args.workdir)
    if args.fresh:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    for docs in [int(x) for x in args.docs.split(",")]:
        path = build(work, docs)
        shards = len(read_manifest(path)["shards"])
        row = {"docs": docs, "shards": shards}
        for step in ("quality", "recipe", "shards"):
            code = STEP.format(root=str(ROOT), path=str(path), step=step)
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            if res.returncode:
                print(res.stderr[-2000:])
                return 1
            row[step + "_MB"] = round(json.loads(res.stdout.splitlines()[-1])["peak"] / 2**20)
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())

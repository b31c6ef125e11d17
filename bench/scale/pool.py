"""Scale benchmark of the pool's shuffle: per-unit cost and peak RSS of the merge and of
pass 2 at 10^2, 10^4 and 10^5 inputs, the fitted growth, and the extrapolation to a
15 T-token pool. Not a test.

    .venv/bin/python bench/scale/pool.py [--inputs 100,10000,100000] [--docs 200000]

Metadata-small: the same ``--docs`` tiny documents (``--doc-tokens`` tokens each) are
spread over each number of inputs, so every size has the same buckets holding the same
number of documents and only the number of inputs changes. Pass 1's output is written
directly in its format (``shardcore.pool.io.write_run``'s file without the fsync, and the
"tokens" staging copy: running pass 1 itself would time DuckDB and the sidecars, not the
shuffle), with the buckets drawn by the exact shuffle's ``assign``; the merge and pass-2
units then run through the pool's own ``run_unit``, each in a fresh process, timed around
the call, with its peak RSS (VmHWM) and the RSS of the same process before the call.

Fitted growth: the exponent ``a`` of ``time ~ inputs^a`` between the smallest and largest
size (0: independent of the number of inputs; 1: proportional).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.common import machine  # noqa: E402

UNIT_SCRIPT = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from shardcore import units
import shardcore.pool as pool
import pyarrow, pyarrow.parquet  # what a worker has loaded before its first unit

def vm(name):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name):
            return int(line.split()[1]) / 1024
plan = units.Plan.from_json(json.loads(Path({plan!r}).read_text()))
unit = plan.unit({unit!r})
base = vm("VmRSS")
t = time.perf_counter()
cpu = time.process_time()
stats = pool.run_unit(plan, unit)
print(json.dumps({{"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - cpu,
                  "base_rss_mb": base, "peak_rss_mb": vm("VmHWM"), "stats": stats}}))
"""


def write_pass1(out: Path, inputs: int, docs: int, doc_tokens: int, buckets: int, group: int):
    """Pass 1's files for ``inputs`` inputs sharing ``docs`` documents: per input its
    documents sorted by bucket (Arrow IPC), its group offsets (``write_groups``) and their
    tokens ("tokens" staging), as ``run_assign`` writes them."""
    import pyarrow as pa

    from shardcore.pool.layout import (
        BUCKET_COL,
        INPUT_COL,
        KEY_COL,
        OFFSET_COL,
        ROW_COL,
        SHARD_COL,
        SOURCE_COL,
        arrow_array,
        pass1_paths,
    )
    from shardcore.shuffle import exact

    counts = np.full(inputs, docs // inputs, dtype=np.int64)
    counts[: docs % inputs] += 1
    groups = -(-buckets // group)
    first_doc = 0
    for i in range(inputs):
        n = int(counts[i])
        bucket, key = exact.assign(counts, i, 0, buckets)
        order = np.argsort(bucket, kind="stable")
        b = bucket[order]
        lengths = np.full(n, doc_tokens, dtype=np.int64)
        offsets = np.arange(n, dtype=np.int64) * doc_tokens * 4
        rows = np.searchsorted(b, np.arange(groups + 1) * group)
        table = pa.table(
            {
                "doc_id": arrow_array(np.arange(first_doc, first_doc + n)[order]),
                "n_tokens": arrow_array(lengths.astype(np.int32)),
                SOURCE_COL: arrow_array(np.zeros(n, np.int32)),
                SHARD_COL: arrow_array(np.full(n, i, np.int32)),
                ROW_COL: arrow_array(order.astype(np.int64)),
                KEY_COL: arrow_array(key[order]),
                BUCKET_COL: arrow_array(b),
                INPUT_COL: arrow_array(np.full(n, i, np.int32)),
                OFFSET_COL: arrow_array(offsets),
            }
        )
        tokens_path, docs_path, groups_path = pass1_paths(str(out), i)
        docs_path.parent.mkdir(parents=True, exist_ok=True)
        with pa.OSFile(str(docs_path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
        ids = (
            np.arange(first_doc, first_doc + n)[order, None] * 7 + np.arange(doc_tokens)
        ) % 50_000
        ids.astype(np.int32).tofile(tokens_path)
        # write_groups' layout, without its fsync (10^5 of them would time the disk).
        np.stack([rows, rows * doc_tokens * 4]).astype("<i8").tofile(groups_path)
        first_doc += n


def make_plan(out: Path, inputs: int, buckets: int, group: int, memory: int, seq_len: int):
    from shardcore import units

    groups = -(-buckets // group)
    params = {
        "seq_len": seq_len,
        "filter": None,
        "shuffle": "exact",
        "seed": 0,
        "memory": memory,
        "val_fraction": 0.0,
        "bos": False,
        "shard_size": 1 << 26,
        "shuffle_options": {},
    }
    meta = {
        "group_buckets": group,
        "staging": "tokens",
        "inputs": [{"prefix": f"input-{i}"} for i in range(inputs)],
        "splits": {
            "train": {"num_buckets": buckets, "first_bucket": 0, "seed": 0},
            "val": {"num_buckets": 0, "first_bucket": buckets, "seed": 1},
        },
        "dtype": "int32",
        "pad_id": 0,
        "bos_id": None,
    }
    phases = [
        [],
        [{"id": f"merge-{g:05d}", "group": g} for g in range(groups)],
        [{"id": f"train-bucket-{b:05d}", "split": "train", "bucket": b} for b in range(buckets)],
    ]
    return units.Plan("pool", str(out), params, phases, meta)


def run_unit(plan_path: Path, unit_id: str) -> dict:
    code = UNIT_SCRIPT.format(root=str(ROOT), plan=str(plan_path), unit=unit_id)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def slope(xs: list[float], ys: list[float]) -> float:
    return math.log(ys[-1] / ys[0]) / math.log(xs[-1] / xs[0])


def report(rows: list[dict], args) -> list[str]:
    """The table, the fitted growth (on CPU time: on a shared machine wall time also
    measures the wait for a CPU) and the extrapolation."""
    xs = [r["inputs"] for r in rows]
    budget = args.memory / 2**20
    fit = {
        "pass2_wall_exponent": slope(xs, [r["pass2_wall_s"] for r in rows]),
        "pass2_cpu_exponent": slope(xs, [r["pass2_cpu_s"] for r in rows]),
        "pass2_rss_exponent": slope(xs, [r["pass2_peak_rss_mb"] for r in rows]),
        "merge_wall_exponent": slope(xs, [r["merge"]["wall_s"] for r in rows]),
        "merge_cpu_exponent": slope(xs, [r["merge"]["cpu_s"] for r in rows]),
        "merge_s_per_input": rows[-1]["merge"]["wall_s"] / xs[-1],
        "merge_cpu_s_per_input": rows[-1]["merge"]["cpu_s"] / xs[-1],
    }
    # 15 T tokens at 256 MiB: 234k inputs, 894k buckets of ~11k documents (~1.2 KB each),
    # ~100 bytes of sidecar metadata per document plus the 44 pass 1 adds: the plan's
    # groups (a 32nd of the budget) then hold 5 buckets.
    s15, k15 = 234_000, 894_000
    group15 = (256 << 20) // 32 // (11_200 * 144)
    fit["extrapolated_15T"] = {
        "merge_reads": s15 * -(-k15 // group15),
        "merge_cpu_days": s15 * -(-k15 // group15) * fit["merge_cpu_s_per_input"] / 86400,
        "pass2_reads_per_unit": 1,
    }
    lines = [
        f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}",
        f"{args.docs:,} documents of {args.doc_tokens} tokens, {args.buckets} buckets "
        f"({args.group} per merge group), budget {budget:.0f} MiB, tokens staging",
        "",
        "| inputs | docs/input | merge unit s (CPU s) | merge peak RSS MB | pass-2 unit s (CPU s) "
        "| pass-2 docs | pass-2 RSS MB: before -> peak |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['inputs']:,} | {r['docs_per_input']:,.0f} | {r['merge']['wall_s']:.2f} "
            f"({r['merge']['cpu_s']:.2f}) | "
            f"{r['merge']['peak_rss_mb']:.0f} | {r['pass2_wall_s']:.3f} ({r['pass2_cpu_s']:.3f}) | "
            f"{r['pass2_documents']:,} | {r['pass2_base_rss_mb']:.0f} -> "
            f"{r['pass2_peak_rss_mb']:.0f} |"
        )
    lines += [
        "",
        f"fitted: pass-2 unit CPU ~ inputs^{fit['pass2_cpu_exponent']:.2f} (wall ~ inputs^"
        f"{fit['pass2_wall_exponent']:.2f}), pass-2 peak RSS ~ "
        f"inputs^{fit['pass2_rss_exponent']:.2f}; merge unit CPU ~ inputs^"
        f"{fit['merge_cpu_exponent']:.2f} ({fit['merge_s_per_input'] * 1e6:.0f} us wall, "
        f"{fit['merge_cpu_s_per_input'] * 1e6:.0f} us CPU per input)",
        f"15 T tokens (234k inputs x 894k buckets, {group15} buckets per group): pass 2 reads 1 file "
        f"per unit; the merge reads {fit['extrapolated_15T']['merge_reads']:.2e} input slices, "
        f"~{fit['extrapolated_15T']['merge_cpu_days']:.1f} CPU-days",
    ]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", default="100,10000,100000")
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--doc-tokens", type=int, default=32)
    ap.add_argument("--buckets", type=int, default=64)
    ap.add_argument("--group", type=int, default=16, help="buckets per merge group")
    ap.add_argument("--memory", type=int, default=256 << 20)
    ap.add_argument("--pass2-units", type=int, default=4, help="pass-2 units timed per size")
    ap.add_argument("--workdir", default="/tmp/shardyard-bench-scale-pool")
    ap.add_argument("--report", help="print the report of a results.json, measure nothing")
    args = ap.parse_args()
    if args.report:
        data = json.loads(Path(args.report).read_text())
        vars(args).update({k: v for k, v in data.get("args", {}).items() if k != "report"})
        print("\n".join(report(data["rows"], args)))
        return 0
    root = Path(args.workdir)
    rows = []
    for inputs in [int(x) for x in args.inputs.split(",")]:
        out = root / f"pool-{inputs}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        t = time.perf_counter()
        write_pass1(out, inputs, args.docs, args.doc_tokens, args.buckets, args.group)
        gen = time.perf_counter() - t
        plan = make_plan(out, inputs, args.buckets, args.group, args.memory, 2047)
        plan_path = out / "bench-plan.json"
        plan_path.write_text(json.dumps(plan.to_json()))
        merge = run_unit(plan_path, "merge-00000")
        pass2 = [
            run_unit(plan_path, f"train-bucket-{b:05d}")
            for b in range(min(args.pass2_units, args.group))
        ]
        row = {
            "inputs": inputs,
            "docs_per_input": args.docs / inputs,
            "generate_s": gen,
            "merge": merge,
            "pass2": pass2,
            "pass2_wall_s": float(np.median([p["wall_s"] for p in pass2])),
            "pass2_cpu_s": float(np.median([p["cpu_s"] for p in pass2])),
            "pass2_peak_rss_mb": max(p["peak_rss_mb"] for p in pass2),
            "pass2_base_rss_mb": max(p["base_rss_mb"] for p in pass2),
            "pass2_documents": int(np.median([p["stats"]["documents"] for p in pass2])),
        }
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "pass2"}), flush=True)
        shutil.rmtree(out, ignore_errors=True)
    lines = report(rows, args)
    text = "\n".join(lines)
    print(text)
    root.mkdir(parents=True, exist_ok=True)
    (root / "results.json").write_text(json.dumps({"rows": rows, "args": vars(args)}, indent=1))
    (root / "results.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

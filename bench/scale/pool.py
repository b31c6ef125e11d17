"""Scale benchmark of the pool's shuffle: per-unit cost and peak RSS of each level of the
merge tree and of pass 2 at 10^2, 10^4 and 10^5 inputs, the fitted growth, and the
extrapolation to a 15 T-token pool. Not a test.

    .venv/bin/python bench/scale/pool.py [--inputs 100,10000,100000] [--docs 200000]
        [--plan table|legacy]

Metadata-small: the same ``--docs`` tiny documents (``--doc-tokens`` tokens each) are
spread over each number of inputs, so every size has the same buckets holding the same
number of documents and only the number of inputs changes. Pass 1's output is written
directly in its format (``shardcore.pool.io.write_run``'s file without the fsync, and the
"tokens" staging copy: running pass 1 itself would time DuckDB and the sidecars, not the
shuffle), with the buckets drawn by the exact shuffle's ``assign``; every unit of every
merge level then runs through the pool's own ``run_unit`` (one process per level, each unit
timed around the call: CPU per unit, files opened per unit), then the level's last unit
again in a fresh process (idempotent: it rewrites the same file) for its peak RSS (VmHWM)
and the RSS of the same process before the call; then a few pass-2 units, each in a fresh
process. A fresh unit is given what a job's worker is given: the plan's header and its own
spec. The plans keep their inputs in the plan's input table (``shardcore.pool.inputs``), or
with ``--plan legacy`` in the header, as plans made before the table did.

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
from typing import Any

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
# As the job engine gives a unit its work: the plan's header and the unit's own spec.
plan = units.Plan.from_json(json.loads(Path({plan!r}).read_text()))
unit = json.loads({spec!r})
base = vm("VmRSS")
t = time.perf_counter()
cpu = time.process_time()
stats = pool.run_unit(plan, unit)
print(json.dumps({{"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - cpu,
                  "base_rss_mb": base, "peak_rss_mb": vm("VmHWM"), "stats": stats}}))
"""


LEVEL_SCRIPT = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from shardcore import units
import shardcore.pool as pool
from shardcore.pool.layout import merge_children
import pyarrow, pyarrow.parquet

def vm(name):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name):
            return int(line.split()[1]) / 1024
plan = units.Plan.from_json(json.loads(Path({plan!r}).read_text()))
base = vm("VmRSS")
cpu, wall, files, docs = [], [], [], 0
for unit in plan.phases[{phase}]:
    t = time.perf_counter()
    c = time.process_time()
    stats = pool.run_unit(plan, unit)
    cpu.append(time.process_time() - c)
    wall.append(time.perf_counter() - t)
    files.append(len(merge_children(plan, unit)[2]))
    docs = max(docs, stats["merged_documents"])
print(json.dumps({{"cpu": cpu, "wall": wall, "files": files, "max_docs": docs,
                  "base_rss_mb": base, "peak_rss_mb": vm("VmHWM")}}))
"""


def write_pass1(out: Path, inputs: int, docs: int, doc_tokens: int, buckets: int):
    """Pass 1's files for ``inputs`` inputs sharing ``docs`` documents: per input its
    documents sorted by bucket (Arrow IPC) and their tokens ("tokens" staging), as
    ``run_assign`` writes them."""
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
    first_doc = 0
    for i in range(inputs):
        n = int(counts[i])
        bucket, key = exact.assign(counts, i, 0, buckets)
        order = np.argsort(bucket, kind="stable")
        b = bucket[order]
        lengths = np.full(n, doc_tokens, dtype=np.int64)
        offsets = np.arange(n, dtype=np.int64) * doc_tokens * 4
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
        tokens_path, docs_path = pass1_paths(str(out), i)
        docs_path.parent.mkdir(parents=True, exist_ok=True)
        with pa.OSFile(str(docs_path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
        ids = (
            np.arange(first_doc, first_doc + n)[order, None] * 7 + np.arange(doc_tokens)
        ) % 50_000
        ids.astype(np.int32).tofile(tokens_path)
        first_doc += n


def write_source(root: Path, docs: int, doc_tokens: int) -> Path:
    """One real tokenized source of one shard (``docs`` documents of ``doc_tokens``
    tokens, with its sidecar and checksummed manifest), for pass 1 to read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardcore import manifest as mf
    from shardcore.formats import IndexedWriter
    from shardcore.verify import file_entry

    src = root / "source"
    prefix = "shards/src-00000"
    with IndexedWriter(src / prefix, np.int32) as w:
        for d in range(docs):
            w.add((np.arange(doc_tokens, dtype=np.int32) + d * 7) % 50_000)
    pq.write_table(
        pa.table(
            {
                "doc_id": np.arange(docs, dtype=np.int64),
                "n_tokens": np.full(docs, doc_tokens, dtype=np.int32),
            }
        ),
        src / f"{prefix}.docs.parquet",
    )
    mf.write_manifest(
        src,
        {
            "kind": "tokenized",
            "fingerprint": mf.fingerprint("tokenized", params={"bench-scale": docs}),
            "tokenizer": {"spec": "bench", "fingerprint": "bench", "eos_id": 0, "bos_id": None},
            "dtype": "int32",
            "shards": [{"prefix": prefix, "documents": docs, "tokens": docs * doc_tokens}],
            "files": [
                file_entry(src, f"{prefix}{ext}") for ext in (".bin", ".idx", ".docs.parquet")
            ],
            "documents": docs,
        },
    )
    return src


def with_inputs(plan, specs: list[dict], legacy: bool):
    """``plan`` listing ``specs`` (``InputTable.spec``'s dicts) as its inputs: in its input
    table (saved with the plan), or with ``legacy`` in its meta, as plans made before the
    table listed them (every input in the header every unit loads)."""
    from shardcore import units
    from shardcore.pool import inputs as input_table

    meta = {k: v for k, v in plan.meta.items() if k != "inputs_table"}
    if legacy:
        meta["inputs"] = specs
        for k, split in enumerate(("train", "val")):
            meta["splits"][split]["counts"] = [s["docs"][k] for s in specs]
        return units.Plan(plan.stage, plan.out, plan.params, [], meta)
    rows = [
        {**s, "rel": os.path.relpath(s["prefix"], meta["sources"][s["source"]]["path"])}
        for s in specs
    ]
    data, meta["inputs_table"] = input_table.encode(rows, [])
    return units.Plan(
        plan.stage, plan.out, plan.params, [], meta, files={input_table.TABLE_REL: data}
    )


def pass1_plan(out: Path, src: Path, inputs: int, memory: int, legacy: bool):
    """A pool plan over ``inputs`` inputs, every one of them the real shard of ``src``
    (pass 1 reads each on its own; only the plan, which lists them all, grows)."""
    from shardcore.pool import plan_pool
    from shardcore.pool.inputs import InputTable
    from shardcore.pool.layout import merge_shape, merge_units

    plan = plan_pool([str(src)], str(out), seq_len=2047, memory=memory, staging="tokens")
    meta = plan.meta
    total = sum(meta["splits"][s]["num_buckets"] for s in ("train", "val"))
    meta["splits"]["train"]["num_buckets"] = total * inputs  # the buckets grow with the data
    meta["merge_levels"], meta["merge_fan_in"] = merge_shape(inputs)
    plan = with_inputs(plan, [InputTable(plan).spec(0)] * inputs, legacy)
    plan.phases = [
        [{"id": f"assign-{i:05d}", "input": i} for i in range(inputs)],
        *(merge_units(plan, level) for level in range(1, meta["merge_levels"] + 1)),
    ]
    return plan


def make_plan(
    out: Path, inputs: int, docs: int, doc_tokens: int, buckets: int, group: int, memory: int,
    legacy: bool,
):  # fmt: skip
    """The plan of the merge and pass 2 over ``inputs`` inputs of ``write_pass1``: the
    inputs listed as a real plan lists them (paths of a source, counts), though with
    "tokens" staging neither phase reads them."""
    from shardcore import units
    from shardcore.pool.layout import merge_shape, merge_units

    levels, fan_in = merge_shape(inputs)
    params: dict[str, Any] = {
        "seq_len": 2047,
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
        "merge_levels": levels,
        "merge_fan_in": fan_in,
        "staging": "tokens",
        "sources": [{"path": str(out / "source"), "fingerprint": "0" * 32, "content": "0" * 32}],
        "splits": {
            "train": {"num_buckets": buckets, "first_bucket": 0, "seed": 0},
            "val": {"num_buckets": 0, "first_bucket": buckets, "seed": 1},
        },
        "dtype": "int32",
        "pad_id": 0,
        "bos_id": None,
    }
    counts = np.full(inputs, docs // inputs, dtype=np.int64)
    counts[: docs % inputs] += 1
    specs = [
        {
            "source": 0,
            "shard": i,
            "prefix": str(out / "source" / f"shards/src-{i:05d}"),
            "sidecar": str(out / "source" / f"shards/src-{i:05d}.docs.parquet"),
            "docs": [int(c), 0],
            "tokens": [int(c) * doc_tokens, 0],
        }
        for i, c in enumerate(counts.tolist())
    ]
    plan = with_inputs(units.Plan("pool", str(out), params, [], meta), specs, legacy)
    plan.phases = [
        [],
        *(merge_units(plan, level) for level in range(1, levels + 1)),
        [{"id": f"train-bucket-{b:05d}", "split": "train", "bucket": b} for b in range(buckets)],
    ]
    return plan


def run_level(plan_path: Path, phase: int) -> dict:
    code = LEVEL_SCRIPT.format(root=str(ROOT), plan=str(plan_path), phase=phase)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_unit(plan_path: Path, unit: dict) -> dict:
    """``unit`` in a fresh process given the plan's header (``plan_path``'s ``-header.json``)
    and the unit's spec, as a job's worker runs it."""
    header = plan_path.with_name(plan_path.stem + "-header.json")
    code = UNIT_SCRIPT.format(root=str(ROOT), plan=str(header), spec=json.dumps(unit))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def slope(xs: list[float], ys: list[float]) -> float:
    return math.log(ys[-1] / ys[0]) / math.log(xs[-1] / xs[0])


def tree_15t(open_cpu: float, doc_cpu: float) -> dict:
    """The merge tree of a 15 T-token pool at 256 MiB (234k inputs, 894k buckets of ~11k
    documents of ~1.2 KB, ~100 bytes of sidecar metadata per document plus the 44 pass 1
    adds: the plan's groups, a 32nd of the budget, hold 5 buckets): its units and files
    per level, from the pool's own geometry; CPU from the measured cost of opening a file
    and of merging a document."""
    from shardcore import units
    from shardcore.pool.layout import merge_children, merge_geometry, merge_shape

    n, k, docs = 234_000, 894_000, 10_000_000_000
    group = (256 << 20) // 32 // (11_200 * 144)
    levels, fan_in = merge_shape(n)
    meta = {
        "group_buckets": group,
        "merge_levels": levels,
        "merge_fan_in": fan_in,
        "inputs_table": {"rows": n},
        "splits": {"train": {"num_buckets": k}, "val": {"num_buckets": 0}},
    }
    plan = units.Plan("pool", "/", {}, [], meta)
    per_level = []
    for level in range(1, levels + 1):
        _, ranges, batches = merge_geometry(plan, level)
        unit = {"level": level, "range": 0, "batch": 0} if level < levels else {"group": 0}
        files = merge_children(plan, unit)[2]
        _, _, child_batches = merge_geometry(plan, level - 1)
        per_level.append(
            {"units": ranges * batches, "files": ranges * child_batches, "fan_in": len(files)}
        )
    opens = sum(lv["files"] for lv in per_level)
    return {
        "levels": levels,
        "fan_in": fan_in,
        "group_buckets": group,
        "per_level": per_level,
        "units": sum(lv["units"] for lv in per_level),
        "files_opened": opens,
        "old_reads": n * -(-k // group),
        "cpu_days": (opens * open_cpu + levels * docs * doc_cpu) / 86400,
        "open_cpu_days": opens * open_cpu / 86400,
        "old_cpu_days": n * -(-k // group) * open_cpu / 86400,
    }


def report(rows: list[dict], args) -> list[str]:
    """The table, the fitted growth (on CPU time: on a shared machine wall time also
    measures the wait for a CPU) and the extrapolation."""
    xs = [r["inputs"] for r in rows]
    budget = args.memory / 2**20
    for r in rows:
        r["merge_units"] = sum(lv["units"] for lv in r["levels"])
        r["merge_files"] = sum(lv["files"] for lv in r["levels"])
        r["merge_cpu"] = sum(lv["cpu_s"] for lv in r["levels"])
        r["unit_cpu"] = max(lv["unit_cpu_median_s"] for lv in r["levels"])
        r["unit_peak"] = max(lv["unit"]["peak_rss_mb"] for lv in r["levels"])
        r["pass1_cpu"] = max(u["cpu_s"] for u in r["pass1"])
        r["pass1_base"] = max(u["base_rss_mb"] for u in r["pass1"])
        r["pass1_peak"] = max(u["peak_rss_mb"] for u in r["pass1"])
    groups = -(-args.buckets // args.group)
    fit: dict[str, Any] = {
        "pass1_cpu_exponent": slope(xs, [r["pass1_cpu"] for r in rows]),
        "pass1_rss_exponent": slope(xs, [r["pass1_peak"] for r in rows]),
        "pass2_cpu_exponent": slope(xs, [r["pass2_cpu_s"] for r in rows]),
        "pass2_rss_exponent": slope(xs, [r["pass2_peak_rss_mb"] for r in rows]),
        "merge_unit_cpu_exponent": slope(xs, [r["unit_cpu"] for r in rows]),
        "merge_unit_rss_exponent": slope(xs, [r["unit_peak"] for r in rows]),
        "merge_total_cpu_exponent": slope(xs, [r["merge_cpu"] for r in rows]),
        "merge_files_per_input": [r["merge_files"] / (r["inputs"] + groups) for r in rows],
    }
    # The cost of opening a file: the first level of the largest size, whose inputs hold a
    # handful of documents each; of merging a document: the last level's units (a group's
    # documents from fan-in files) less their opens.
    big = rows[-1]
    first, last = big["levels"][0], big["levels"][-1]
    open_cpu = first["cpu_s"] / first["files"]
    doc_cpu = max(0.0, (last["cpu_s"] - last["files"] * open_cpu) / max(1, args.docs))
    fit["open_cpu_us"] = open_cpu * 1e6
    fit["doc_cpu_us"] = doc_cpu * 1e6
    fit["extrapolated_15T"] = tree_15t(open_cpu, doc_cpu)
    x = fit["extrapolated_15T"]
    lines = [
        f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}",
        f"{args.docs:,} documents of {args.doc_tokens} tokens, {args.buckets} buckets "
        f"({args.group} per group), budget {budget:.0f} MiB, tokens staging, inputs in the "
        + ("plan's header (legacy)" if getattr(args, "plan", "") == "legacy" else "input table"),
        "",
        "| inputs | plan header KB | pass-1 unit CPU s | pass-1 RSS MB: before -> peak "
        "| levels x fan-in "
        "| merge units | files opened | merge CPU s (all units) "
        "| merge unit CPU s (median, worst level) | merge unit peak RSS MB | pass-2 unit CPU s "
        "| pass-2 RSS MB: before -> peak |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['inputs']:,} | {r.get('header_kb', float('nan')):,.1f} | "
            f"{r['pass1_cpu']:.3f} | {r['pass1_base']:.0f} -> "
            f"{r['pass1_peak']:.0f} | {len(r['levels'])} x {r['fan_in']} | {r['merge_units']:,} | "
            f"{r['merge_files']:,} | {r['merge_cpu']:.2f} | {r['unit_cpu']:.3f} | "
            f"{r['unit_peak']:.0f} | {r['pass2_cpu_s']:.3f} | "
            f"{r['pass2_base_rss_mb']:.0f} -> {r['pass2_peak_rss_mb']:.0f} |"
        )
    lines += [
        "",
        "| inputs | level | units | files per unit (max) | CPU s per unit (median / max) "
        "| fresh unit: RSS before -> peak MB |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for lv_i, lv in enumerate(r["levels"], 1):
            lines.append(
                f"| {r['inputs']:,} | {lv_i} | {lv['units']:,} | {lv['max_files_per_unit']} | "
                f"{lv['unit_cpu_median_s']:.3f} / {lv['unit_cpu_max_s']:.3f} | "
                f"{lv['unit']['base_rss_mb']:.0f} -> {lv['unit']['peak_rss_mb']:.0f} |"
            )
    lines += [
        "",
        f"fitted (inputs {xs[0]:,} -> {xs[-1]:,}): pass-1 unit CPU ~ inputs^"
        f"{fit['pass1_cpu_exponent']:.2f}, peak RSS ~ inputs^{fit['pass1_rss_exponent']:.2f}; "
        f"merge unit CPU ~ inputs^"
        f"{fit['merge_unit_cpu_exponent']:.2f}, merge unit peak RSS ~ inputs^"
        f"{fit['merge_unit_rss_exponent']:.2f}; pass-2 unit CPU ~ inputs^"
        f"{fit['pass2_cpu_exponent']:.2f}, RSS ~ inputs^{fit['pass2_rss_exponent']:.2f}; "
        f"whole merge CPU ~ inputs^{fit['merge_total_cpu_exponent']:.2f}; files opened per "
        f"(input + group): " + ", ".join(f"{v:.2f}" for v in fit["merge_files_per_input"]),
        f"opening a file {fit['open_cpu_us']:.0f} us CPU, merging a document "
        f"{fit['doc_cpu_us']:.2f} us CPU",
        f"15 T tokens (234k inputs x 894k buckets, {x['group_buckets']} buckets per group): "
        f"{x['levels']} levels of fan-in {x['fan_in']}, {x['units']:,} merge units, "
        f"{x['files_opened']:.2e} files opened (per level: "
        + ", ".join(f"{lv['units']:,} units / {lv['files']:,} files" for lv in x["per_level"])
        + f"), ~{x['cpu_days']:.2f} CPU-days in all ({x['open_cpu_days']:.3f} of it opening "
        f"files); one merge per group of every input: {x['old_reads']:.2e} reads, "
        f"~{x['old_cpu_days']:.0f} CPU-days of opens",
    ]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", default="100,10000,100000")
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--doc-tokens", type=int, default=32)
    ap.add_argument("--buckets", type=int, default=64)
    ap.add_argument("--group", type=int, default=16, help="buckets per group")
    ap.add_argument("--memory", type=int, default=256 << 20)
    ap.add_argument(
        "--pass1-docs", type=int, default=2000, help="documents of the real input of pass 1"
    )
    ap.add_argument("--pass2-units", type=int, default=4, help="pass-2 units timed per size")
    ap.add_argument(
        "--plan",
        choices=("table", "legacy"),
        default="table",
        help="inputs in the plan's input table (table), or listed in its header as plans "
        "made before the table were (legacy: every unit loads them all)",
    )
    ap.add_argument("--workdir", default="/tmp/shardyard-bench-scale-pool")
    ap.add_argument("--report", help="print the report of a results.json, measure nothing")
    args = ap.parse_args()
    if args.report:
        data = json.loads(Path(args.report).read_text())
        vars(args).update({k: v for k, v in data.get("args", {}).items() if k != "report"})
        print("\n".join(report(data["rows"], args)))
        return 0
    from shardcore import units

    root = Path(args.workdir)
    rows = []
    for inputs in [int(x) for x in args.inputs.split(",")]:
        out = root / f"pool-{inputs}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        t = time.perf_counter()
        write_pass1(out, inputs, args.docs, args.doc_tokens, args.buckets)
        gen = time.perf_counter() - t
        legacy = args.plan == "legacy"
        plan = make_plan(
            out, inputs, args.docs, args.doc_tokens, args.buckets, args.group, args.memory, legacy
        )
        units.save_plan(plan)  # and its input table
        plan_path = out / "bench-plan.json"
        plan_path.write_text(json.dumps(plan.to_json()))
        plan_path.with_name("bench-plan-header.json").write_text(json.dumps(plan.header()))
        levels = []
        for phase in range(1, len(plan.phases) - 1):
            level = run_level(plan_path, phase)
            fresh = run_unit(plan_path, plan.phases[phase][-1])
            levels.append(
                {
                    "units": len(level["cpu"]),
                    "files": int(sum(level["files"])),
                    "max_files_per_unit": int(max(level["files"])),
                    "cpu_s": float(sum(level["cpu"])),
                    "wall_s": float(sum(level["wall"])),
                    "unit_cpu_median_s": float(np.median(level["cpu"])),
                    "unit_cpu_max_s": float(max(level["cpu"])),
                    "max_docs": level["max_docs"],
                    "level_peak_rss_mb": level["peak_rss_mb"],
                    "unit": fresh,
                }
            )
        pass2 = [
            run_unit(plan_path, plan.phases[-1][b])
            for b in range(min(args.pass2_units, args.group))
        ]
        merge = levels[-1]["unit"]
        # Pass 1 for real: the last input's unit over the real shard, in a fresh process.
        p1_plan = pass1_plan(
            out / "pass1",
            write_source(out, args.pass1_docs, args.doc_tokens),
            inputs,
            args.memory,
            legacy,
        )
        units.save_plan(p1_plan)
        p1_path = out / "pass1-plan.json"
        p1_path.write_text(json.dumps(p1_plan.to_json()))
        p1_path.with_name("pass1-plan-header.json").write_text(json.dumps(p1_plan.header()))
        pass1 = [run_unit(p1_path, p1_plan.phases[0][i]) for i in (0, inputs - 1)]
        row = {
            "inputs": inputs,
            "plan": args.plan,
            "header_kb": len(json.dumps(p1_plan.header())) / 1024,
            "docs_per_input": args.docs / inputs,
            "generate_s": gen,
            "merge": merge,
            "pass1": pass1,
            "levels": levels,
            "fan_in": plan.meta["merge_fan_in"],
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

"""What planning a pool costs as its inputs grow: ``shardcore.pool.plan_pool``, which the
pool launch (``webapp.catalog.services.pools.pool_build``) runs inside the request, in a
child limited to ``SHARDYARD_PLAN_SECONDS`` (20 s by default) and
``SHARDYARD_PLAN_MEMORY_MB``. Not a test.

    python -m bench.scale.pool_plan [--sizes 100000,1000000,10000000] [--shard-docs 20000]

Per size, one tokenized source of that many documents in shards of ``--shard-docs``:
what planning reads of it, its manifest (written by the real writer) and each shard's
``.docs.parquet`` sidecar with the columns the tokenize stage writes (doc_id, file, line,
byte_offset, n_tokens, n_bytes) and one metadata property (``lang``); no token files
(planning never opens them). The plan is made without a filter and with one
(``n_tokens > 512 AND lang = 'en'``), each in a fresh interpreter (its peak RSS its own),
and the growth fitted to say at how many documents the request's limit is reached.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.scale.common import fit_power, machine, markdown_table, run_child

FILTER = "n_tokens > 512 AND lang = 'en'"
LANGS = ["en", "de", "fr", "es", "zh"]


def write_source(root: Path, documents: int, shard_docs: int) -> Path:
    """A tokenized source's manifest and sidecars, ``documents`` documents."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardcore import manifest as mf

    rng = np.random.default_rng(documents)
    shards = []
    for k, start in enumerate(range(0, documents, shard_docs)):
        n = min(shard_docs, documents - start)
        prefix = f"shards/src-{k:05d}"
        ids = np.arange(start, start + n, dtype=np.int64)
        n_tokens = rng.integers(16, 4096, n, dtype=np.int32)
        path = root / f"{prefix}.docs.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.table(
                {
                    "doc_id": ids,
                    "file": pa.array([f"part-{k:05d}.jsonl"] * n),
                    "line": ids - start,
                    "byte_offset": (ids - start) * 4096,
                    "n_tokens": n_tokens,
                    "n_bytes": n_tokens.astype(np.int64) * 4,
                    "lang": pa.array(rng.choice(LANGS, n).tolist()),
                }
            ),
            path,
        )
        shards.append({"prefix": prefix, "documents": n, "tokens": int(n_tokens.sum())})
    mf.write_manifest(
        root,
        {
            "kind": "tokenized",
            "fingerprint": mf.fingerprint("tokenized", params={"bench-plan": documents}),
            "tokenizer": {"spec": "bench", "fingerprint": "bench", "eos_id": 0, "bos_id": None},
            "dtype": "int32",
            "shards": shards,
            "files": [],
            "documents": documents,
        },
    )
    return root


def measure(source: str, filter: str) -> dict:
    """One plan in this (fresh) interpreter; prints one JSON line."""
    from shardcore.pool import plan_pool

    out = tempfile.mkdtemp(prefix="bench-plan-out-")
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        plan = plan_pool([source], out, seq_len=2048, filter=filter or None)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        shutil.rmtree(out, ignore_errors=True)
    peak = 0.0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    selected = sum(sum(i["docs"]) for i in plan.meta["inputs"])
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": peak, "selected": selected}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--shard-docs", type=int, default=20_000)
    ap.add_argument("--child", nargs=2, metavar=("SOURCE", "FILTER"))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1])))
        return
    print(machine())
    rows = []
    root = Path(tempfile.mkdtemp(prefix="bench-pool-plan-"))
    try:
        for documents in [int(s) for s in args.sizes.split(",")]:
            source = write_source(root / f"src-{documents}", documents, args.shard_docs)
            row: dict = {"documents": documents}
            for name, flt in (("all", ""), ("filter", FILTER)):
                got = run_child(["bench.scale.pool_plan", "--child", str(source), flt])
                row.update({f"{name}_{k}": v for k, v in got.items()})
            print(json.dumps(row), flush=True)
            rows.append(row)
            shutil.rmtree(source)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sizes = [r["documents"] for r in rows]
    print(
        markdown_table(
            [
                "documents",
                "plan s (no filter)",
                "plan s (filter)",
                "CPU s (filter)",
                "peak RSS MB (filter)",
                "selected",
            ],
            [
                [
                    r["documents"],
                    r["all_wall_s"],
                    r["filter_wall_s"],
                    r["filter_cpu_s"],
                    r["filter_peak_rss_mb"],
                    r["filter_selected"],
                ]
                for r in rows
            ],
        )  # fmt: skip
    )
    fit = fit_power(sizes, [r["filter_wall_s"] for r in rows])
    limit = 20.0
    at = (limit / fit.at(1.0)) ** (1 / fit.slope) if fit.slope > 0 else float("inf")
    print(
        f"growth with the filter: ~ documents^{fit.slope:.2f}; the {limit:.0f} s limit "
        f"at ~{at / 1e6:.0f} M documents on this machine and load"
    )
    print(machine())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()

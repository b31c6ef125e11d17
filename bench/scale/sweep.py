"""The job engine's two steps that used to grow with a phase: a worker's sweep over a queue of
old messages, and the success that ends a phase and starts the next.

Per size N, each in a fresh interpreter against Postgres and a real Redis broker (a queue
of the run's own, deleted afterwards):

* **sweep**: one job of N metadata-only units, all queued, their N task messages waiting
  in Redis (every one sent through Celery), then a wait longer than the lease (60 s) so
  that every queued unit is older than the lease, as most of a large phase is; then
  ``job_sweep`` (reap, then resend) three times: wall time, CPU of the process and of its
  Postgres backend (the median), and the units it sent again (none is lost: 0);
* **phase end**: one job of two phases, one unit then N units: the first unit claimed,
  then its success (``unit_succeed``: the job's counters, then the start of the next
  phase and the messages it sends), wall and CPU as above; and one step of the
  dispatcher (``job_dispatch_execute``, where it exists) after it.

``--old-engine REV`` runs the same script on the code of commit ``REV`` (from ``git
archive``, against a database of its own, dropped afterwards) at ``--old-sizes``.

    python -m bench.scale.sweep --sizes 1000,10000,100000 [--old-engine REV
        --old-sizes 1000,10000,100000] [--report FILE]

Needs DATABASE_URL (Postgres) and CELERY_BROKER_URL (Redis) in the environment, like the
tests; the database is migrated first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.scale.common import fit_power, machine, markdown_table

# Run with ``python -c`` in the tree measured (this one or an archive of an older commit):
# it uses only what both have (job_create, claim, unit_succeed, job_sweep).
CHILD = r"""
import json, os, statistics, sys, tempfile, time
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
import django
django.setup()
from django.conf import settings
from django.db import connection

import bench.scale.jobs  # registers the stage "scale-noop"
from shardcore import units
from webapp.jobs import claims, recovery, services
from webapp.jobs.models import Job, JobUnit
from workers.celery import app

mode, n = sys.argv[1], int(sys.argv[2])
queue = f"bench-sweep-{os.getpid()}"
app.conf.task_default_queue = queue
settings.SHARDYARD_DISPATCH_BATCH = n + 1 if mode == "sweep" else 1000


def cpu(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spec(i):
    return {"id": f"u{i:08d}", "file": f"/data/in/part-{i // 64:06d}.jsonl.zst",
            "start": (i % 64) * 64_000_000, "end": (i % 64 + 1) * 64_000_000,
            "bytes": 64_000_000}


def timed(fn):
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = cur.fetchone()[0]
    c0, s0, t0 = time.process_time(), cpu(backend), time.perf_counter()
    result = fn()
    wall = time.perf_counter() - t0
    return result, {"wall_ms": wall * 1000, "cpu_ms": (time.process_time() - c0) * 1000,
                    "pg_cpu_ms": (cpu(backend) - s0) * 1000}


import redis
broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
out = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
try:
    if mode == "sweep":
        plan = units.Plan(stage="scale-noop", out=str(out), params={},
                          phases=[[spec(i) for i in range(n)]])
        job = services.job_create(plan=plan)
        waiting = broker.llen(queue)
        # Every unit queued longer than the lease (60 s) when the sweeps run: an old queue.
        time.sleep(settings.SHARDYARD_UNIT_LEASE + 1)
        runs = [timed(lambda: recovery.job_sweep(queue=queue)) for _ in range(3)]
        resent = sum(len(lines) for lines, _ in runs)
        result = {"waiting": waiting, "resent": resent}
        for key in ("wall_ms", "cpu_ms", "pg_cpu_ms"):
            result[key] = statistics.median(r[key] for _, r in runs)
    else:
        plan = units.Plan(stage="scale-noop", out=str(out), params={},
                          phases=[[spec(0)], [spec(i) for i in range(1, n + 1)]])
        job = services.job_create(plan=plan)
        first = JobUnit.objects.get(job=job, phase=0)
        unit = claims.claim(first.pk, "bench")
        _, result = timed(lambda: claims.unit_succeed(unit, {"documents": 1}))
        result["sent"] = broker.llen(queue) - 1  # the first phase's message waits too
        result["queued"] = JobUnit.objects.filter(job=job, phase=1, state="queued").count()
        execute = getattr(services, "job_dispatch_execute", None)
        if execute is not None:
            _, step = timed(lambda: execute(job_id=job.pk, phase=1))
            result["dispatch_wall_ms"], result["dispatch_cpu_ms"] = step["wall_ms"], step["cpu_ms"]
            result["dispatch_pg_cpu_ms"] = step["pg_cpu_ms"]
finally:
    broker.delete(queue)
    with connection.cursor() as cur:
        cur.execute(f"DELETE FROM {JobUnit._meta.db_table} WHERE job_id = %s", [job.pk])
    Job.objects.filter(pk=job.pk).delete()
print(json.dumps(result))
"""


def _child(mode: str, n: int, *, cwd: Path, env: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(n)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} at {n} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _database_url(name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{name}"))


def measure(sizes: list[int], *, cwd: Path, env: dict, label: str) -> list[dict]:
    rows = []
    for n in sizes:
        sweep = _child("sweep", n, cwd=cwd, env=env)
        end = _child("phase-end", n, cwd=cwd, env=env)
        rows.append({"units": n, "code": label, "sweep": sweep, "phase_end": end})
        print(f"{label} {n:>9,}: sweep {sweep}; phase end {end}", file=sys.stderr)
    return rows


def old_engine(rev: str, sizes: list[int]) -> list[dict]:
    import psycopg

    root = Path(__file__).resolve().parents[2]
    db = f"{os.environ['DATABASE_URL'].rsplit('/', 1)[1]}_old_sweep"
    admin = _database_url("postgres")
    with tempfile.TemporaryDirectory(prefix="scale-old-sweep-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", rev], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}"')
            conn.execute(f'CREATE DATABASE "{db}"')
        env = {**os.environ, "PYTHONPATH": tmp, "DATABASE_URL": _database_url(db),
               "SHARDYARD_DATA": str(Path(tmp) / "data")}  # fmt: skip
        try:
            subprocess.run([sys.executable, "manage.py", "migrate", "-v0"],
                           cwd=tmp, env=env, check=True, capture_output=True)  # fmt: skip
            return measure(sizes, cwd=Path(tmp), env=env, label=f"at {rev}")
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}"')


def report(rows: list[dict]) -> str:
    lines = [
        markdown_table(
            [
                "code",
                "units",
                "sweep: messages waiting",
                "sweep ms",
                "sweep CPU ms (process + Postgres)",
                "sent again",
                "phase end ms",
                "phase end CPU ms (process + Postgres)",
                "messages sent",
                "units queued",
                "dispatch step ms",
                "dispatch step CPU ms",
            ],
            [
                [
                    r["code"],
                    f"{r['units']:,}",
                    f"{r['sweep']['waiting']:,}",
                    f"{r['sweep']['wall_ms']:.1f}",
                    f"{r['sweep']['cpu_ms']:.1f} + {r['sweep']['pg_cpu_ms']:.1f}",
                    r["sweep"]["resent"],
                    f"{r['phase_end']['wall_ms']:.1f}",
                    f"{r['phase_end']['cpu_ms']:.1f} + {r['phase_end']['pg_cpu_ms']:.1f}",
                    f"{r['phase_end']['sent']:,}",
                    f"{r['phase_end']['queued']:,}",
                    f"{r['phase_end'].get('dispatch_wall_ms', float('nan')):.1f}",
                    f"{r['phase_end'].get('dispatch_cpu_ms', float('nan')):.1f} + "
                    f"{r['phase_end'].get('dispatch_pg_cpu_ms', float('nan')):.1f}",
                ]
                for r in rows
            ],
        ),  # fmt: skip
        "",
    ]
    for code in dict.fromkeys(r["code"] for r in rows):
        mine = [r for r in rows if r["code"] == code]
        if len(mine) < 2:
            continue
        sizes = [r["units"] for r in mine]
        for what, key in (("sweep", "sweep"), ("phase end", "phase_end")):
            cpu = [r[key]["cpu_ms"] + r[key]["pg_cpu_ms"] for r in mine]
            fit = fit_power(sizes, [max(c, 0.01) for c in cpu])
            lines.append(
                f"Fit, {what} CPU ({code}): slope {fit.slope:+.3f}; at 1,000,000 units "
                f"{fit.at(1e6):,.1f} ms; at 10,000,000 units {fit.at(1e7):,.1f} ms."
            )
    lines.append(f"\nMachine: {machine()}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--old-engine", default="")
    parser.add_argument("--old-sizes", default="1000,10000,100000")
    parser.add_argument("--report", default="")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=root, env=env,
                   check=True)  # fmt: skip
    active = subprocess.run(
        [sys.executable, "-c", "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE',"
         " 'webapp.settings'); django.setup(); from webapp.jobs.models import ACTIVE_JOB_STATES,"
         " Job; print(Job.objects.filter(state__in=ACTIVE_JOB_STATES).count())"],
        cwd=root, env=env, check=True, capture_output=True, text=True,
    ).stdout.split()[-1]  # fmt: skip
    if active != "0":
        # A sweep heals every active job's units: another job's would be measured too.
        raise SystemExit(f"{active} job(s) are active in this database: measure on one of its own")
    print(f"Machine: {machine()}", file=sys.stderr)
    rows = measure([int(s) for s in args.sizes.split(",")], cwd=root, env=env, label="this")
    if args.old_engine:
        rows += old_engine(args.old_engine, [int(s) for s in args.old_sizes.split(",")])
    text = report(rows)
    print(text)
    if args.report:
        Path(args.report).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()

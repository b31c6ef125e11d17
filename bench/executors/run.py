"""Per-unit overhead of each executor on the same small-unit job, in one run.

The job: materializing a mixture of the demo corpus (``shardcore.materialize``) into
``--units`` output shards, each unit copying some MB of records: real work of about a
tenth of a second per unit. It runs, into a directory of its own each time, on

* ``local`` in-process, one unit after the other: the work itself (W per unit, no process
  start, no scheduling), the reference the overheads are measured against;
* ``local`` with 2 worker processes (``units.run_local``);
* Celery: the service's job engine (``webapp.jobs``: unit rows in Postgres, messages in
  Redis) with two ``celery worker`` processes of concurrency 1;
* Slurm: a one-node cluster of 2 CPUs started here (Debian's slurm-wlm, as the tests start
  it), first one unit per array task (each task a new process: its start, imports and
  scheduling are the per-task cost c), then with K units per task, K the least for which
  c / (K x W) < 5%;
* Ray: a head on loopback with 2 CPUs, one task per unit.

Every engine has 2 slots, and runs the same work twice: cut into ``--units`` units and
into a quarter as many. The difference of the two walls is what the extra units cost, so
a unit's overhead is ``(slots x (wall_n - wall_n/4) - (work_n - work_n/4)) / (n - n/4)``
slot-seconds beyond its work, whatever the engine's cost per job (a pool's start, the
finalize, the wait between dependent Slurm jobs), which is reported apart. Every build's
bytes are checked against the in-process one's. The table goes to stdout and
``OUT/results.md``, the numbers to ``OUT/results.json``, with the overhead of 1.7 M units
(the units of a 15 T-token pool job, DESIGN §6).

    python -m bench.executors.run [--units 80] [--out DIR] [--skip celery,ray]

Needs DATABASE_URL (Postgres) and CELERY_BROKER_URL (Redis) for Celery, and slurm-wlm,
munge and ray installed (each missing engine is skipped with the reason).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.scale.common import machine, markdown_table
from shardcore import units
from shardcore.demo import build_demo_corpus
from shardcore.executors.local import LocalExecutor
from shardcore.executors.ray import RayExecutor
from shardcore.executors.slurm import SlurmExecutor, SlurmOptions
from shardcore.materialize import plan_materialize
from shardcore.mixture import Mixture

SLOTS = 2
TARGET = 0.05  # Slurm's per-task cost at most this share of a task's work
AT_SCALE = 1_700_000
ROOT = Path(__file__).resolve().parents[2]


def _cli(args: list[str], cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shardcore.cli", *args], cwd=cwd, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"shardyard {args[0]} failed: {done.stderr[-2000:]}")


def _mixture(work: Path) -> Path:
    corpus = work / "corpus"
    build_demo_corpus(corpus, max_bytes_per_source=2_000_000)
    _cli(["tokenize", str(corpus), "--out", str(work / "tok"), "--quiet", "--workers", "2"], work)
    _cli(["pool", str(work / "tok"), "--out", str(work / "pool"), "--seq-len", "256",
          "--quiet", "--workers", "2"], work)  # fmt: skip
    # Several epochs of the pool: enough samples for the units asked for.
    _cli(["mix", "--component", f"{work / 'pool'}:1", "--tokens", "20000000",
          "--max-repetitions", "100", "--out", str(work / "mix")], work)  # fmt: skip
    return work / "mix"


def _plan(mix: Path, out: Path, n: int) -> units.Plan:
    m = Mixture(mix)
    per_sample = (m.seq_len + 1) * 4
    per_shard = math.ceil(m.num_samples / n)
    return plan_materialize(mix, out, shard_bytes=per_shard * per_sample)


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.relative_to(root).as_posix().startswith(("_units/", "_plan"))
    }


def _in_process(plan: units.Plan) -> float:
    """Seconds of work per unit, the units run one after the other in this process."""
    units.save_plan(plan)
    times = []
    for unit in plan.phases[0]:
        t0 = time.perf_counter()
        units.run_unit(plan, unit["id"], unit=unit)
        times.append(time.perf_counter() - t0)
    units.finalize(plan)
    return sum(times) / len(times)


@contextlib.contextmanager
def _celery_workers(work: Path):
    """Two ``celery worker`` processes (concurrency 1) on a queue of their own, started and
    ready; yields ``run(plan)``, which builds the plan as a job of the service's engine
    (unit rows in Postgres, messages in Redis) and waits for it."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from bench.scale.e2e import wait_job
    from bench.scale.procs import Worker
    from webapp.jobs.dispatch import job_create
    from workers.celery import app

    call_command("migrate", verbosity=0)
    queue = f"bench-executors-{uuid.uuid4().hex[:8]}"
    app.conf.task_default_queue = queue
    workers = [
        Worker.start(f"w{i}", queue=queue, env=dict(os.environ), log_dir=work) for i in range(SLOTS)
    ]

    def run(plan: units.Plan) -> None:
        job = job_create(plan=plan, title="bench executors")
        job = wait_job(job.pk, timeout=1800, log=lambda *_: None, poll=0.2)
        if job.state != "succeeded":
            raise SystemExit(f"celery job {job.pk} ended {job.state}: {job.error}")

    try:
        deadline = time.monotonic() + 120
        while not all("ready." in w.log() for w in workers):
            if time.monotonic() > deadline:
                raise SystemExit("celery workers did not start: " + workers[0].log()[-2000:])
            time.sleep(0.5)
        yield run
    finally:
        for w in workers:
            w.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", type=int, default=80)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--skip", default="", help="engines to leave out: celery,slurm,ray")
    args = ap.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-executors-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sy-bx-", dir="/tmp"))
    sys.path.insert(0, str(ROOT))
    print(f"machine: {machine()}\nwork: {work}", flush=True)
    mix = _mixture(work)

    # The same work cut into SIZES[0] and SIZES[1] units: the difference of the walls is
    # the per-unit overhead, whatever an engine's cost per job (start, finalize, chain).
    sizes = (max(2, args.units // 4), args.units)
    counts, work_s, expected = [], [], []
    for n in sizes:
        plan = _plan(mix, work / f"ref-{n}", n)
        counts.append(len(plan.phases[0]))
        work_s.append(_in_process(plan) * counts[-1])
        expected.append(_files(work / f"ref-{n}"))
    w = work_s[1] / counts[1]
    print(f"{counts[0]} and {counts[1]} units; work {w * 1000:.1f} ms per unit of "
          f"{counts[1]} (in process)", flush=True)  # fmt: skip
    rows: list[dict] = []

    def measure(engine: str, run, note: str = "") -> dict:
        walls = []
        for i, n in enumerate(sizes):
            target = work / f"{engine.split()[0]}-{len(rows)}-{n}"
            t0 = time.monotonic()
            run(_plan(mix, target, n))
            walls.append(time.monotonic() - t0)
            assert _files(target) == expected[i], f"{engine}: bytes differ from in-process"
        per_unit = (SLOTS * (walls[1] - walls[0]) - (work_s[1] - work_s[0])) / (
            counts[1] - counts[0]
        )
        fixed = walls[1] - (work_s[1] + counts[1] * per_unit) / SLOTS
        row = {"engine": engine, "walls_s": walls, "overhead_ms": per_unit * 1000,
               "overhead_share": per_unit / w, "job_cost_s": fixed, "note": note}  # fmt: skip
        rows.append(row)
        print(f"{engine}: walls {walls[0]:.1f} s, {walls[1]:.1f} s; {per_unit * 1000:.1f} ms "
              f"per unit, {fixed:.1f} s per job {note}", flush=True)  # fmt: skip
        return row

    measure("local (2 processes)", LocalExecutor(workers=SLOTS).run)

    if "celery" in skip:
        print("celery: skipped (--skip)")
    elif not os.environ.get("DATABASE_URL") or not os.environ.get("CELERY_BROKER_URL"):
        print("celery: skipped (DATABASE_URL and CELERY_BROKER_URL are needed)")
    else:
        with _celery_workers(work) as run_job:
            measure("celery (2 workers)", run_job)

    from tests.support import slurm as slurm_support

    if "slurm" in skip or not slurm_support.available():
        print("slurm: skipped (" + ("--skip" if "slurm" in skip else "not installed") + ")")
    else:
        cluster = slurm_support.SlurmCluster(work / "slurm", cpus=SLOTS)
        os.environ.update(cluster.env())
        try:
            quiet = {"poll": 0.5, "max_tasks": 100_000}
            one = measure(
                "slurm, 1 unit per task", SlurmExecutor(SlurmOptions(units_per_task=1, **quiet)).run
            )
            task = one["overhead_ms"] / 1000  # slot-seconds each task costs
            k = max(1, math.ceil(task / (TARGET * w)))
            row = measure(
                f"slurm, {k} units per task",
                SlurmExecutor(SlurmOptions(units_per_task=k, **quiet)).run,
                f"(a task costs {task:.2f} s: {task / (k * w):.1%} of {k} units' work)",
            )
            row.update(units_per_task=k, task_cost_s=task)
        finally:
            cluster.stop()

    from tests.support.ray_head import ENV, RayHead

    if "ray" in skip:
        print("ray: skipped (--skip)")
    else:
        os.environ.update(ENV)
        head = RayHead(Path(tempfile.mkdtemp(prefix="sy-bxr-", dir="/tmp")))
        try:
            measure("ray (2 CPUs)", RayExecutor(address=head.address, retries=0).run)
        finally:
            head.stop()

    table = markdown_table(
        ["engine", f"wall s ({counts[0]} / {counts[1]} units)", "overhead per unit ms",
         "overhead / work", "cost per job s", f"{AT_SCALE:,} units: slot-hours of overhead"],
        [
            [r["engine"], f"{r['walls_s'][0]:.1f} / {r['walls_s'][1]:.1f}",
             f"{r['overhead_ms']:.1f}", f"{r['overhead_share']:.1%}", f"{r['job_cost_s']:.1f}",
             f"{max(r['overhead_ms'], 0) / 1000 * AT_SCALE / 3600:,.1f}"]
            for r in rows
        ],
    )  # fmt: skip
    header = (
        f"{counts[1]} units of {w * 1000:.1f} ms of work each (and the same work in "
        f"{counts[0]} units), {SLOTS} slots; {machine()}"
    )
    print(f"\n{header}\n\n{table}")
    (out / "results.md").write_text(f"{header}\n\n{table}\n")
    (out / "results.json").write_text(
        json.dumps(
            {"machine": machine(), "units": counts, "work_ms": w * 1000, "rows": rows}, indent=1
        )
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

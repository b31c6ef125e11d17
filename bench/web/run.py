"""Benchmark the dashboard and API under catalog sizes from the issue. Not a test.

    .venv/bin/python bench/web/run.py [--shards 100000] [--jobs 10000] [--runs 1000]
        [--requests 60] [--seconds 10] [--concurrency 8] [--db shardyard_bench_web]

1. Seeds a fresh Postgres database (``--db`` on 127.0.0.1, dropped and recreated):
   100 pools holding ``--shards`` shards between them (manifests written to a temp dir so
   resume positions are real), 20 mixtures with versions over them, ``--runs`` runs with
   20 progress reports each, ``--jobs`` jobs with 10 units each, flags and taints.
2. Starts ``gunicorn webapp.wsgi`` with 2 workers on 127.0.0.1 (persistent database
   connections; ``--worker-class`` gthread with ``--threads`` threads per worker, as in
   docker-compose.yml, or sync), and from a second process (this script's load generator,
   stdlib only, keep-alive connections):
   - every page ``--requests`` times, sequentially, after 5 warm-up requests: p50/p95;
   - ``POST /api/runs/{id}/progress/`` from ``--concurrency`` connections for
     ``--seconds`` seconds over all runs with increasing steps: requests/s.
   ``--worker-class sync,gthread`` measures the progress endpoint under each in turn (the
   pages under the first).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(db: str) -> dict:
    return {
        **os.environ,
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-web"),
        "DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{db}",
        "DATABASE_CONN_MAX_AGE": "600",
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }


def create_database(db: str) -> None:
    for sql in (f'DROP DATABASE IF EXISTS "{db}"', f'CREATE DATABASE "{db}"'):
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", sql], check=True)


def seed(args, workdir: Path) -> dict:
    """Runs inside a child process with DATABASE_URL set; returns ids and credentials."""
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    from shardcore.manifest import write_manifest
    from webapp.catalog.models import (
        Flag,
        Mixture,
        MixtureComponent,
        MixtureVersion,
        Pool,
        RunProgress,
        Shard,
        Source,
        SourceFile,
        Taint,
        TokenizedSource,
        Tokenizer,
        TrainingRun,
    )
    from webapp.jobs.models import Job, JobUnit

    call_command("migrate", verbosity=0)
    t0 = time.perf_counter()
    sources = Source.objects.bulk_create(
        [
            Source(name=f"src-{i}", uri=f"/data/src-{i}", status="scanned", num_files=50,
                   metadata_fields=["language"], num_documents=10_000, num_bytes=10**8)
            for i in range(10)
        ]
    )  # fmt: skip
    SourceFile.objects.bulk_create(
        [SourceFile(source=s, path=f"part-{j:04d}.jsonl", size=2 * 10**6, num_documents=200)
         for s in sources for j in range(50)]
    )  # fmt: skip
    tok = Tokenizer.objects.create(spec="tiktoken:cl100k_base", vocab_size=100277)
    tss = TokenizedSource.objects.bulk_create(
        [TokenizedSource(source=s, tokenizer=tok, status="ready", path=f"/data/tok-{s.pk}",
                         num_documents=10_000, num_tokens=10**7) for s in sources]
    )  # fmt: skip
    n_pools = 100
    per_pool = args.shards // n_pools
    pools = Pool.objects.bulk_create(
        [
            Pool(name=f"pool-{i}", status="ready", path=str(workdir / f"pool-{i}"), seq_len=2048,
                 num_records=per_pool * 100, num_tokens=per_pool * 100 * 2048,
                 num_documents=per_pool * 50, fingerprint=f"{i:016x}")
            for i in range(n_pools)
        ]
    )  # fmt: skip
    Pool.parents.through.objects.bulk_create(
        [Pool.parents.through(pool_id=p.pk, tokenizedsource_id=tss[i % 10].pk)
         for i, p in enumerate(pools)]
    )  # fmt: skip
    shards = []
    for p in pools:
        Path(p.path).mkdir(parents=True, exist_ok=True)
        write_manifest(
            p.path,
            {"kind": "pool", "seq_len": 2048, "num_records": per_pool * 100,
             "cumulative_records": [i * 100 for i in range(per_pool + 1)],
             "shards": [{"prefix": f"{p.path}/pool-{i:05d}"} for i in range(per_pool)]},
        )  # fmt: skip
        shards += [
            Shard(pool=p, index=i, prefix=f"{p.path}/pool-{i:05d}", num_records=100,
                  num_tokens=100 * 2049, num_bytes=100 * 2049 * 4)
            for i in range(per_pool)
        ]  # fmt: skip
    Shard.objects.bulk_create(shards, batch_size=10_000)
    mixtures = Mixture.objects.bulk_create([Mixture(name=f"mix-{i}") for i in range(20)])
    versions = MixtureVersion.objects.bulk_create(
        [MixtureVersion(mixture=m, number=v, token_budget=10**11, status="ready",
                        path=str(workdir / f"mix-{m.pk}-{v}"), num_samples=10**11 // 2049)
         for m in mixtures for v in (1, 2, 3)]
    )  # fmt: skip
    MixtureComponent.objects.bulk_create(
        [MixtureComponent(version=v, pool=pools[(i * 3 + k) % n_pools], weight=w, stage="main")
         for i, v in enumerate(versions) for k, w in enumerate((0.5, 0.3, 0.2))]
    )  # fmt: skip
    runs = TrainingRun.objects.bulk_create(
        [TrainingRun(name=f"run-{i}", mixture_version=versions[i % len(versions)],
                     state="running", last_step=2000, consumed_samples=2000 * 512,
                     consumed_tokens=2000 * 512 * 2048)
         for i in range(args.runs)]
    )  # fmt: skip
    RunProgress.objects.bulk_create(
        [RunProgress(run=r, step=s * 100, consumed_samples=s * 100 * 512,
                     consumed_tokens=s * 100 * 512 * 2048)
         for r in runs for s in range(1, 21)],
        batch_size=10_000,
    )  # fmt: skip
    jobs = Job.objects.bulk_create(
        [Job(kind="tokenize", title=f"tokenize src-{i % 10} #{i}", plan={"units": []},
             state=("succeeded", "failed", "running", "queued")[i % 4], output_dir=f"/out/{i}",
             units_total=10, units_done=10 if i % 4 == 0 else 4, tokens=10**6)
         for i in range(args.jobs)],
        batch_size=5_000,
    )  # fmt: skip
    JobUnit.objects.bulk_create(
        [JobUnit(job=j, unit_id=f"part-{k:04d}", index=k, phase=0, state="succeeded")
         for j in jobs for k in range(10)],
        batch_size=10_000,
    )  # fmt: skip
    flag = Flag.objects.create(target="source", source=sources[0], reason="license review")
    Taint.objects.bulk_create(
        [Taint(flag=flag, run=r, documents=10) for r in runs[:50]]
        + [Taint(flag=flag, pool=pools[0], documents=10)]
    )
    users = {}
    for role in ("viewer", "editor", "admin"):
        u = User.objects.create_user(username=f"bench-{role}", password="bench-pw-123")
        u.groups.add(Group.objects.get(name=role))
        session = SessionStore()
        session["_auth_user_id"] = str(u.pk)
        session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
        session["_auth_user_hash"] = u.get_session_auth_hash()
        session.create()
        users[role] = {"session": session.session_key, "token": Token.objects.create(user=u).key}
    from django.db import connection

    with connection.cursor() as c:
        c.execute("ANALYZE")
    return {
        "seconds": time.perf_counter() - t0,
        "users": users,
        "source": sources[0].pk,
        "pool": pools[0].pk,
        "mixture": mixtures[0].pk,
        "version": versions[0].pk,
        "run": runs[0].pk,
        "runs": [r.pk for r in runs],
        "job": jobs[2].pk,
        "flag": flag.pk,
    }


def _seed_child(args, workdir, q):
    q.put(seed(args, workdir))


class Conn:
    """One keep-alive HTTP connection with a session cookie or an API token."""

    def __init__(self, base: str, *, session: str | None = None, token: str | None = None):
        u = urlparse(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        self.headers = {}
        if session:
            self.headers["Cookie"] = f"sessionid={session}"
        if token:
            self.headers["Authorization"] = f"Token {token}"

    def request(self, method: str, path: str, body: dict | None = None) -> int:
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        resp.read()
        return resp.status


def measure_pages(base: str, pages: list[tuple[str, str]], users: dict, n: int) -> list[dict]:
    out = []
    for role, path in pages:
        c = Conn(base, session=users[role]["session"])
        for _ in range(5):
            status = c.request("GET", path)
        times = []
        for _ in range(n):
            t = time.perf_counter()
            status = c.request("GET", path)
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        out.append(
            {
                "page": path,
                "role": role,
                "status": status,
                "p50_ms": round(statistics.median(times), 1),
                "p95_ms": round(times[int(0.95 * (len(times) - 1))], 1),
            }
        )
    return out


def _progress_worker(base, token, run_ids, seconds, offset, q):
    c = Conn(base, token=token)
    done = errors = 0
    step = 10**6 + offset
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        run = run_ids[i % len(run_ids)]
        i += 1
        step += 1
        status = c.request(
            "POST", f"/api/runs/{run}/progress/", {"step": step, "consumed_samples": step * 8}
        )
        if status == 201:
            done += 1
        else:
            errors += 1
    q.put((done, errors))


def measure_progress(base, token, run_ids, seconds, concurrency) -> dict:
    q = mp.Queue()
    procs = [
        mp.Process(
            target=_progress_worker,
            args=(base, token, run_ids[k::concurrency], seconds, k * 10**9, q),
        )
        for k in range(concurrency)
    ]
    t = time.perf_counter()
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    wall = time.perf_counter() - t
    done = sum(r[0] for r in results)
    return {
        "requests": done,
        "errors": sum(r[1] for r in results),
        "seconds": round(wall, 2),
        "req_per_s": round(done / seconds, 1),
    }


_WRK_SCRIPT = """
-- One POST per request with a fresh step per thread, over all runs; the body is what a
-- trainer sends at each checkpoint.
local runs = {%(runs)s}
local n = 0
local tid = 0
local next_tid = 0
function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
end
function request()
  n = n + 1
  local run = runs[(n %% #runs) + 1]
  local step = 3000000000 + tid * 100000000 + n
  local body = string.format('{"step": %%d, "consumed_samples": %%d}', step, step * 8)
  return wrk.format("POST", "/api/runs/" .. run .. "/progress/",
    {["Content-Type"] = "application/json", ["Authorization"] = "Token %(token)s"}, body)
end
"""


def measure_progress_wrk(base, token, run_ids, seconds, concurrency) -> dict:
    """The same load from wrk (C, one process, two threads): it leaves the CPU to the
    server instead of spending it on Python clients."""
    script = Path(tempfile.mkdtemp(prefix="bench-web-wrk-")) / "progress.lua"
    script.write_text(_WRK_SCRIPT % {"runs": ", ".join(map(str, run_ids)), "token": token})
    out = subprocess.run(
        ["wrk", "-t", "2", "-c", str(concurrency), "-d", f"{seconds:g}s", "-s", str(script),
         "--latency", base],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    total = int(re.search(r"(\d+) requests in", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = int(bad.group(1)) if bad else 0
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(\w+)", out)
    return {
        "requests": total - errors,
        "errors": errors,
        "seconds": seconds,
        "req_per_s": round(rate * (total - errors) / max(total, 1), 1),
        "p99_latency": f"{p99.group(1)}{p99.group(2)}" if p99 else None,
        "load": "wrk",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=100_000)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=1_000)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--db", default="shardyard_bench_web")
    ap.add_argument("--worker-class", default="gthread", help="sync, gthread or both: sync,gthread")
    ap.add_argument("--threads", type=int, default=4, help="threads per gthread worker")
    ap.add_argument("--progress-only", action="store_true", help="skip the pages")
    ap.add_argument(
        "--load", default="python", choices=["python", "wrk"],
        help="progress load generator: Python processes (http.client) or wrk",
    )  # fmt: skip
    args = ap.parse_args()

    create_database(args.db)
    env = _env(args.db)
    os.environ.update(env)
    workdir = Path(tempfile.mkdtemp(prefix="bench-web-"))
    q = mp.get_context("spawn").Queue()
    child = mp.get_context("spawn").Process(target=_seed_child, args=(args, workdir, q))
    child.start()
    ids = q.get()
    child.join()
    print(f"seeded in {ids['seconds']:.1f} s: {args.shards} shards, {args.jobs} jobs, "
          f"{args.runs} runs", flush=True)  # fmt: skip

    i = ids
    pages = [
        ("viewer", "/"),
        ("viewer", "/sources/"),
        ("viewer", f"/sources/{i['source']}/"),
        ("viewer", "/pools/"),
        ("viewer", f"/pools/{i['pool']}/"),
        ("viewer", "/mixtures/"),
        ("viewer", f"/mixtures/{i['mixture']}/"),
        ("viewer", f"/mixtures/versions/{i['version']}/"),
        ("editor", "/mixtures/new/"),
        ("viewer", "/jobs/"),
        ("viewer", "/jobs/?state=running&page=20"),
        ("viewer", f"/jobs/{i['job']}/"),
        ("viewer", f"/jobs/{i['job']}/progress.json"),
        ("viewer", "/runs/"),
        ("viewer", f"/runs/{i['run']}/"),
        ("viewer", "/audit/"),
        ("viewer", "/audit/?source=src-0"),
        ("viewer", f"/audit/flags/{i['flag']}/"),
        ("admin", "/users/"),
    ]
    results, progress_by_class = [], {}
    for n, worker_class in enumerate(args.worker_class.split(",")):
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        cmd = [str(ROOT / ".venv/bin/gunicorn"), "webapp.wsgi", "-w", "2",
               "-b", f"127.0.0.1:{port}", "--log-level", "warning",
               "--worker-class", worker_class]  # fmt: skip
        if worker_class == "gthread":
            cmd += ["--threads", str(args.threads)]
        server = subprocess.Popen(cmd, cwd=ROOT, env=env)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.2)
            if n == 0 and not args.progress_only:
                results = measure_pages(base, pages, i["users"], args.requests)
            measure = measure_progress_wrk if args.load == "wrk" else measure_progress
            progress_by_class[worker_class] = measure(
                base, i["users"]["editor"]["token"], i["runs"], args.seconds, args.concurrency
            )
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"\n{'page':45} {'role':7} {'status':>6} {'p50 ms':>8} {'p95 ms':>8}")
    for r in results:
        flag = "" if r["p95_ms"] < 150 and r["status"] == 200 else "  <-- over target"
        print(
            f"{r['page']:45} {r['role']:7} {r['status']:>6} {r['p50_ms']:>8} {r['p95_ms']:>8}{flag}"
        )
    for worker_class, progress in progress_by_class.items():
        print(f"\nprogress endpoint ({worker_class}): {progress['req_per_s']} req/s over "
              f"{args.seconds:g} s ({progress['requests']} recorded, {progress['errors']} "
              f"errors, {args.concurrency} connections)")  # fmt: skip
    print(json.dumps({"pages": results, "progress": progress_by_class}))


if __name__ == "__main__":
    main()

"""Page and API latency on a catalog of the issue's size. Not a test.

    python -m bench.web.scale [--shards 1000000] [--reports 10000000] [--runs 10000]
        [--tainted 500] [--documents 16000000] [--rounds 10] [--requests 40]
        [--db shardyard_bench_web_scale] [--keep]

1. Seeds a fresh Postgres database (``--db`` on 127.0.0.1, dropped and recreated) with
   COPY: 10 sources and their tokenized versions, 100 pools holding ``--shards`` shards
   (one of them, ``pool-big``, has ``--documents`` documents and the most shards), 20
   mixtures x 3 versions, ``--runs`` runs with ``--reports`` progress reports between them,
   10,000 jobs with 10 units each, and a flag tainting ``--tainted`` runs (their first
   flagged samples stored), with the rows the pages read: every fact a task stores
   (pool properties, pool quality by ``lang``, version quality, source statistics, epoch
   starts), real reports measured on 65,536 synthetic samples. No artifact files: a page
   that would read one shows it (an error or an empty chart), it is not faster for it.
2. Cold: ``--rounds`` times, a fresh ``gunicorn webapp.wsgi`` (one sync worker: its
   process caches are empty; the default cache is per process) answers every page once,
   in order, once its worker has loaded the application (``gunicorn_ready.py``: gunicorn
   accepts connections before, and the first request would wait for the boot); p50/p95
   over the rounds, and the worker's boot apart. Postgres' buffers and the OS page cache
   are not dropped (a shared machine).
3. Warm: one server (2 gthread workers, 4 threads, as docker-compose.yml runs it), every
   page 5 times to warm up, then ``--requests`` times: p50/p95.
Prints a table, the workers' boot (p50/p95) and a JSON line (machine, load average before
and after).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.web.run import Conn, _env, _free_port, create_database  # noqa: E402

SEQ_LEN = 2048
SAMPLES_PER_STEP = 512


def _copy(cursor, table: str, columns: tuple[str, ...], rows) -> int:
    n = 0
    with cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
            n += 1
    return n


def _quality_report(labels, *, by: str, stages: bool = False) -> dict:
    """A report of the shape a task stores, measured on ``labels`` (65,536 samples)."""
    import numpy as np

    from shardcore import quality

    rep = quality.report(labels, batch_size=256)
    rep["batches"].pop("per_batch", None)
    sizes = rep["windows"]["window_sizes"]
    ref = quality.sample_shuffle_reference(labels, sizes, trials=2, seed=1)
    rep["reference"] = ref
    rep["verdict"] = quality.verdict(sizes, rep["windows"]["max_all"], ref["mean"])
    rep["label_verdicts"] = quality.label_verdicts(rep["windows"], ref)
    rep["label"] = by
    rep["records"], rep["measured"] = 16_000_000, len(labels)
    if stages:
        rep["stages"] = [{"name": "main", "num_samples": 10**8, "measured": len(labels),
                          "verdict": rep["verdict"], "labels": rep["label_verdicts"]}]  # fmt: skip
    else:
        rng = np.random.default_rng(2)
        rep["by_shuffle"] = {
            name: {"windows": quality.window_deviation(labels[rng.permutation(labels.size)])}
            for name in ("exact", "grid", "local", "buffer")
        }
    return rep


def seed(args, workdir: Path) -> dict:
    """Runs in a child process with DATABASE_URL set; returns ids and credentials."""
    import django

    django.setup()
    import numpy as np
    from django.conf import settings
    from django.contrib.auth.models import Group, User
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    from webapp.catalog.models import (
        Fact,
        Flag,
        Mixture,
        MixtureComponent,
        MixtureVersion,
        Pool,
        Source,
        SourceFile,
        Taint,
        TokenizedSource,
        Tokenizer,
        TrainingRun,
    )
    from webapp.jobs.models import Job

    call_command("migrate", verbosity=0)
    t0 = time.perf_counter()
    sources = Source.objects.bulk_create(
        [Source(name=f"src-{i}", uri=f"/data/src-{i}", status="scanned", num_files=50,
                metadata_fields=["lang"], num_documents=1_600_000, num_bytes=10**10)
         for i in range(10)]
    )  # fmt: skip
    SourceFile.objects.bulk_create(
        [SourceFile(source=s, path=f"part-{j:04d}.jsonl", size=2 * 10**8, num_documents=32_000)
         for s in sources for j in range(50)]
    )  # fmt: skip
    tok = Tokenizer.objects.create(spec="tiktoken:cl100k_base", vocab_size=100277)
    n_pools = 100
    big_shards = args.shards // 10
    per_pool = (args.shards - big_shards) // (n_pools - 1)
    tss = TokenizedSource.objects.bulk_create(
        [TokenizedSource(source=s, tokenizer=tok, status="ready", path=f"/data/tok-{s.pk}",
                         num_documents=1_600_000, num_tokens=1_600_000 * 1000,
                         num_shards=per_pool) for s in sources]
    )  # fmt: skip
    pools = Pool.objects.bulk_create(
        [Pool(name="pool-big" if i == 0 else f"pool-{i}", status="ready",
              path=str(workdir / f"pool-{i}"), seq_len=SEQ_LEN,
              num_shards=big_shards if i == 0 else per_pool,
              num_records=(big_shards if i == 0 else per_pool) * 100,
              num_tokens=(big_shards if i == 0 else per_pool) * 100 * (SEQ_LEN + 1),
              num_documents=args.documents if i == 0 else per_pool * 50,
              fingerprint=f"{i:016x}", params={})
         for i in range(n_pools)]
    )  # fmt: skip
    Pool.parents.through.objects.bulk_create(
        [Pool.parents.through(pool_id=p.pk, tokenizedsource_id=tss[i % 10].pk)
         for i, p in enumerate(pools)]
          + [Pool.parents.through(pool_id=pools[0].pk, tokenizedsource_id=t.pk) for t in tss[1:]]
    )  # fmt: skip
    with connection.cursor() as c:
        n = _copy(
            c, "catalog_shard",
            ("pool_id", "index", "prefix", "num_records", "num_documents", "num_tokens",
             "num_bytes", "checksum"),
            ((p.pk, i, f"{p.path}/pool-{i:06d}", 100, 50, 100 * (SEQ_LEN + 1),
              100 * (SEQ_LEN + 1) * 4, "")
             for p in pools for i in range(p.num_shards)),
        )  # fmt: skip
    print(f"  {n:,} shards in {time.perf_counter() - t0:.0f} s", flush=True)
    mixtures = Mixture.objects.bulk_create([Mixture(name=f"mix-{i}") for i in range(20)])
    versions = MixtureVersion.objects.bulk_create(
        [MixtureVersion(mixture=m, number=v, token_budget=10**11, status="ready",
                        path=str(workdir / f"mix-{m.pk}-{v}"), num_samples=10**11 // 2049,
                        params={"seq_len": SEQ_LEN})
         for m in mixtures for v in (1, 2, 3)]
    )  # fmt: skip
    MixtureComponent.objects.bulk_create(
        [MixtureComponent(version=v, pool=pools[(i * 3 + k) % n_pools], weight=w, stage="main")
         for i, v in enumerate(versions) for k, w in enumerate((0.5, 0.3, 0.2))]
    )  # fmt: skip
    per_run = max(1, args.reports // args.runs)
    runs = TrainingRun.objects.bulk_create(
        [TrainingRun(name=f"run-{i}", mixture_version=versions[i % len(versions)],
                     state="running", last_step=per_run * 10,
                     consumed_samples=per_run * 10 * SAMPLES_PER_STEP,
                     consumed_tokens=per_run * 10 * SAMPLES_PER_STEP * SEQ_LEN,
                     last_reported_at=timezone.now())
         for i in range(args.runs)],
        batch_size=5000,
    )  # fmt: skip
    t1 = time.perf_counter()
    now = timezone.now()
    with connection.cursor() as c:
        n = _copy(
            c, "catalog_runprogress",
            ("run_id", "step", "consumed_samples", "consumed_tokens", "reported_at"),
            ((r.pk, s * 10, s * 10 * SAMPLES_PER_STEP, s * 10 * SAMPLES_PER_STEP * SEQ_LEN, now)
             for r in runs for s in range(1, per_run + 1)),
        )  # fmt: skip
    print(f"  {n:,} progress reports in {time.perf_counter() - t1:.0f} s", flush=True)
    jobs = Job.objects.bulk_create(
        [Job(kind="tokenize", title=f"tokenize src-{i % 10} #{i}", plan={"units": []},
             state=("succeeded", "failed", "running", "queued")[i % 4], output_dir=f"/out/{i}",
             units_total=10, units_done=10 if i % 4 == 0 else 4, tokens=10**6)
         for i in range(10_000)],
        batch_size=5_000,
    )  # fmt: skip
    with connection.cursor() as c:
        _copy(
            c, "jobs_jobunit",
            ("job_id", "unit_id", "index", "phase", "spec", "state", "attempts", "bad_lines",
             "error", "worker", "last_event"),
            ((j.pk, f"part-{k:04d}", k, 0, "{}", "succeeded", 1, 0, "", "", "")
             for j in jobs for k in range(10)),
        )  # fmt: skip
    # A flag tainting --tainted runs, with their first flagged samples stored (as the task
    # stores them), the tokenized source, the big pool and the versions those runs read.
    tainted = runs[: args.tainted]
    tv = sorted({r.mixture_version_id for r in tainted})
    flag = Flag.objects.create(
        target="source", source=sources[0], reason="license review",
        counts={"tokenized": 1, "pools": 1, "versions": len(tv), "runs": len(tainted),
                "copies": 0, "documents": 1_600_000},
        reads_done=len(tainted), reads_total=len(tainted),
    )  # fmt: skip
    Taint.objects.bulk_create(
        [Taint(flag=flag, tokenized_source=tss[0], documents=1_600_000),
         Taint(flag=flag, pool=pools[0], documents=1_600_000)]
        + [Taint(flag=flag, mixture_version_id=v, documents=1_600_000) for v in tv]
        + [Taint(flag=flag, run=r, documents=1_600_000,
                 read={"first_sample": 1000 + 37 * k, "never": False, "segments": []})
           for k, r in enumerate(tainted)]
    )  # fmt: skip
    # The facts tasks store, as pages read them.
    rng = np.random.default_rng(0)
    langs = np.array([f"lang-{k:02d}" for k in range(20)])
    labels = langs[np.minimum(rng.geometric(0.25, 1 << 16) - 1, 19)]
    pool_rep = _quality_report(labels, by="lang")
    pool_default = _quality_report(labels, by="document length (tokens)")
    pool_keys = np.array([f"p{k}" for k in range(3)])
    version_rep = _quality_report(pool_keys[rng.integers(0, 3, 1 << 16)], by="pool", stages=True)
    stats = {"by_property": {"lang": {str(x): {"documents": 80_000, "tokens": 8 * 10**7}
                                      for x in langs}},
             "edges": [2**k for k in range(14)], "counts": [1000 * k for k in range(13)]}  # fmt: skip
    facts = [Fact(kind="pool_properties", object_id=p.pk, value=["lang"]) for p in pools]
    facts += [Fact(kind="pool_quality", object_id=p.pk, key="lang", value=pool_rep) for p in pools]
    facts += [Fact(kind="pool_quality", object_id=p.pk, value=pool_default) for p in pools]
    facts += [Fact(kind="source_stats", object_id=t.pk, value=stats) for t in tss]
    facts += [Fact(kind="version_quality", object_id=v.pk, key="lang", value=version_rep)
              for v in versions]  # fmt: skip
    facts += [Fact(kind="version_epochs", object_id=v.pk, value={"starts": [], "total": 0,
                                                                 "paths": []})
              for v in versions]  # fmt: skip
    for f in facts:
        f.state = Fact.State.READY
        f.progress = 1.0
    Fact.objects.bulk_create(facts)
    for v in versions:  # the default report, recorded by the version's build
        MixtureVersion.objects.filter(pk=v.pk).update(
            params={"seq_len": SEQ_LEN, "quality": version_rep}
        )
    users = {}
    for role in ("viewer", "editor", "admin"):
        u = User.objects.create_user(username=f"bench-{role}", password="bench-pw-123")
        u.groups.add(Group.objects.get(name=role))
        session = SessionStore()
        session["_auth_user_id"] = str(u.pk)
        session["_auth_user_backend"] = settings.AUTHENTICATION_BACKENDS[0]
        session["_auth_user_hash"] = u.get_session_auth_hash()
        session.create()
        users[role] = {"session": session.session_key, "token": Token.objects.create(user=u).key}
    with connection.cursor() as c:
        c.execute("ANALYZE")
    return {
        "seconds": time.perf_counter() - t0,
        "users": users,
        "source": sources[0].pk,
        "pool": pools[0].pk,
        "mixture": mixtures[0].pk,
        "version": versions[0].pk,
        "run": tainted[0].pk,
        "job": jobs[2].pk,
        "flag": flag.pk,
    }


def _seed_child(args, workdir, q):
    q.put(seed(args, workdir))


def pages_of(i: dict) -> list[tuple[str, str, str]]:
    """(role, auth, path) of every page and API list measured."""
    pages = [
        "/", "/sources/", f"/sources/{i['source']}/", "/pools/", f"/pools/{i['pool']}/",
        f"/pools/{i['pool']}/?by=lang", "/mixtures/", f"/mixtures/{i['mixture']}/",
        f"/mixtures/versions/{i['version']}/", f"/mixtures/versions/{i['version']}/?by=lang",
        "/jobs/", "/jobs/?state=running&page=20", f"/jobs/{i['job']}/", "/runs/",
        "/runs/?page=100", f"/runs/{i['run']}/", "/audit/", f"/audit/flags/{i['flag']}/",
        f"/audit/flags/{i['flag']}/?page=10",
    ]  # fmt: skip
    api = [
        "/api/sources/", "/api/pools/", "/api/mixtures/", "/api/mixture-versions/",
        "/api/jobs/", "/api/runs/", "/api/runs/?offset=9000", "/api/flags/",
        f"/api/flags/{i['flag']}/taints/", f"/api/flags/{i['flag']}/taints/?page=10",
        f"/api/runs/{i['run']}/flags/",
    ]  # fmt: skip
    return [("viewer", "session", p) for p in pages] + [("editor", "token", p) for p in api]


def _start(env, workers: int, worker_class: str) -> tuple[subprocess.Popen, str, float]:
    """A gunicorn server once its ``workers`` have loaded the application (their boot is
    not a request): the process, its address and the seconds its workers took to boot."""
    port = _free_port()
    ready = Path(tempfile.mkdtemp(prefix="bench-web-ready-"))
    cmd = [str(Path(sys.executable).parent / "gunicorn"), "webapp.wsgi", "-w", str(workers),
           "-b", f"127.0.0.1:{port}", "--log-level", "warning", "--timeout", "300",
           "--worker-class", worker_class, "-c", str(Path(__file__).with_name("gunicorn_ready.py"))]  # fmt: skip
    if worker_class == "gthread":
        cmd += ["--threads", "4"]
    t = time.perf_counter()
    server = subprocess.Popen(cmd, cwd=ROOT, env={**env, "BENCH_READY_DIR": str(ready)})
    for _ in range(3000):
        if len(list(ready.iterdir())) >= workers:
            break
        time.sleep(0.02)
    boot = time.perf_counter() - t
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    return server, f"http://127.0.0.1:{port}", boot


def _conn(base, users, role, auth):
    u = users[role]
    return Conn(base, session=u["session"]) if auth == "session" else Conn(base, token=u["token"])


def _time(conn, path) -> tuple[float, int]:
    t = time.perf_counter()
    status = conn.request("GET", path)
    return (time.perf_counter() - t) * 1000, status


def _p95(times: list[float]) -> float:
    times = sorted(times)
    return round(times[int(0.95 * (len(times) - 1) + 0.5)], 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=1_000_000)
    ap.add_argument("--reports", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--tainted", type=int, default=500)
    ap.add_argument("--documents", type=int, default=16_000_000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--db", default="shardyard_bench_web_scale")
    ap.add_argument("--keep", action="store_true", help="reuse a seeded --db (ids from --ids)")
    ap.add_argument("--ids", default="", help="JSON file of a seed's ids (with --keep)")
    ap.add_argument("--seed-only", action="store_true", help="seed, print where the ids are")
    args = ap.parse_args()

    env = _env(args.db)
    env.update(DEBUG="0", SECRET_KEY="bench-web-scale-" + "k7Qz3VwX9pLm2RtY8sNb4HcJ6dFg1AeU")
    os.environ.update(env)
    load_before = os.getloadavg()
    if args.keep:
        ids = json.loads(Path(args.ids).read_text())
    else:
        create_database(args.db)
        workdir = Path(tempfile.mkdtemp(prefix="bench-web-scale-"))
        q = mp.get_context("spawn").Queue()
        child = mp.get_context("spawn").Process(target=_seed_child, args=(args, workdir, q))
        child.start()
        ids = q.get()
        child.join()
        Path(workdir / "ids.json").write_text(json.dumps(ids))
        print(f"seeded in {ids['seconds']:.0f} s ({workdir / 'ids.json'})", flush=True)
        if args.seed_only:
            return
    pages = pages_of(ids)
    cold: dict[str, list[float]] = {p: [] for _, _, p in pages}
    status: dict[str, int] = {}
    boots: list[float] = []
    for _ in range(args.rounds):
        server, base, boot = _start(env, 1, "sync")
        boots.append(boot * 1000)
        try:
            for role, auth, path in pages:
                ms, status[path] = _time(_conn(base, ids["users"], role, auth), path)
                cold[path].append(ms)
        finally:
            server.terminate()
            server.wait(timeout=30)
    warm: dict[str, list[float]] = {}
    server, base, _ = _start(env, 2, "gthread")
    try:
        for role, auth, path in pages:
            c = _conn(base, ids["users"], role, auth)
            for _ in range(5):
                _time(c, path)
            warm[path] = [_time(c, path)[0] for _ in range(args.requests)]
    finally:
        server.terminate()
        server.wait(timeout=30)
    load_after = os.getloadavg()
    rows: list[dict[str, Any]] = [
        {"page": p, "status": status[p],
         "cold_p50": round(statistics.median(cold[p]), 1), "cold_p95": _p95(cold[p]),
         "warm_p50": round(statistics.median(warm[p]), 1), "warm_p95": _p95(warm[p])}
        for _, _, p in pages
    ]  # fmt: skip
    print("\n| page | status | cold p50 ms | cold p95 ms | warm p50 ms | warm p95 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        mark = "" if max(r["cold_p95"], r["warm_p95"]) < 300 and r["status"] == 200 else " **"
        print(f"| `{r['page']}` | {r['status']} | {r['cold_p50']} | {r['cold_p95']}{mark} | "
              f"{r['warm_p50']} | {r['warm_p95']} |")  # fmt: skip
    boot_ms = {"p50": round(statistics.median(boots), 1), "p95": _p95(boots)}
    print(
        f"\nA fresh worker's boot (not a request): p50 {boot_ms['p50']} ms, p95 {boot_ms['p95']} ms"
    )
    machine = f"{platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}"
    print(json.dumps({"machine": machine, "load_before": load_before, "load_after": load_after,
                      "args": vars(args), "boot_ms": boot_ms, "pages": rows}))  # fmt: skip


if __name__ == "__main__":
    main()

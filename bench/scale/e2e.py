"""End-to-end scale run of a pool build through the service: tens of GB of real tokens,
small output shards (10^5 of them at the largest size), two real Celery workers on Redis and
Postgres, one of them SIGKILLed midway; then the same pool built in one process
(``build_pool``, what ``shardyard pool`` runs) and every output file compared byte for
byte. Not a test (tests/integration/test_scale_e2e.py drives the same code at a few MB).

    DATABASE_URL=postgresql://... CELERY_BROKER_URL=redis://... SECRET_KEY=... \\
    .venv/bin/python -m bench.scale.e2e --size 20GB --shards 100000 [--keep]

The input is real text tokenized once, then replicated: CPython standard-library modules
cut into documents of about ``--doc-chars`` characters are registered as a source and
tokenized through the service (``tokenized_source_build``, a tokenize job on the two
workers, the default tokenizer). Its token documents are then repeated under new document
ids up to ``--size`` bytes of tokens, written in the tokenize job's format (``.bin``/
``.idx`` through ``IndexedWriter``, the ``.docs.parquet`` sidecar with the seed rows'
file/line/offsets, a format-3 manifest with checksums) and recorded in the catalog by the
tokenize job's own recorder (``tokenized_source_record``) as a second tokenization of
the same source. The pool over it is launched with ``pool_build`` (what the dashboard's
and the API's launch call), its units claimed by the workers through the broker.

Results: a table on stdout and ``results.json`` in the work directory.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.common import machine  # noqa: E402
from bench.scale.procs import Sampler, Worker  # noqa: E402
from shardcore import manifest as mf  # noqa: E402
from shardcore.formats import IndexedReader, IndexedWriter  # noqa: E402
from shardcore.sizes import parse_size  # noqa: E402
from shardcore.verify import file_entry  # noqa: E402

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# Files of a pool build that record how it ran (unit markers with timings and worker
# names, the plan with its output path), not what it built: not compared.
RUN_RECORDS = ("_plan.json", "_units")


def write_seed_text(directory: Path, doc_chars: int, limit: int = 0) -> Path:
    """A JSONL file of CPython standard-library modules cut into documents of about
    ``doc_chars`` characters (whole modules with 0); ``limit`` modules at most (0: all)."""
    files = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 2000)
    files = files[:limit] if limit else files
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "stdlib.jsonl"
    with open(path, "w") as f:
        for p in files:
            text = p.read_text(errors="replace")
            step = doc_chars or len(text)
            for i in range(0, len(text), step):
                piece = text[i : i + step]
                if piece.strip():
                    f.write(json.dumps({"text": piece}) + "\n")
    return path


def _seed_documents(seed: Path) -> tuple[np.ndarray, np.ndarray, pa.Table]:
    """The seed artifact's documents in order: all tokens, the length of each, and the
    sidecar rows."""
    m = mf.read_manifest(seed)
    tokens, lengths, tables = [], [], []
    for sh in m["shards"]:
        r = IndexedReader(seed / sh["prefix"])
        tokens.append(np.asarray(r.tokens))
        lengths.append(np.asarray(r.lengths, dtype=np.int64))
        tables.append(pq.read_table(seed / f"{sh['prefix']}.docs.parquet"))
    return np.concatenate(tokens), np.concatenate(lengths), pa.concat_tables(tables)


def replicate(seed: Path, out: Path, size: int, shard_size: int, log=print) -> dict:
    """Write a tokenized artifact of ``size`` bytes of tokens (at least) at ``out``: the
    seed's documents repeated in order under new document ids, in shards of about
    ``shard_size`` bytes, with its sidecars and a format-3 manifest listing every file's
    checksums. Returns the manifest (as written, before reading back)."""
    seed_m = mf.read_manifest(seed)
    tokens, lengths, rows = _seed_documents(seed)
    itemsize = tokens.dtype.itemsize
    starts = np.concatenate([[0], np.cumsum(lengths)])
    n_seed = lengths.size
    docs_per_shard = max(1, int(shard_size // max(1, itemsize * lengths.mean())))
    total_docs = int(np.ceil(size / (itemsize * lengths.mean())))
    # Whole cycles of the seed are cheap to write (one add_many of the whole seed).
    out.mkdir(parents=True, exist_ok=True)
    (out / "shards").mkdir(exist_ok=True)
    shards, files = [], []
    doc, k, t0 = 0, 0, time.monotonic()
    while doc < total_docs:
        n = min(docs_per_shard, total_docs - doc)
        idx = (np.arange(doc, doc + n) % n_seed).astype(np.int64)
        prefix = f"shards/shard-{k:05d}"
        sel_len = lengths[idx]
        # Gather the tokens of the documents idx: a run of contiguous seed documents
        # except where the cycle wraps.
        parts = []
        lo = 0
        while lo < n:
            first = int(idx[lo])
            run = min(n - lo, n_seed - first)
            parts.append(tokens[starts[first] : starts[first + run]])
            lo += run
        with IndexedWriter(out / prefix, tokens.dtype) as w:
            w.add_many(np.concatenate(parts), sel_len)
        table = rows.take(pa.array(idx)).set_column(
            0, "doc_id", pa.array(np.arange(doc, doc + n, dtype=np.int64))
        )
        pq.write_table(table, out / f"{prefix}.docs.parquet")
        shards.append(
            {"prefix": prefix, "documents": n, "first_doc_id": doc, "index": k,
             "tokens": int(sel_len.sum())}
        )  # fmt: skip
        files += [file_entry(out, f"{prefix}{ext}") for ext in (".bin", ".docs.parquet", ".idx")]
        doc += n
        k += 1
        if k % 10 == 0:
            log(f"  replicate: {k} shards, {doc:,} documents, {time.monotonic() - t0:.0f} s")
    total_tokens = sum(s["tokens"] for s in shards)
    seed_input = seed_m["inputs"][0]
    manifest = {key: seed_m[key] for key in ("dtype", "engine", "kind", "params", "tokenizer")}
    manifest.update(
        {
            "bad_input": {},
            "fingerprint": mf.fingerprint(
                "tokenized", parents=[seed_m["fingerprint"]], params={"replicated": doc}
            ),
            "parents": list(seed_m["parents"]),
            # One input, the seed's file: every replica points back at its seed line.
            "inputs": [{**seed_input, "documents": doc, "tokens": total_tokens}],
            "totals": {"bad_documents": 0, "bytes": sum(f["size"] for f in files),
                       "documents": doc, "tokens": total_tokens},
            "shards": shards,
            "files": files,
        }
    )  # fmt: skip
    mf.write_manifest(out, manifest)
    return manifest


def database_url() -> str:
    """The URL of the database this process uses, for the worker subprocesses."""
    from django.db import connection

    s = connection.settings_dict
    auth = s.get("USER") or ""
    if auth and s.get("PASSWORD"):
        auth += f":{s['PASSWORD']}"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return (
        f"postgresql://{auth}{'@' if auth else ''}{s.get('HOST') or '127.0.0.1'}{port}/{s['NAME']}"
    )


def wait_job(
    job_id: int, *, timeout: float, log=print, on_poll=None, every: float = 10.0,
    poll: float = 0.5,
):  # fmt: skip
    """Poll the job row until it ends, printing progress every ``every`` seconds;
    ``on_poll(job)`` is called at each poll."""
    from webapp.jobs.models import Job, JobState

    t0 = last = time.monotonic()
    while True:
        job = Job.objects.get(pk=job_id)
        if on_poll is not None:
            on_poll(job)
        if job.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
            return job
        now = time.monotonic()
        if now - last >= every:
            last = now
            log(
                f"  job {job.pk}: {job.state}, phase {job.phase + 1}/{job.num_phases}, "
                f"{job.units_done:,}/{job.units_total:,} units, {now - t0:.0f} s, "
                f"load {os.getloadavg()[0]:.1f}"
            )
        if now - t0 > timeout:
            raise TimeoutError(f"job {job_id} did not finish in {timeout:.0f} s")
        time.sleep(poll)


@dataclass
class KillPlan:
    """SIGKILL a worker once ``at`` of the job's units are done, while it runs a unit;
    then, with ``restart``, start another in its place (named after it, "b" added;
    without, the survivor heals the lost unit alone, by lease)."""

    at: float
    start_worker: object  # name -> Worker
    restart: bool
    killed: dict = field(default_factory=dict)

    def __call__(self, job, workers: list[Worker], sampler_workers: list[Worker]) -> None:
        if self.killed or job.units_total == 0 or job.units_done < self.at * job.units_total:
            return
        # Past the threshold, try until a unit is caught running (units may be shorter than
        # the poll) or the job has no unit left to run.
        deadline = time.monotonic() + 30.0
        while not self.killed and time.monotonic() < deadline:
            if self._try(job, workers, sampler_workers) is False:
                return
            time.sleep(0.005)

    def _try(self, job, workers: list[Worker], sampler_workers: list[Worker]) -> bool | None:
        """Freeze every live worker's process group, then look for a unit one of them is
        running: frozen, none can finish it between the look and the kill. Kill that
        worker and let the others go on. False when the job has no unit left to run."""
        from webapp.jobs.models import JobUnit, UnitState

        live = [w for w in workers if w.proc.poll() is None]
        for w in live:
            os.killpg(w.proc.pid, signal.SIGSTOP)
        try:
            units = JobUnit.objects.filter(job=job)
            if not units.exclude(state=UnitState.SUCCEEDED).exists():
                return False
            victim = unit = None
            for unit in units.filter(state=UnitState.RUNNING).order_by("unit_id"):
                victim = next((w for w in live if unit.worker.startswith(w.name + "@")), None)
                if victim is not None:
                    break
            if victim is None or unit is None:
                return None
            victim.kill()
            self.killed = {
                "worker": victim.name, "pid": victim.proc.pid, "unit": unit.unit_id,
                "attempts": unit.attempts, "units_done": job.units_done,
                "units_total": job.units_total, "at_s": victim.killed_at,
            }  # fmt: skip
        finally:
            for w in live:
                if w.proc.poll() is None:
                    os.killpg(w.proc.pid, signal.SIGCONT)
        if self.restart:
            w = self.start_worker(victim.name + "b")
            workers.append(w)
            sampler_workers.append(w)
        return True


def service_pool(ts_ids, name, params, workers, kill: KillPlan, *, timeout, log=print) -> dict:
    """Launch the pool job through ``pool_build`` and wait for it, SIGKILLing a worker
    midway as ``kill`` says; returns the pool, the job and the timings."""
    from webapp.catalog.models import Pool
    from webapp.catalog.services.pools import pool_build
    from webapp.jobs.models import JobUnit

    sampler_workers = list(workers)
    sampler = Sampler(sampler_workers)
    sampler.start()
    t0 = time.monotonic()
    try:
        pool = pool_build(name=name, tokenized_ids=ts_ids, **params)
        launched = time.monotonic() - t0
        log(f"  launched pool {pool.pk} (job {pool.job_id}) in {launched:.1f} s")
        job = wait_job(
            pool.job_id, timeout=timeout, log=log,
            on_poll=lambda j: kill(j, workers, sampler_workers),
        )  # fmt: skip
    finally:
        sampler.stop()
    wall = time.monotonic() - t0
    if kill.killed:
        kill.killed["at_s"] -= t0
        u = JobUnit.objects.get(job=job, unit_id=kill.killed["unit"])
        kill.killed.update(after={"state": u.state, "attempts": u.attempts, "worker": u.worker,
                                  "last_event": u.last_event})  # fmt: skip
    pool = Pool.objects.get(pk=pool.pk)
    return {"pool": pool, "job": job, "wall_s": wall, "launch_s": launched,
            "killed": kill.killed}  # fmt: skip


def one_process_start(inputs: list[str], out: Path, params: dict) -> tuple:
    """Start ``plan_pool`` + ``run_local`` (``build_pool``, as ``shardyard pool`` runs it)
    in a fresh interpreter under /usr/bin/time; ``one_process_wait`` gives its wall, CPU
    and peak RSS."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "from shardcore.pool import build_pool\n"
        f"build_pool({inputs!r}, {str(out)!r}, workers=1, **{params!r})\n"
    )
    cmd = ["/usr/bin/time", "-f", "RSS_KB %M CPU %U %S WALL %e", sys.executable, "-c", code]
    stderr = open(out.parent / f"{out.name}.stderr", "w+")  # noqa: SIM115 (closed in wait)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr), stderr


def one_process_wait(started: tuple) -> dict:
    proc, stderr = started
    code = proc.wait()
    stderr.seek(0)
    text = stderr.read()
    stderr.close()
    if code:
        raise RuntimeError(f"one-process build failed:\n{text[-3000:]}")
    line = [x.split() for x in text.splitlines() if x.startswith("RSS_KB")][-1]
    # Its own wall time (it may have ended long before this wait, when run alongside).
    return {"wall_s": float(line[6]), "cpu_s": float(line[3]) + float(line[4]),
            "peak_rss_mb": int(line[1]) / 1024, "load_after": os.getloadavg()}  # fmt: skip


def output_files(directory: Path) -> tuple[list[str], list[str]]:
    """Every file of a built pool but the run records, relative and sorted; and apart, the
    temporary files of interrupted atomic writes (``.<name>.<random>.tmp``, which artifact
    listings skip)."""
    found, temps = [], []
    for dirpath, dirnames, filenames in os.walk(directory):
        rel = os.path.relpath(dirpath, directory)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d not in RUN_RECORDS]
            filenames = [f for f in filenames if f not in RUN_RECORDS]
        for f in filenames:
            path = os.path.normpath(os.path.join(rel, f))
            (temps if f.startswith(".") and f.endswith(".tmp") else found).append(path)
    return sorted(found), sorted(temps)


def compare(a: Path, b: Path) -> dict:
    """Byte-for-byte comparison of two pool outputs: the files only one side has, the
    files whose bytes differ, and the temporary files left on each side."""
    (fa, ta), (fb, tb) = output_files(a), output_files(b)
    both = sorted(set(fa) & set(fb))
    differ = [f for f in both if not filecmp.cmp(a / f, b / f, shallow=False)]
    return {
        "files": len(both),
        "bytes": sum((a / f).stat().st_size for f in both),
        "only_service": sorted(set(fa) - set(fb)),
        "only_one_process": sorted(set(fb) - set(fa)),
        "differ": differ,
        "temp_service": ta,
        "temp_one_process": tb,
        "identical": bool(both) and fa == fb and not differ,
    }


def run(
    work: Path, *, size: int, shards: int, queue: str, env: dict, doc_chars: int = 4000,
    seed_modules: int = 0, input_shard_size: int = 256 << 20, memory: int = 256 << 20,
    seq_len: int = 2048, kill_at: float = 0.5, restart: bool = True, timeout: float = 7200,
    concurrent: bool = False, name: str = "scale", log=print,
) -> dict:  # fmt: skip
    """The whole run under ``work`` (the catalog's source and data roots must be
    ``work/sources`` and ``work/data`` in this process's settings and in ``env``)."""
    from webapp.catalog.services.sources import source_register
    from webapp.catalog.services.tokenized import tokenized_source_build

    report: dict = {"machine": machine(), "size": size, "target_shards": shards}
    log_dir = work / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    workers: list[Worker] = []

    def start(wname: str) -> Worker:
        w = Worker.start(wname, queue=queue, env=env, log_dir=log_dir)
        log(f"  started worker {wname} (pid {w.proc.pid})")
        return w

    try:
        workers += [start("w1"), start("w2")]
        # 1. Real text, tokenized once through the service on the two workers.
        write_seed_text(work / "sources" / name, doc_chars, seed_modules)
        source = source_register(name=name, uri=str(work / "sources" / name))
        t = time.monotonic()
        seed_ts = tokenized_source_build(source_id=source.pk)
        seed_job = wait_job(seed_ts.job_id, timeout=1800, log=log)
        if seed_job.state != "succeeded":
            raise RuntimeError(f"seed tokenize job: {seed_job.error}")
        seed_ts.refresh_from_db()
        report["seed"] = {"documents": seed_ts.num_documents, "tokens": seed_ts.num_tokens,
                          "tokenize_s": time.monotonic() - t}  # fmt: skip
        log(f"seed: {seed_ts.num_documents:,} documents, {seed_ts.num_tokens:,} tokens")
        # 2. Replicated up to the size, recorded by the tokenize job's recorder.
        t = time.monotonic()
        big = work / "data" / "tokenized" / f"{name}-x"
        manifest = replicate(Path(seed_ts.path), big, size, input_shard_size, log=log)
        ts = record_tokenized(source, big, manifest)
        report["input"] = {
            "tokens": ts.num_tokens, "token_bytes": ts.num_tokens * 4,
            "documents": ts.num_documents, "shards": len(manifest["shards"]),
            "write_s": time.monotonic() - t,
        }  # fmt: skip
        log(f"input: {report['input']}")
        # 3. The pool through the service, a worker SIGKILLed midway.
        params = {"seq_len": seq_len, "shuffle": "exact", "seed": 0, "memory": memory,
                  "val_fraction": 0.0,
                  "shard_size": max(4096, ts.num_tokens * 4 // shards)}  # fmt: skip
        report["params"] = params
        kill = KillPlan(at=kill_at, start_worker=start, restart=restart)
        one = work / "one-process"
        shutil.rmtree(one, ignore_errors=True)
        keys = ("seq_len", "shuffle", "seed", "memory", "val_fraction", "shard_size")
        one_params = {k: params[k] for k in keys}
        alongside = one_process_start([ts.path], one, one_params) if concurrent else None
        svc = service_pool([ts.pk], f"{name}-pool", params, workers, kill,
                           timeout=timeout, log=log)  # fmt: skip
        job, pool = svc["job"], svc["pool"]
        if job.state != "succeeded":
            raise RuntimeError(f"pool job {job.pk} {job.state}: {job.error}\n{job.log_tail}")
        report["service"] = {
            "wall_s": svc["wall_s"], "launch_s": svc["launch_s"], "units": job.units_total,
            "job_s": (job.finished_at - job.started_at).total_seconds(),
            "shards": pool.shards.count(), "records": pool.num_records,
            "documents": pool.num_documents, "tokens": pool.num_tokens,
            "killed": svc["killed"], "load_after": os.getloadavg(),
            "workers": {w.name: {"cpu_s": w.cpu_s, "peak_rss_mb": w.peak_rss_mb,
                                 "killed": w.killed_at is not None, **w.split()}
                        for w in workers},
        }  # fmt: skip
        log(f"service: {json.dumps(report['service'], default=str)}")
        # 4. The same pool in one process (or its end, when it ran alongside), and the
        # bytes compared.
        started = alongside or one_process_start([ts.path], one, one_params)
        report["one_process"] = {**one_process_wait(started), "concurrent": concurrent}
        log(f"one process: {report['one_process']}")
        t = time.monotonic()
        report["compare"] = compare(Path(pool.path), one)
        report["compare"]["s"] = time.monotonic() - t
        report["identical"] = report["compare"]["identical"]
        log(f"compare: {json.dumps({k: v for k, v in report['compare'].items() if k != 'differ'})}")
    finally:
        for w in workers:
            w.stop()
    return report


def cleanup(work: Path) -> None:
    """Delete the inputs and both pools (the seed text and the logs stay)."""
    for d in ("data", "one-process"):
        shutil.rmtree(work / d, ignore_errors=True)


def record_tokenized(source, out: Path, manifest: dict):
    """Register the artifact at ``out`` as a tokenization of ``source``, through the tokenize
    job's recorder (``tokenized_source_record``) on a job row of its own."""
    from django.db import transaction

    from webapp.catalog.models import TokenizedSource
    from webapp.catalog.services.tokenized import tokenized_source_record, tokenizer_ensure
    from webapp.jobs.models import Job, JobState

    with transaction.atomic():
        job = Job.objects.create(
            kind="tokenize", title=f"replicate {source.name}", state=JobState.SUCCEEDED,
            plan={}, output_dir=str(out),
        )  # fmt: skip
        TokenizedSource.objects.create(
            source=source, tokenizer=tokenizer_ensure(spec=manifest["tokenizer"]["spec"]),
            params=manifest["params"], path=str(out), job=job,
        )  # fmt: skip
        tokenized_source_record(job=job, manifest=mf.read_manifest(out))
    return TokenizedSource.objects.get(job=job)


def markdown(report: dict) -> str:
    svc, one, inp = report["service"], report["one_process"], report["input"]
    killed = svc["killed"] or {}
    gb = inp["token_bytes"] / 1e9
    workers = ", ".join(
        f"{n}: {w['cpu_s']:.0f} s / {w['peak_rss_mb']:.0f} MB (main process "
        f"{w.get('main_cpu_s', 0):.0f} s / {w.get('main_peak_rss_mb', 0):.0f} MB, units "
        f"{w.get('units_cpu_s', 0):.0f} s / {w.get('units_peak_rss_mb', 0):.0f} MB)"
        f"{' killed' if w['killed'] else ''}"
        for n, w in svc["workers"].items()
    )
    rows = [
        "| run | wall s | CPU s | peak RSS MB | MB of tokens / s (wall) | load average after |",
        "|---|---:|---:|---:|---:|---|",
        f"| service, 2 workers, one SIGKILLed | {svc['wall_s']:.0f} | "
        f"{sum(w['cpu_s'] for w in svc['workers'].values()):.0f} | "
        f"{max(w['peak_rss_mb'] for w in svc['workers'].values()):.0f} | "
        f"{gb * 1e3 / svc['wall_s']:.1f} | {', '.join(f'{x:.1f}' for x in svc['load_after'])} |",
        f"| one process (`build_pool`) | {one['wall_s']:.0f} | {one['cpu_s']:.0f} | "
        f"{one['peak_rss_mb']:.0f} | {gb * 1e3 / one['wall_s']:.1f} | "
        f"{', '.join(f'{x:.1f}' for x in one['load_after'])} |",
    ]
    cmp_ = report["compare"]
    return "\n".join(
        [
            f"machine: {report['machine']}",
            f"input: {gb:.2f} GB of tokens ({inp['tokens']:,} tokens, {inp['documents']:,} "
            f"documents, {inp['shards']} input shards; written in {inp['write_s']:.0f} s); seed: "
            f"{report['seed']['documents']:,} documents, {report['seed']['tokens']:,} tokens",
            f"pool: {svc['shards']:,} shards of {report['params']['shard_size']:,} bytes, "
            f"{svc['records']:,} records of {report['params']['seq_len']} tokens, {svc['units']:,} "
            f"units, budget {report['params']['memory'] >> 20} MiB",
            f"killed: worker {killed.get('worker')} (pid {killed.get('pid')}) at "
            f"{killed.get('units_done')}/{killed.get('units_total')} units, "
            f"{killed.get('at_s', 0):.0f} s in, running {killed.get('unit')}; that unit then: "
            f"{killed.get('after')}",
            f"workers (CPU / peak RSS): {workers}",
            "",
            *rows,
            "",
            f"compared: {cmp_['files']:,} files, {cmp_['bytes'] / 1e9:.2f} GB, "
            f"{len(cmp_['differ'])} differ, {len(cmp_['only_service'])} only in the service's, "
            f"{len(cmp_['only_one_process'])} only in the one-process output: "
            f"{'BYTE-IDENTICAL' if report['identical'] else 'DIFFERENT'}; temporary files of "
            f"interrupted writes left (not compared): {len(cmp_['temp_service'])} in the "
            f"service's output {cmp_['temp_service'][:3]}, {len(cmp_['temp_one_process'])} in "
            "the one-process output",
        ]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1GB", help="bytes of tokens (default 1GB)")
    ap.add_argument("--shards", type=int, default=100_000, help="pool shards to aim at")
    ap.add_argument("--memory", default="256MiB", help="the pool's memory budget")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--doc-chars", type=int, default=4000, help="characters per document")
    ap.add_argument("--input-shard-size", default="256MiB")
    ap.add_argument("--kill-at", type=float, default=0.5, help="fraction of units done")
    ap.add_argument("--no-restart", action="store_true", help="let the survivor heal alone")
    ap.add_argument("--lease", type=int, default=20, help="SHARDYARD_UNIT_LEASE, seconds")
    ap.add_argument("--workdir", default="/tmp/sy-e2e-scale")
    ap.add_argument("--keep", action="store_true", help="keep the inputs and outputs")
    ap.add_argument(
        "--concurrent", action="store_true",
        help="run the one-process build at the same time as the service's (wall times "
        "then include each other's load; CPU time and memory do not)",
    )  # fmt: skip
    ap.add_argument("--force", action="store_true", help="run even if the disk looks short")
    args = ap.parse_args()
    size = parse_size(args.size)
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(work).free
    need = int(size * 3.3)  # input, two pools, pass-1 files
    print(subprocess.run(["df", "-h", str(work)], capture_output=True, text=True).stdout)
    if free < need and not args.force:
        print(f"needs ~{need / 1e9:.0f} GB free under {work}, {free / 1e9:.0f} GB free")
        return 2
    heartbeat = max(1, args.lease // 4)
    extra = {
        "SHARDYARD_DATA": str(work / "data"),
        "SHARDYARD_SOURCE_ROOTS": str(work / "sources"),
        "SHARDYARD_UNIT_HEARTBEAT": str(heartbeat),
        "SHARDYARD_UNIT_LEASE": str(args.lease),
        "SHARDYARD_SWEEP_INTERVAL": str(heartbeat),
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }
    os.environ.update(extra)
    queue = f"e2e-{os.getpid()}"
    os.environ["SHARDYARD_QUEUE"] = queue
    # Django is configured from the environment set just above.
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from webapp.jobs.models import ACTIVE_JOB_STATES, Job  # the app registry is ready now

    active = list(Job.objects.filter(state__in=ACTIVE_JOB_STATES).values_list("pk", "title"))
    if active and not args.force:
        # Their workers' sweepers would send their queued units again, onto this run's queue.
        print(f"jobs still active in this database (cancel them first): {active}")
        return 2
    env = {**os.environ, "DATABASE_URL": database_url()}
    name = f"scale-{time.strftime('%Y%m%d-%H%M%S')}"
    commit = ""
    with contextlib.suppress(OSError):
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    try:
        report = run(
            work, size=size, shards=args.shards, queue=queue, env=env,
            doc_chars=args.doc_chars, input_shard_size=parse_size(args.input_shard_size),
            memory=parse_size(args.memory), seq_len=args.seq_len, kill_at=args.kill_at,
            restart=not args.no_restart, concurrent=args.concurrent, name=name,
            log=lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", flush=True),
        )  # fmt: skip
        report["commit"] = commit
        text = markdown(report) + f"\ncode: commit {commit}"
        print(text, flush=True)
        (work / f"results-{name}.json").write_text(json.dumps(report, indent=1, default=str))
        (work / f"results-{name}.md").write_text(text + "\n")
    finally:
        if not args.keep:
            cleanup(work)
    return 0 if report["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""The service across real network boundaries, on one machine: network namespaces joined
by a bridge. One host holds the catalog (a Postgres cluster of its own), the broker (a Redis
server) and the object store (moto's S3 server); two hosts run one Celery worker each; a
control host does what a user's web app does. Every host runs with the catalog's data root
on the object store (``SHARDYARD_DATA=s3://shardyard/data``) and a local SHARDYARD_HOME and
cache of its own, as on separate machines.

The control host migrates the catalog, registers a source on S3 and starts its tokenized
source's build through the catalog's services; the catalog puts the artifact under the data
root and records where. Its units run on both workers; then one worker host's link is taken
down while it runs a unit. Its claim lapses (no heartbeat within the lease), the other
worker's sweeper queues the unit again, and the job finishes on the other host: the catalog
row is ready with the manifest's fingerprint, and the objects have the checksums and bytes
of a build on one host. When the cut-off host comes back, its late outcome for the unit
records nothing and the artifact's objects keep their bytes. Then a pool of the tokenized
source is built through the catalog, its units on both hosts again, reading what both wrote:
ready, with the fingerprint and bytes of a pool built on one host.

Needs root (or CAP_NET_ADMIN): skipped with the reason otherwise, failed instead under
SHARDYARD_REQUIRE_SERVICES=1."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shardcore import manifest as mf
from shardcore.pool.plan import build_pool
from shardcore.tokenize import tokenize
from tests.integration.test_jobs_workers import stdlib_docs
from tests.multihost.network import Host, Network, require_namespaces
from tests.support.services import ROOT, unavailable, wait_for

pytestmark = [pytest.mark.services, pytest.mark.slow]

SHARD_SIZE = 512 << 10
UNIT_BYTES = 512 << 10
LEASE = 4  # seconds without a heartbeat before a claim lapses (the heartbeat is 1 s)
SEQ_LEN = 512
POOL_SHARD_SIZE = 1 << 20
BUCKET = "corpus"  # the source's files
DATA_BUCKET = "shardyard"
DATA_ROOT = f"s3://{DATA_BUCKET}/data"  # the catalog's data root, on every host


def _postgres_bin() -> Path | None:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    return Path(found[-1]).parent if found else None


def _wait_port(address: str, port: int, what: str, proc, timeout: float = 60) -> None:
    def up():
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection((address, port), 0.5).close()
            return True
        except OSError:
            return False

    wait_for(up, timeout=timeout, interval=0.2, what=f"{what} on {address}:{port}")


@pytest.fixture
def network(tmp_path):
    require_namespaces()
    missing = [
        name
        for name, found in (
            ("Postgres server binaries (/usr/lib/postgresql/*/bin)", _postgres_bin()),
            ("redis-server", shutil.which("redis-server")),
            ("moto_server", (Path(sys.executable).parent / "moto_server").exists()),
        )
        if not found
    ]
    if missing:
        unavailable("the many-hosts test's services", ", ".join(missing) + " not installed")
    net = Network()
    pgdata = Path(tempfile.mkdtemp(prefix="shardyard-pg-"))
    try:
        yield net, pgdata
    finally:
        net.close()
        shutil.rmtree(pgdata, ignore_errors=True)


class Cluster:
    """The db host's services and the environment every other host runs with."""

    def __init__(self, net: Network, pgdata: Path, logs: Path, local: Path):
        self.net, self.logs, self.local = net, logs, local
        self.db = net.add_host("db")
        self.ctl = net.add_host("ctl")
        addr = self.db.address
        self._postgres(pgdata)
        redis = net.start(
            self.db,
            ["redis-server", "--bind", addr, "--port", "6379", "--save", "", "--appendonly",
             "no", "--protected-mode", "no", "--dir", str(logs)],
            log=logs / "redis.log",
        )  # fmt: skip
        moto = net.start(
            self.db,
            [str(Path(sys.executable).parent / "moto_server"), "-H", addr, "-p", "5000"],
            log=logs / "moto.log",
        )
        _wait_port(addr, 6379, "redis-server", redis)
        _wait_port(addr, 5000, "moto_server", moto)
        self.endpoint = f"http://{addr}:5000"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SHARDYARD_", "CELERY_", "DATABASE_", "AWS_"))
        }
        self.env.update(
            PYTHONPATH=str(ROOT),
            DJANGO_SETTINGS_MODULE="webapp.settings",
            SECRET_KEY="shardyard-multihost-test-key-7d1c9e04b2a6f853",
            DATABASE_URL=f"postgresql://postgres@{addr}:5432/shardyard",
            CELERY_BROKER_URL=f"redis://{addr}:6379/0",
            SHARDYARD_DATA=DATA_ROOT,
            SHARDYARD_SOURCE_ROOTS=f"s3://{BUCKET}",  # the sources' bucket
            AWS_ENDPOINT_URL=self.endpoint,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            SHARDYARD_UNIT_HEARTBEAT="1",
            SHARDYARD_UNIT_LEASE=str(LEASE),
            SHARDYARD_SWEEP_INTERVAL="1",
            SHARDYARD_WORKER_BEAT="2",
            SHARDYARD_SCRUB_INTERVAL="0",
            # A cut-off worker keeps trying to record its outcome for about a minute.
            SHARDYARD_DB_RETRIES="12",
        )

    def _postgres(self, pgdata: Path) -> None:
        bin_dir = _postgres_bin()
        as_postgres = ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups"]
        shutil.chown(pgdata, "postgres", "postgres")
        cluster = pgdata / "cluster"
        done = self.net.run(
            self.db,
            [*as_postgres, str(bin_dir / "initdb"), "-D", str(cluster), "-U", "postgres",
             "-A", "trust", "--no-sync", "-E", "UTF8"],
        )  # fmt: skip
        assert (cluster / "PG_VERSION").exists(), done
        with open(cluster / "pg_hba.conf", "a") as hba:  # the other hosts, over the bridge
            hba.write(f"host all all {self.net.prefix}.0/24 trust\n")
        server = self.net.start(
            self.db,
            [*as_postgres, str(bin_dir / "postgres"), "-D", str(cluster),
             "-c", f"listen_addresses={self.db.address}", "-c", "port=5432",
             "-c", f"unix_socket_directories={pgdata}", "-c", "fsync=off",
             "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
            log=self.logs / "postgres.log",
        )  # fmt: skip
        _wait_port(self.db.address, 5432, "postgres", server)
        wait_for(
            lambda: self._sql("SELECT 1", dbname="postgres", quiet=True),
            timeout=60,
            what="postgres to accept connections",
        )
        self._sql("CREATE DATABASE shardyard", dbname="postgres")

    def _sql(self, query: str, params=(), *, dbname: str = "shardyard", quiet: bool = False):
        import psycopg

        try:
            with psycopg.connect(
                host=self.db.address, user="postgres", dbname=dbname, autocommit=True,
                connect_timeout=5,
            ) as conn:  # fmt: skip
                cur = conn.execute(query, params)
                return cur.fetchall() if cur.description else True
        except psycopg.OperationalError:
            if quiet:
                return None
            raise

    def sql(self, query: str, params=()):
        return self._sql(query, params)

    def host_env(self, name: str) -> dict[str, str]:
        """The environment of one host: the shared one, with the local directories of its
        own (SHARDYARD_HOME: broker, static files, default roots; its cache), as on separate
        machines."""
        return {
            **self.env,
            "SHARDYARD_HOME": str(self.local / name / "home"),
            "SHARDYARD_CACHE": str(self.local / name / "cache"),
        }

    def control(self, *args: str) -> dict:
        """Run tests.multihost.control on the control host; its JSON answer."""
        out = self.net.run(
            self.ctl, [sys.executable, "-m", "tests.multihost.control", *args],
            env=self.host_env("ctl"), cwd=ROOT,
        )  # fmt: skip
        return json.loads(out.strip().splitlines()[-1])

    def worker(self, name: str) -> tuple[Host, object]:
        host = self.net.add_host(name)
        env = self.host_env(name)
        proc = self.net.start(
            host,
            [sys.executable, "-m", "celery", "-A", "workers", "worker", "--loglevel", "INFO",
             "--concurrency", "1", "--hostname", f"{name}@{host.netns}", "-Q", "shardyard",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            log=self.logs / f"worker-{name}.log",
            env=env,
            cwd=ROOT,
        )  # fmt: skip
        return host, proc

    def units(self, job_id: int) -> list[dict]:
        rows = self.sql(
            "SELECT id, unit_id, phase, state, worker, attempts, last_event "
            "FROM jobs_jobunit WHERE job_id = %s ORDER BY id",
            (job_id,),
        )
        keys = ("id", "unit_id", "phase", "state", "worker", "attempts", "last_event")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def job(self, job_id: int) -> dict:
        keys = ("state", "units_done", "units_total", "documents", "tokens", "log_tail")
        (row,) = self.sql(f"SELECT {', '.join(keys)} FROM jobs_job WHERE id = %s", (job_id,))
        return dict(zip(keys, row, strict=True))

    def finished(self, job_id: int, timeout: float) -> dict:
        """The job once it succeeded or failed (its log tail and the hosts' logs if not)."""

        def ended():
            job = self.job(job_id)
            return job if job["state"] in ("succeeded", "failed") else None

        try:
            return wait_for(ended, timeout=timeout, interval=0.5, what=f"job {job_id} to end")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.job(job_id)}\n{self.logs_text()}") from None

    def artifact(self, table: str, pk: int) -> dict:
        """The catalog's row of an artifact (catalog_tokenizedsource, catalog_pool)."""
        keys = ("status", "path", "manifest_path", "fingerprint", "num_tokens", "job_id")
        (row,) = self.sql(f"SELECT {', '.join(keys)} FROM catalog_{table} WHERE id = %s", (pk,))
        return dict(zip(keys, row, strict=True))

    def answers(self, worker: str) -> bool:
        """Whether the worker answers a ping through the broker, asked from the control
        host."""
        try:
            out = self.net.run(
                self.ctl,
                [sys.executable, "-m", "celery", "-A", "workers", "inspect", "ping",
                 "-d", worker, "--timeout", "5"],
                env=self.host_env("ctl"), cwd=ROOT, timeout=120,
            )  # fmt: skip
        except (AssertionError, subprocess.TimeoutExpired):
            return False
        return "pong" in out

    def open_transactions(self, address: str) -> int:
        (row,) = self.sql(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE client_addr = %s::inet AND xact_start IS NOT NULL",
            (address,),
        )
        return row[0]

    def logs_text(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-6000:]}"
            for p in sorted(self.logs.glob("*.log"))
        )


def _s3(endpoint: str):
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
    )  # fmt: skip


def _upload_sources(endpoint: str) -> int:
    """The source's files on their bucket, and the data root's (empty) bucket."""
    s3 = _s3(endpoint)
    s3.create_bucket(Bucket=BUCKET)
    s3.create_bucket(Bucket=DATA_BUCKET)
    n = 0
    for k in range(3):
        docs = stdlib_docs(40, offset=40 * k)
        body = b"".join(json.dumps(d).encode() + b"\n" for d in docs)
        s3.put_object(Bucket=BUCKET, Key=f"code/part-{k}.jsonl", Body=body)
        n += len(docs)
    return n


def _objects(endpoint: str, url: str) -> dict[str, bytes]:
    """Every object under the artifact's location ``s3://bucket/prefix``, by key below it."""
    s3 = _s3(endpoint)
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    prefix = prefix.rstrip("/") + "/"
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in page.get("Contents", [])
    ]
    return {k[len(prefix) :]: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def _local(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _artifact(files: dict[str, bytes]) -> tuple[dict, dict[str, str]]:
    """The manifest, and the SHA-256 of every data file (what the manifest lists, minus
    the manifest itself, the plan and the units' markers, which name their locations)."""
    manifest = json.loads(files["manifest.json"])
    return manifest, {
        k: hashlib.sha256(v).hexdigest()
        for k, v in sorted(files.items())
        if k not in ("manifest.json", "_plan.json") and not k.startswith("_units/")
    }


def _by_worker(units: list[dict], state: str = "succeeded") -> dict[str, int]:
    counts: dict[str, int] = {}
    for u in units:
        if u["state"] == state:
            name = u["worker"].split("@")[0]
            counts[name] = counts.get(name, 0) + 1
    return counts


def _ready(row: dict, manifest: dict, kind: str) -> None:
    """A catalog row the job's recorder filled in: ready, under the data root, with the
    manifest's fingerprint and location."""
    assert row["status"] == "ready", row
    assert row["path"].startswith(f"{DATA_ROOT}/{kind}/"), row
    assert row["manifest_path"] == f"{row['path']}/manifest.json", row
    assert row["fingerprint"] == manifest["fingerprint"], (row, manifest["fingerprint"])


def test_a_job_survives_a_worker_host_cut_off_mid_job(network, tmp_path, monkeypatch):
    net, pgdata = network
    logs, local = tmp_path / "logs", tmp_path / "hosts"
    logs.mkdir()
    cluster = Cluster(net, pgdata, logs, local)
    documents = _upload_sources(cluster.endpoint)

    net.run(cluster.ctl, [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            env=cluster.host_env("ctl"), cwd=ROOT)  # fmt: skip
    alpha, _ = cluster.worker("alpha")
    beta, beta_proc = cluster.worker("beta")
    # What a user does: register the source, build its tokenized source. The catalog
    # chooses the artifact's location under the data root and records it on the row.
    launched = cluster.control(
        "tokenize", "code", f"s3://{BUCKET}/code/", str(SHARD_SIZE), str(UNIT_BYTES)
    )
    job_id, out = launched["job"], launched["path"]
    assert out.startswith(f"{DATA_ROOT}/tokenized/code-"), launched

    # Both hosts take units; then beta is frozen while it runs one and holds no open
    # transaction, its link goes down, and it runs on without a network.
    def beta_mid_unit():
        units = cluster.units(job_id)
        done = _by_worker(units)
        if done.get("alpha", 0) < 1 or done.get("beta", 0) < 1:
            return None
        if not any(u["state"] == "running" and u["worker"].startswith("beta@") for u in units):
            return None
        os.killpg(beta_proc.pid, signal.SIGSTOP)
        units = cluster.units(job_id)
        running = [u for u in units if u["state"] == "running" and u["worker"].startswith("beta@")]
        if running and not cluster.open_transactions(beta.address):
            net.cut(beta)
            os.killpg(beta_proc.pid, signal.SIGCONT)
            return running[0], units
        os.killpg(beta_proc.pid, signal.SIGCONT)
        return None

    try:
        stranded, before_cut = wait_for(
            beta_mid_unit, timeout=150, interval=0.01, what="beta to run a unit, after both "
            "hosts finished one"
        )  # fmt: skip
    except AssertionError:
        raise AssertionError(cluster.logs_text()) from None
    beta_done = {u["unit_id"] for u in before_cut if u["state"] == "succeeded"
                 and u["worker"].startswith("beta@")}  # fmt: skip

    job = cluster.finished(job_id, timeout=240)
    assert job["state"] == "succeeded", job["log_tail"] + cluster.logs_text()
    units = cluster.units(job_id)
    by_id = {u["unit_id"]: u for u in units}
    assert all(u["state"] == "succeeded" for u in units), units
    rescued = by_id[stranded["unit_id"]]
    assert rescued["worker"].startswith("alpha@"), rescued
    assert rescued["attempts"] == stranded["attempts"] + 1, (stranded, rescued)
    assert rescued["last_event"].startswith("requeued after worker lost (beta@"), rescued
    assert "unit(s) lost: claimed by beta@" in job["log_tail"], job["log_tail"]
    # What beta finished before the cut stays beta's: nothing ran twice.
    assert beta_done and all(by_id[u]["worker"].startswith("beta@") for u in beta_done)
    assert job["units_done"] == job["units_total"] == len(units) >= 8
    assert job["documents"] == documents

    # The catalog recorded the artifact where it put it: ready, with its manifest's
    # fingerprint (the recorder ran on whichever worker finalized the job).
    stored = _objects(cluster.endpoint, out)
    tokenized = cluster.artifact("tokenizedsource", launched["id"])
    _ready(tokenized, json.loads(stored["manifest.json"]), "tokenized")
    assert tokenized["path"] == out and tokenized["num_tokens"] == job["tokens"]

    # Beta comes back while it still tries to record its outcome for the stranded unit
    # (it finished the work, or failed to read its input or to write its output): whatever
    # it was, it records nothing.
    net.reconnect(beta)
    wait_for(
        lambda: _ended(logs / "worker-beta.log"), timeout=150, interval=0.5,
        what="beta's late outcome for its stranded unit",
    )  # fmt: skip
    assert cluster.units(job_id) == units
    after = cluster.job(job_id)
    assert {k: after[k] for k in ("state", "units_done", "documents", "tokens")} == {
        k: job[k] for k in ("state", "units_done", "documents", "tokens")
    }
    assert cluster.artifact("tokenizedsource", launched["id"]) == tokenized
    # Nothing beta did after its return changed, added or removed an object.
    assert _objects(cluster.endpoint, out) == stored

    # The next stage crosses hosts too: a pool of the tokenized source, built through the
    # catalog once beta answers again; each host reads what both wrote.
    wait_for(
        lambda: cluster.answers(f"beta@{beta.netns}"), timeout=180, interval=1,
        what="beta to answer through the broker again",
    )  # fmt: skip
    pool = cluster.control("pool", "code", str(launched["id"]), str(SEQ_LEN), str(POOL_SHARD_SIZE))
    assert pool["path"].startswith(f"{DATA_ROOT}/pools/code-"), pool
    pool_job = cluster.finished(pool["job"], timeout=300)
    assert pool_job["state"] == "succeeded", pool_job["log_tail"] + cluster.logs_text()
    pool_units = cluster.units(pool["job"])
    assert all(u["state"] == "succeeded" for u in pool_units), pool_units
    ran = _by_worker(pool_units)
    assert ran.get("alpha", 0) >= 1 and ran.get("beta", 0) >= 1, pool_units
    pool_stored = _objects(cluster.endpoint, pool["path"])
    pool_row = cluster.artifact("pool", pool["id"])
    _ready(pool_row, json.loads(pool_stored["manifest.json"]), "pools")

    # One host: the same files through the library, same parameters, on local disk.
    monkeypatch.setenv("AWS_ENDPOINT_URL", cluster.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "one-host-cache"))
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    one_tok, one_pool = tmp_path / "one-host" / "tokenized", tmp_path / "one-host" / "pool"
    clean = tokenize(launched["files"], str(one_tok), shard_size=SHARD_SIZE,
                     unit_bytes=UNIT_BYTES)  # fmt: skip
    one_manifest, one_files = _artifact(_local(one_tok))
    manifest, files = _artifact(stored)
    assert manifest["fingerprint"] == one_manifest["fingerprint"] == clean["fingerprint"]
    # paths, sizes, checksums (the shard table and block checksums are in ``files``)
    assert mf.content_digest(manifest) == mf.content_digest(one_manifest)
    assert files == one_files and any(k.startswith("shards/") for k in files)

    clean_pool = build_pool([str(one_tok)], str(one_pool), seq_len=SEQ_LEN,
                            shard_size=POOL_SHARD_SIZE)  # fmt: skip
    one_manifest, one_files = _artifact(_local(one_pool))
    manifest, files = _artifact(pool_stored)
    assert manifest["fingerprint"] == one_manifest["fingerprint"] == clean_pool["fingerprint"]
    assert mf.content_digest(manifest) == mf.content_digest(one_manifest)
    assert files == one_files and any(k.startswith("shards/") for k in files)


TASK = re.compile(
    r"Task workers\.job_unit_run\[([0-9a-f-]+)\] (received|succeeded in|raised|retry)"
)


def _ended(log: Path) -> list[str] | None:
    """The outcomes of the worker's unit tasks once none is in flight any more (every task
    it received has succeeded, raised or been retried), else None."""
    received, ended = [], []
    for task, what in TASK.findall(log.read_text(errors="replace")):
        (received if what == "received" else ended).append(task)
    return ended if received and set(received) <= set(ended) else None

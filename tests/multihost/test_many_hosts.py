"""The service across real network boundaries, on one machine: network namespaces joined
by a bridge. One host holds the catalog (a Postgres cluster of its own), the broker (a Redis
server) and the object store (moto's S3 server); two hosts run one Celery worker each, each
with its own local cache directory; a control host migrates the catalog, registers a source
on S3 and launches a tokenize job whose artifact is written to S3. Its units run on both
workers; then one worker host's link is taken down while it runs a unit. Its claim lapses
(no heartbeat within the lease), the other worker's sweeper queues the unit again, and the
job finishes on the other host with the bytes, checksums and fingerprint of a run on one
host. When the cut-off host comes back, its late outcome for the unit records nothing and
the artifact's objects keep their bytes.

Needs root (or CAP_NET_ADMIN): skipped with the reason otherwise, failed instead under
SHARDYARD_REQUIRE_SERVICES=1."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path

import pytest

from shardcore.tokenize import tokenize
from tests.integration.test_jobs_workers import stdlib_docs
from tests.multihost.network import Host, Network, require_namespaces
from tests.support.services import ROOT, unavailable, wait_for

pytestmark = [pytest.mark.services, pytest.mark.slow]

SHARD_SIZE = 512 << 10
UNIT_BYTES = 512 << 10
LEASE = 4  # seconds without a heartbeat before a claim lapses (the heartbeat is 1 s)
BUCKET = "corpus"
OUT = f"s3://{BUCKET}/tokenized/code"


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

    def __init__(self, net: Network, pgdata: Path, logs: Path, data: Path):
        self.net, self.logs, self.data = net, logs, data
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
            SECRET_KEY="shardyard-test-key",
            DATABASE_URL=f"postgresql://postgres@{addr}:5432/shardyard",
            CELERY_BROKER_URL=f"redis://{addr}:6379/0",
            SHARDYARD_DATA=str(data),
            SHARDYARD_SOURCE_ROOTS=str(data / "sources"),
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

    def worker(self, name: str) -> tuple[Host, object]:
        host = self.net.add_host(name)
        # Each host works in a local directory of its own, as on separate machines.
        env = {**self.env, "SHARDYARD_CACHE": str(self.data / f"local-disk-{name}")}
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


def _upload_sources(endpoint: str) -> int:
    import boto3

    s3 = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
    )  # fmt: skip
    s3.create_bucket(Bucket=BUCKET)
    n = 0
    for k in range(3):
        docs = stdlib_docs(40, offset=40 * k)
        body = b"".join(json.dumps(d).encode() + b"\n" for d in docs)
        s3.put_object(Bucket=BUCKET, Key=f"code/part-{k}.jsonl", Body=body)
        n += len(docs)
    return n


def _objects(endpoint: str) -> dict[str, bytes]:
    """Every object under the artifact's prefix, by key below it."""
    import boto3

    s3 = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
    )  # fmt: skip
    prefix = OUT.split("/", 3)[3] + "/"
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        for o in page.get("Contents", [])
    ]
    return {k[len(prefix) :]: s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in keys}


def _local(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _artifact(files: dict[str, bytes]) -> tuple[dict, dict[str, bytes]]:
    manifest = json.loads(files["manifest.json"])
    return manifest, {k: v for k, v in sorted(files.items()) if k.startswith("shards/")}


def _by_worker(units: list[dict], state: str = "succeeded") -> dict[str, int]:
    counts: dict[str, int] = {}
    for u in units:
        if u["state"] == state:
            name = u["worker"].split("@")[0]
            counts[name] = counts.get(name, 0) + 1
    return counts


def test_a_job_survives_a_worker_host_cut_off_mid_job(network, tmp_path, monkeypatch):
    net, pgdata = network
    logs, data = tmp_path / "logs", tmp_path / "data"
    logs.mkdir()
    (data / "sources").mkdir(parents=True)
    cluster = Cluster(net, pgdata, logs, data)
    documents = _upload_sources(cluster.endpoint)

    net.run(cluster.ctl, [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            env=cluster.env, cwd=ROOT)  # fmt: skip
    alpha, _ = cluster.worker("alpha")
    beta, beta_proc = cluster.worker("beta")
    launched = json.loads(
        net.run(
            cluster.ctl,
            [sys.executable, "-m", "tests.multihost.control", "code", f"s3://{BUCKET}/code/",
             str(SHARD_SIZE), str(UNIT_BYTES), OUT],
            env=cluster.env, cwd=ROOT,
        ).strip().splitlines()[-1]
    )  # fmt: skip
    job_id = launched["job"]
    assert launched["path"] == OUT

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

    def finished():
        job = cluster.job(job_id)
        return job if job["state"] in ("succeeded", "failed") else None

    job = wait_for(finished, timeout=180, interval=0.3, what=f"job {job_id} to finish")
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

    # Beta comes back while it still tries to record its outcome for the stranded unit
    # (it finished the work, or failed to read its input or to write its output): whatever
    # it was, it records nothing.
    stored = _objects(cluster.endpoint)
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

    # One host: the same files through the library, same parameters.
    monkeypatch.setenv("AWS_ENDPOINT_URL", cluster.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    clean = tokenize(launched["files"], str(tmp_path / "one-host"), shard_size=SHARD_SIZE,
                     unit_bytes=UNIT_BYTES)  # fmt: skip
    one_manifest, one_shards = _artifact(_local(tmp_path / "one-host"))
    manifest, shards = _artifact(stored)
    assert manifest["fingerprint"] == one_manifest["fingerprint"] == clean["fingerprint"]
    assert manifest["files"] == one_manifest["files"]  # paths, sizes, checksums
    assert shards == one_shards
    # Nothing beta did after its return changed, added or removed an object.
    assert _objects(cluster.endpoint) == stored


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

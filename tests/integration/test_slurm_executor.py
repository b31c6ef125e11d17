"""Builds on a real Slurm cluster (``tests.support.slurm``: Debian's munged, slurmctld and
slurmd, one node with two CPUs): the demo corpus tokenized, pooled (exact shuffle), mixed
and materialized through job arrays by the command line, with the catalog's database and
broker unreachable from the tasks. One array task is killed mid-unit (``scancel
--signal=KILL``) and another requeued mid-unit (``scontrol requeue``); every artifact is
byte-identical to the same build run by local processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardcore.demo import build_demo_corpus
from tests.support import services
from tests.support import slurm as slurm_support

pytestmark = pytest.mark.slow

# The catalog's services as a compute node without access to them sees them: nothing
# listens there. A task that tried to reach them would fail.
UNREACHABLE = {
    "DATABASE_URL": "postgresql://postgres@127.0.0.1:9/unreachable",
    "CELERY_BROKER_URL": "redis://127.0.0.1:9/0",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not slurm_support.available():
        services.unavailable(
            "Slurm", "slurm-wlm and munge are not installed (.ci/run installs them)"
        )
    c = slurm_support.SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield c
    finally:
        c.stop()
    assert not c.job_processes(), "job processes outlived the cluster"


def _env(cluster=None) -> dict[str, str]:
    env = {**os.environ, **UNREACHABLE}
    if cluster is not None:
        env.update(cluster.env())
    return env


def _shardyard(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardcore.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout + done.stderr


def _builds(work: Path, corpus: Path) -> list[list[str]]:
    """The four builds (small units and shards, so that each phase has several)."""
    return [
        ["tokenize", str(corpus), "--out", str(work / "tok"), "--unit-size", "40KB",
         "--shard-size", "120KB", "--quiet"],
        ["pool", str(work / "tok"), "--out", str(work / "pool"), "--seq-len", "256",
         "--shuffle", "exact", "--seed", "3", "--memory", "1MiB", "--shard-size", "200KB",
         "--quiet"],
        ["mix", "--component", f"{work / 'pool'}:1", "--tokens", "300000", "--seed", "5",
         "--out", str(work / "mix")],
        ["materialize", str(work / "mix"), "--out", str(work / "mat"), "--shard-mb", "1"],
    ]  # fmt: skip


def _artifact_files(root: Path) -> dict[str, bytes]:
    """An artifact's files (its bookkeeping left out: the plan, which names no host, and
    the units' markers, whose stats hold timings)."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.relative_to(root).as_posix().startswith(("_units/", "_plan.json"))
    }


def _task_processes(cluster, job: str) -> list[int]:
    return [p for p in cluster.job_processes(job) if slurm_support._name(p) != "slurmstepd"]


def _catch_mid_unit(cluster, logs: Path, build: subprocess.Popen) -> tuple[str, list[int], Path]:
    """Freeze a running array task between a unit's start and its end (its log's last line
    says the unit started, and still does once its processes are stopped); returns the
    task (``12_3``), its stopped processes and its log."""
    while True:
        assert build.poll() is None, "the build ended before a task was caught in a unit"
        for log in sorted(logs.glob("p*-units-*.log")):
            lines = log.read_text().splitlines()
            if not lines or not lines[-1].endswith(": started"):
                continue
            job = [line for line in lines if line.startswith("== ")][-1].split()[3]
            pids = _task_processes(cluster, job)
            if not pids:
                continue
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            if log.read_text().splitlines()[-1].endswith(": started"):
                return job, pids, log
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in raw if b"=" in e)


def test_it_builds_on_slurm_byte_identical_to_local_through_a_kill_and_a_requeue(cluster, tmp_path):
    corpus = tmp_path / "corpus"
    build_demo_corpus(corpus, max_bytes_per_source=150_000)
    work = tmp_path / "build"
    for args in _builds(work, corpus):
        _ok(_shardyard([*args, "--executor", "local"], _env(), tmp_path))
    local = tmp_path / "local"
    work.rename(local)  # the Slurm builds write the same paths (manifests name their inputs)

    slurm = ["--executor", "slurm", "--units-per-task", "2"]
    tokenize, pool, mix, materialize = _builds(work, corpus)
    env = _env(cluster)

    # Tokenize: one task killed in the middle of a unit.
    build = subprocess.Popen(
        [sys.executable, "-m", "shardcore.cli", *tokenize, *slurm],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        job, pids, killed_log = _catch_mid_unit(cluster, work / "tok.slurm" / "logs", build)
        # The task runs as a compute node without the catalog would: no database, no broker.
        for name, value in UNREACHABLE.items():
            assert _environ(pids[0])[name] == value
        cluster.command("scancel", "--signal=KILL", job)
        out, err = build.communicate(timeout=900)
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
    assert build.returncode == 0, err[-4000:]
    assert "a task failed" in err and "submitting the units without markers again" in err
    text = killed_log.read_text()
    unit_line = [line for line in text.splitlines() if line.endswith(": started")][0]
    unit = unit_line.rsplit(":", 1)[0]
    assert text.count("== ") >= 2, text  # the first run of the range, then its resubmission
    assert f"{unit}: done in" in text, text  # the killed unit ran again to its end
    history = json.loads((work / "tok.slurm" / "jobs.json").read_text())
    assert len(history) == 2
    # Phases of more tasks than MaxArraySize are split over several arrays.
    first = [j for j in history[0]["jobs"] if j["phase"] == 0]
    assert len(first) > 1 and all(len(j["tasks"]) <= slurm_support.MAX_ARRAY_SIZE for j in first)

    # Pool: one task requeued in the middle of a unit (as a preemption does).
    build = subprocess.Popen(
        [sys.executable, "-m", "shardcore.cli", *pool, *slurm],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        job, pids, requeued_log = _catch_mid_unit(cluster, work / "pool.slurm" / "logs", build)
        cluster.command("scontrol", "requeue", job)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)  # it gets Slurm's signals now
        out, err = build.communicate(timeout=900)
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
    assert build.returncode == 0, err[-4000:]
    text = requeued_log.read_text()
    assert "restart 1" in text, text  # Slurm ran the same task again
    assert len(json.loads((work / "pool.slurm" / "jobs.json").read_text())) == 1

    # Mix submitted without waiting; running the command again follows it to its end.
    said = _ok(_shardyard([*mix, *slurm, "--no-wait"], env, tmp_path))
    assert "slurm: submitted" in said
    said = _ok(_shardyard([*mix, *slurm], env, tmp_path))
    assert "mixture" in said
    assert len(json.loads((work / "mix.slurm" / "jobs.json").read_text())) == 1

    _ok(_shardyard([*materialize, *slurm], env, tmp_path))

    # A rerun of a finished build recognizes it and submits nothing.
    said = _ok(_shardyard([*tokenize, *slurm], env, tmp_path))
    assert "finished earlier" in said
    assert len(json.loads((work / "tok.slurm" / "jobs.json").read_text())) == 2

    for name in ("tok", "pool", "mix", "mat"):
        built, reference = _artifact_files(work / name), _artifact_files(local / name)
        assert sorted(built) == sorted(reference), name
        for rel, data in reference.items():
            assert built[rel] == data, f"{name}/{rel} differs from the local build"
    assert not cluster.job_processes()

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
import time
from pathlib import Path

import pytest

from shardcore.demo import build_demo_corpus
from tests.support import services
from tests.support import slurm as slurm_support
from tests.support.builds import (
    UNREACHABLE,
    assert_identical,
    build_locally,
    builds,
    ok,
    shardyard,
    start,
)

pytestmark = pytest.mark.slow


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
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            if log.read_text().splitlines()[-1].endswith(": started"):
                return job, pids, log
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        time.sleep(0.02)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in raw if b"=" in e)


def test_it_builds_on_slurm_byte_identical_to_local_through_a_kill_and_a_requeue(cluster, tmp_path):
    corpus = tmp_path / "corpus"
    build_demo_corpus(corpus, max_bytes_per_source=150_000)
    work = tmp_path / "build"
    build_locally(work, corpus, _env(), tmp_path)
    local = tmp_path / "local"
    work.rename(local)  # the Slurm builds write the same paths (manifests name their inputs)

    slurm = ["--executor", "slurm", "--units-per-task", "2"]
    tokenize, annotate, pool, mix, materialize = builds(work, corpus)
    env = _env(cluster)

    # Tokenize: one task killed in the middle of a unit.
    build = start([*tokenize, *slurm], env, tmp_path)
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

    ok(shardyard([*annotate, *slurm], env, tmp_path))

    # Pool: one task requeued in the middle of a unit (as a preemption does).
    build = start([*pool, *slurm], env, tmp_path)
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
    said = ok(shardyard([*mix, *slurm, "--no-wait"], env, tmp_path))
    assert "slurm: submitted" in said
    said = ok(shardyard([*mix, *slurm], env, tmp_path))
    assert "mixture" in said
    assert len(json.loads((work / "mix.slurm" / "jobs.json").read_text())) == 1

    ok(shardyard([*materialize, *slurm], env, tmp_path))

    # A rerun of a finished build recognizes it and submits nothing.
    said = ok(shardyard([*tokenize, *slurm], env, tmp_path))
    assert "finished earlier" in said
    assert len(json.loads((work / "tok.slurm" / "jobs.json").read_text())) == 2

    assert_identical(work, local)
    assert not cluster.job_processes()

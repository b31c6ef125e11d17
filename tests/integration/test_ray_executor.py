"""Builds on a real Ray cluster (``tests.support.ray_head``: a head on loopback started by
the test): the demo corpus tokenized, pooled (exact shuffle), mixed and materialized by the
command line with one task per unit, a worker process killed in the middle of a unit; Ray
runs the task again and every artifact is byte-identical to the local build."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from shardcore.demo import build_demo_corpus
from tests.support.builds import (
    UNREACHABLE,
    assert_identical,
    build_locally,
    builds,
    ok,
    shardyard,
    start,
)
from tests.support.ray_head import RayHead

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def head():
    import tempfile

    # A short directory: Ray's unix sockets live under it (paths of at most 107 bytes).
    root = Path(tempfile.mkdtemp(prefix="sy-ray-", dir="/tmp"))
    h = RayHead(root)
    try:
        yield h
    finally:
        h.stop()
    assert not h.processes(), "Ray processes outlived the head"


def _text(log: Path) -> str:
    """A worker's log, or nothing when Ray removed it meanwhile (its worker ended)."""
    try:
        return log.read_text()
    except FileNotFoundError:
        return ""


def _catch_mid_unit(head: RayHead, build: subprocess.Popen, stage: str) -> tuple[int, str]:
    """Freeze a worker between a unit's start and its end; returns its pid and the log line
    of the unit it is in. Every worker is stopped before the logs are read (a unit of a few
    milliseconds cannot end between the read and the stop), the one whose log's last line
    says a unit of ``stage`` started is kept stopped, the others go on. A worker's log is
    named after its pid (``worker-<id>-<job>-<pid>.out``)."""
    while True:
        assert build.poll() is None, "the build ended before a worker was caught in a unit"
        logs = {int(log.stem.rsplit("-", 1)[-1]): log for log in head.logs().glob("worker-*.out")}
        stopped = []
        for pid in logs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        caught = None
        for pid in stopped:
            lines = _text(logs[pid]).splitlines()
            if lines and lines[-1].startswith(f"{stage} ") and lines[-1].endswith(": started"):
                caught = (pid, lines[-1])
                break
        for pid in stopped:
            if caught is None or pid != caught[0]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        if caught is not None:
            return caught
        time.sleep(0.01)


def test_it_builds_on_ray_byte_identical_to_local_with_a_worker_killed_mid_unit(head, tmp_path):
    corpus = tmp_path / "corpus"
    build_demo_corpus(corpus, max_bytes_per_source=150_000)
    work = tmp_path / "build"
    env = {**os.environ, **UNREACHABLE, **head.env()}
    build_locally(work, corpus, env, tmp_path)
    local = tmp_path / "local"
    work.rename(local)  # the Ray builds write the same paths (manifests name their inputs)

    ray = ["--executor", "ray", "--ray-address", head.address]
    tokenize, annotate, pool, mix, materialize = builds(work, corpus)
    ok(shardyard([*tokenize, *ray], env, tmp_path))
    ok(shardyard([*annotate, *ray], env, tmp_path))

    build = start([*pool, *ray], env, tmp_path)
    try:
        pid, line = _catch_mid_unit(head, build, "pool")
        os.kill(pid, signal.SIGKILL)
        out, err = build.communicate(timeout=900)
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
    assert build.returncode == 0, err[-4000:]
    unit = line.rsplit(":", 1)[0]
    # The killed unit ran again, on another worker, to its end.
    again = [log for log in head.logs().glob("worker-*.out") if f"{unit}: done in" in _text(log)]
    assert again and all(not log.stem.endswith(f"-{pid}") for log in again)

    ok(shardyard([*mix, *ray], env, tmp_path))
    ok(shardyard([*materialize, *ray], env, tmp_path))
    said = ok(shardyard([*tokenize, *ray], env, tmp_path))
    assert "finished earlier" in said
    assert_identical(work, local)

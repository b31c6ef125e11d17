"""The demo builds the executor tests run on each engine (tokenize, annotate, pool with
the exact shuffle, mix, materialize; small units and shards so that each phase has several), and
how they compare artifacts built by different engines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# The catalog's services as a compute node without access to them sees them: nothing
# listens there. A task that tried to reach them would fail.
UNREACHABLE = {
    "DATABASE_URL": "postgresql://postgres@127.0.0.1:9/unreachable",
    "CELERY_BROKER_URL": "redis://127.0.0.1:9/0",
}


def builds(work: Path, corpus: Path) -> list[list[str]]:
    """The five builds' command lines (without the executor's options)."""
    return [
        ["tokenize", str(corpus), "--out", str(work / "tok"), "--unit-size", "40KB",
         "--shard-size", "120KB", "--quiet"],
        ["annotate", str(work / "tok"), "--annotator", "quality", "--out", str(work / "ann")],
        ["pool", str(work / "tok"), "--out", str(work / "pool"), "--seq-len", "256",
         "--shuffle", "exact", "--seed", "3", "--memory", "1MiB", "--shard-size", "200KB",
         "--quiet"],
        ["mix", "--component", f"{work / 'pool'}:1", "--tokens", "300000", "--seed", "5",
         "--out", str(work / "mix")],
        ["materialize", str(work / "mix"), "--out", str(work / "mat"), "--shard-mb", "1"],
    ]  # fmt: skip


ARTIFACTS = ("tok", "ann", "pool", "mix", "mat")


def shardyard(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardcore.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "shardcore.cli", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout + done.stderr


def artifact_files(root: Path) -> dict[str, bytes]:
    """An artifact's files (its bookkeeping left out: the plan, and the units' markers,
    whose stats hold timings)."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.relative_to(root).as_posix().startswith(("_units/", "_plan.json"))
    }


def assert_identical(built: Path, reference: Path) -> None:
    """Every artifact under ``built`` has the files and bytes of the one under ``reference``."""
    for name in ARTIFACTS:
        ours, theirs = artifact_files(built / name), artifact_files(reference / name)
        assert sorted(ours) == sorted(theirs), name
        for rel, data in theirs.items():
            assert ours[rel] == data, f"{name}/{rel} differs from the local build"


def build_locally(work: Path, corpus: Path, env: dict[str, str], cwd: Path) -> None:
    for args in builds(work, corpus):
        ok(shardyard([*args, "--executor", "local"], env, cwd))

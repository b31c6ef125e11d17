"""A manifest.json nested thousands of levels deep (Python's JSON reader recurses once per
level) is refused as unreadable, naming the file, by every command that reads one: never a
RecursionError and its traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shardcore.manifest import ManifestError, read_manifest

ROOT = Path(__file__).resolve().parents[2]
WHY = "unreadable manifest: arrays or objects nested too deeply"


@pytest.fixture
def deep(tmp_path) -> Path:
    artifact = tmp_path / "tok"
    artifact.mkdir()
    depth = 100_000
    (artifact / "manifest.json").write_text(
        '{"format_version": 2, "kind": "tokenized", "x": ' + "[" * depth + "]" * depth + "}"
    )
    return artifact


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardcore.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, check=False)  # fmt: skip


def test_reading_it_names_the_file(deep):
    with pytest.raises(ManifestError, match=f"{deep / 'manifest.json'}: {WHY}"):
        read_manifest(deep)


def test_the_command_line_refuses_it_in_one_line(deep, tmp_path):
    run = _cli("pool", str(deep), "--seq-len", "64", "--out", str(tmp_path / "pool"))
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert f"{deep / 'manifest.json'}: {WHY}" in run.stderr
    assert not (tmp_path / "pool").exists()
    run = _cli("verify", str(deep))
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert f"{deep / 'manifest.json'}: {WHY}" in run.stdout + run.stderr

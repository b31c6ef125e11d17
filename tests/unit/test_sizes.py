"""shardcore.sizes: one reading of a byte size everywhere (MB = 10^6, MiB = 2^20)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shardcore.errors import InputError
from shardcore.sizes import parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("256MB", 256 * 10**6),
        ("256M", 256 * 10**6),
        ("256MiB", 256 << 20),
        ("256mib", 256 << 20),
        ("1GB", 10**9),
        ("1gib", 1 << 30),
        ("2TiB", 2 << 40),
        ("64k", 64_000),
        ("64KiB", 64 << 10),
        ("4096", 4096),
        ("4096B", 4096),
        (" 1.5MB ", 1_500_000),
        (1 << 30, 1 << 30),
    ],
)
def test_it_reads_si_and_iec_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["12QB", "", "MB", "-5MB", "1.2.3GB", "5 MBs", "1e6"])
def test_a_bad_size_is_refused_with_the_value_quoted(text):
    with pytest.raises(InputError, match="not a size: " + repr(text).replace(".", r"\.")):
        parse_size(text)


def test_the_error_names_the_setting_when_given():
    with pytest.raises(InputError, match=r"^--memory: not a size: '1 gallon'"):
        parse_size("1 gallon", name="--memory")
    with pytest.raises(InputError, match="negative size: -1"):
        parse_size(-1)


def test_the_command_line_reads_sizes_the_same_way(tmp_path):
    """tokenize's --shard-size and pool's --memory go through the same parser: the CLI
    refuses a bad one naming the option and the value, exit status 2."""
    for argv, option in (
        (
            ["tokenize", str(tmp_path), "--out", str(tmp_path / "t"), "--shard-size", "9XB"],
            "--shard-size",
        ),
        (
            [
                "pool",
                str(tmp_path),
                "--out",
                str(tmp_path / "p"),
                "--seq-len",
                "8",
                "--memory",
                "9XB",
            ],
            "--memory",
        ),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "shardcore.cli", *argv], capture_output=True, text=True
        )
        assert r.returncode == 2
        assert f"argument {option}: not a size: '9XB'" in r.stderr

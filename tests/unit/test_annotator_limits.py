"""Every numeric annotator parameter has a bound in ``shardcore.limits``: the command line
refuses a value past it with one line naming the annotator, the parameter and the range (no
traceback, no output folder), before any work; typed numbers read as everywhere else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shardcore import annotate, limits
from shardcore.errors import InputError
from shardcore.tokenize import tokenize
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("limits")
    src = write_jsonl(tmp / "stdlib.jsonl", stdlib_records(12))
    tokenize([str(src)], str(tmp / "tok"), shard_size=40_000)
    return tmp / "tok"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardcore.cli", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("annotator", "param", "why"),
    [
        ("minhash", "num_perm=4096", "parameter num_perm: 4096 is outside the allowed range [2, 1024]"),
        ("minhash", "seed=-1", "parameter seed: -1 is outside the allowed range [0, 4294967295]"),
        ("minhash", "seed=2e30", "parameter seed: 2000000000000000000000000000000 is outside"),
        ("minhash", "shingle=1e9", "parameter shingle: 1000000000 is outside the allowed range [1, 64]"),
        ("topics", "seed=-1", "parameter seed: -1 is outside the allowed range [0, 9223372036854775807]"),
        ("topics", "max_tokens=1e11", "parameter max_tokens: 100000000000 is outside the allowed range [1, 8192]"),
        ("lang_id", "max_chars=1.5", "parameter max_chars: 1.5 is not an integer"),
    ],
)  # fmt: skip
def test_the_command_line_refuses_a_parameter_past_its_bound_in_one_line(
    tokenized, tmp_path, annotator, param, why
):
    out = tmp_path / "ann"
    run = _cli("annotate", str(tokenized), "--annotator", annotator, "--param", param,
               "--out", str(out))  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and f"annotator {annotator!r} {why}" in lines[0], run.stderr
    assert not out.exists()


def test_every_numeric_parameter_of_every_built_in_annotator_has_a_bound():
    for name in annotate.BUILTIN:
        cls = annotate.get(name)
        numeric = {k for k, v in cls.defaults.items()
                   if isinstance(v, int | float) and not isinstance(v, bool)}  # fmt: skip
        assert numeric <= set(limits.ANNOTATOR_PARAMS.get(name, {})), name
        for key in numeric:
            low, high = limits.ANNOTATOR_PARAMS[name][key][:2]
            with pytest.raises(InputError, match=f"annotator '{name}' parameter {key}: "):
                annotate.create(name, {key: high * 2 + 1})
            with pytest.raises(InputError, match=f"parameter {key}: .* outside the allowed"):
                annotate.create(name, {key: low - 1})
        annotate.create(name)  # the defaults are within the bounds


def test_typed_numbers_read_as_everywhere_and_the_bounds_themselves_pass():
    cls = annotate.get("minhash")
    assert annotate.parse_params(cls, ["num_perm=1e3", "bands=1_000"]) == {
        "num_perm": 1000, "bands": 1000,
    }  # fmt: skip
    made = annotate.create("minhash", {"num_perm": 1024, "bands": 1024, "seed": 2**32 - 1})
    assert made.params["num_perm"] == 1024
    with pytest.raises(InputError, match="--param num_perm=abc: not a number"):
        annotate.parse_params(cls, ["num_perm=abc"])

"""Every numeric parameter is checked against its range (``shardcore.limits``) before any
work, from the command line as a user types it: ``shardyard pool --seq-len 99999999999``
printed a traceback ("Unable to allocate 373 GiB"), exited 1 and left a half-written pool
folder. Each case here runs the real ``shardyard`` process and checks one line on stderr
naming the parameter and its allowed range, exit status 2, and that no output folder was
made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardcore import limits
from shardcore.errors import InputError
from tests.unit import pool_fixtures as pf

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bounds")
    tokenized = pf.write_tokenized(tmp / "tok", pf.corpus("prose", 60), shard_docs=30)
    (tmp / "docs.jsonl").write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n"
                                            for i in range(5)))  # fmt: skip
    return {"tmp": tmp, "tokenized": str(tokenized), "jsonl": str(tmp / "docs.jsonl")}


def _shardyard(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "shardcore.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


RANGE_SEQ = f"[1, {limits.MAX_SEQ_LEN}]"
RANGE_SEED = f"[0, {limits.MAX_SEED}]"

POOL_CASES = [
    (["--seq-len", "99999999999"], f"seq_len: 99999999999 is outside the allowed range {RANGE_SEQ}"),
    (["--seq-len", "0"], f"seq_len: 0 is outside the allowed range {RANGE_SEQ}"),
    (["--seq-len", "64", "--val-fraction", "1.5"], "val_fraction: 1.5 is outside the allowed range [0, 0.5]"),
    (["--seq-len", "64", "--val-fraction", "nan"], "val_fraction: nan is outside the allowed range [0, 0.5]"),
    (["--seq-len", "64", "--memory", "1KiB"], f"memory: 1024 is outside the allowed range [{1 << 20}, {1 << 50}]"),
    (["--seq-len", "64", "--memory", "2000TiB"], "memory: 2199023255552000 is outside the allowed range"),
    (["--seq-len", "64", "--seed", "-1"], f"seed: -1 is outside the allowed range {RANGE_SEED}"),
    (["--seq-len", "64", "--seed", str(2**64)], f"seed: {2**64} is outside the allowed range {RANGE_SEED}"),
    (["--seq-len", "64", "--shard-size", "0"], "shard_size: 0 is outside the allowed range"),
    (["--seq-len", "64", "--workers", "5000"], "--workers: 5000 is outside the allowed range [1, 1024]"),
    (["--seq-len", "64", "--workers", "0"], "--workers: 0 is outside the allowed range [1, 1024]"),
    (["--seq-len", "64", "--shuffle", "grid", "--grid-columns", "0"], "shuffle_options.columns: 0 is outside the allowed range"),
    (["--seq-len", "64", "--shuffle", "buffer", "--buffer", str(2**40)], "shuffle_options.buffer: 1099511627776 is outside the allowed range"),
]  # fmt: skip


@pytest.mark.parametrize("args, message", POOL_CASES)
def test_the_pool_command_refuses_an_out_of_range_number_before_any_work(
    inputs, tmp_path, args, message
):
    out = tmp_path / "pool"
    done = _shardyard("pool", inputs["tokenized"], "--out", str(out), *args, "--quiet",
                      cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("shardyard pool: error: ") and message in done.stderr
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))


def test_a_pool_within_the_ranges_still_builds(inputs, tmp_path):
    out = tmp_path / "pool"
    done = _shardyard("pool", inputs["tokenized"], "--out", str(out), "--seq-len", "64",
                      "--memory", "1MiB", "--workers", "2", "--quiet", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (out / "manifest.json").is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shard-size", "10"], "shard_size: 10 is outside the allowed range [1024, "),
        (["--unit-size", "0"], "unit_bytes: 0 is outside the allowed range [1, "),
        (["--workers", "100000"], "--workers: 100000 is outside the allowed range [1, 1024]"),
    ],
)
def test_the_tokenize_command_refuses_an_out_of_range_number(inputs, tmp_path, args, message):
    out = tmp_path / "tok"
    done = _shardyard("tokenize", inputs["jsonl"], "--out", str(out), *args, "--quiet",
                      cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tokens", str(2**70)], "tokens: 1180591620717411303424 is outside the allowed range [1, 4611686018427387904]"),
        (["--tokens", "1000", "--seed", "-3"], f"seed: -3 is outside the allowed range {RANGE_SEED}"),
        (["--tokens", "1000", "--max-repetitions", "1e13"], "max_repetitions: 10000000000000 is outside the allowed range (0, 1e+12]"),
        (["--tokens", "1000", "--global-batch-size", str(2**40)], "global_batch_size: 1099511627776 is outside the allowed range"),
    ],
)  # fmt: skip
def test_the_mix_command_refuses_an_out_of_range_number(inputs, tmp_path, args, message):
    out = tmp_path / "mix"
    done = _shardyard("mix", "--component", f"{inputs['tokenized']}:1", "--out", str(out),
                      *args, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not out.exists()


def test_a_spec_weight_out_of_range_is_refused_naming_it(inputs, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tokens": 1000, "components": [
        {"pool": inputs["tokenized"], "weight": 1}, {"pool": "other", "weight": 1e300}]}))  # fmt: skip
    done = _shardyard("mix", "--spec", str(spec), "--out", str(tmp_path / "m"), cwd=tmp_path)
    assert done.returncode == 2
    assert "components[1].weight: 1e+300 is outside the allowed range (0, 1e+12]" in done.stderr


@pytest.mark.parametrize(
    "value, ok",
    [(1, True), (limits.MAX_SEQ_LEN, True), (2.0, True), (0, False), (True, False),
     (2.5, False), ("8", False), (float("inf"), False), (limits.MAX_SEQ_LEN + 1, False)],
)  # fmt: skip
def test_check_int_takes_whole_numbers_in_range_only(value, ok):
    if ok:
        assert limits.seq_len(value) == int(value)
    else:
        with pytest.raises(InputError, match=r"^seq_len: .* \[1, 1048576\]"):
            limits.seq_len(value)

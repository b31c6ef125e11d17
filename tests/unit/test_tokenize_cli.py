"""``shardyard tokenize`` and ``shardyard verify`` through the installed console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from shardcore.manifest import read_manifest
from tests.unit.tokenize_fixtures import jsonl_bytes, stdlib_records, write_jsonl


def _shardyard(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "shardyard"
    cmd = [str(script)] if script.exists() else [shutil.which("shardyard") or "shardyard"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)


def test_it_tokenizes_verifies_and_catches_corruption_from_the_command_line(tmp_path):
    recs = stdlib_records(16)
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "a.jsonl.zst", recs[:8], "zstd")
    bad = jsonl_bytes(recs[8:]) + b'{"text": ""}\n'
    (tmp_path / "in" / "b.jsonl").write_bytes(bad)
    out = tmp_path / "out"
    r = _shardyard(
        "tokenize",
        str(tmp_path / "in"),
        "--out",
        str(out),
        "--workers",
        "2",
        "--shard-size",
        "20kB",
    )
    assert r.returncode == 0, r.stderr
    assert "16 documents, " in r.stdout
    assert f"{tmp_path}/in/b.jsonl: empty_document: 1" in r.stdout
    assert f"{tmp_path}/in/b.jsonl:9: 'text' is empty or whitespace" in r.stdout
    assert "docs" in r.stderr and "tokens" in r.stderr and "MB/s" in r.stderr and "ETA" in r.stderr
    m = read_manifest(out)
    assert len(m["shards"]) > 2
    assert m["params"]["shard_size"] == 20_000

    r = _shardyard("verify", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"ok: tokenized at {out}: {len(m['files'])} files")

    shard = m["shards"][-1]["prefix"]
    data = bytearray((out / f"{shard}.bin").read_bytes())
    data[100] ^= 1
    (out / f"{shard}.bin").write_bytes(bytes(data))
    r = _shardyard("verify", str(out))
    assert r.returncode == 1
    assert f"{shard}.bin at byte 0: checksum mismatch in bytes [0, 4096)" in r.stderr

    r = _shardyard("tokenize", str(tmp_path / "in"), "--out", str(out))
    assert r.returncode == 2
    assert "already holds a finished artifact" in r.stderr


def test_it_stops_at_bad_input_with_strict(tmp_path):
    (tmp_path / "x.jsonl").write_bytes(jsonl_bytes(stdlib_records(2)) + b"{not json}\n")
    r = _shardyard("tokenize", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "o"), "--strict")
    assert r.returncode == 2
    assert r.stderr.strip().endswith(
        f"shardyard tokenize: error: {tmp_path}/x.jsonl:3: invalid_json: "
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )


def test_it_explains_a_bad_tokenizer_spec_in_one_line(tmp_path):
    write_jsonl(tmp_path / "x.jsonl", stdlib_records(1))
    r = _shardyard(
        "tokenize", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "o"), "--tokenizer", "gpt2"
    )
    assert r.returncode == 2
    assert "expected 'tiktoken:<encoding>' or 'hf:<path>'" in r.stderr
    assert "Traceback" not in r.stderr

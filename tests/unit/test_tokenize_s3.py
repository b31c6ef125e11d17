"""Sources on S3 (a local moto_server on 127.0.0.1) tokenize like the same files on disk."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shardcore.errors import InputError
from shardcore.tokenize import tokenize
from shardcore.tokenized import TokenizedSource
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl, write_parquet


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    server = Path(sys.executable).parent / "moto_server"
    port = _free_port()
    proc = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not start on port {port}") from None
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    # Environment, not storage options: spawned worker processes inherit it.
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_endpoint})
    bucket = f"src-{time.monotonic_ns()}"
    fs.mkdir(bucket)
    return fs, bucket


def test_it_tokenizes_s3_sources_like_local_files(tmp_path, s3):
    fs, bucket = s3
    recs = stdlib_records(18)
    local = tmp_path / "local"
    local.mkdir()
    files = [
        write_jsonl(local / "a.jsonl", recs[:8]),
        write_jsonl(local / "b.jsonl.zst", recs[8:13], "zstd"),
        write_parquet(local / "c.parquet", recs[13:]),
    ]
    for f in files:
        fs.put(str(f), f"{bucket}/src/{f.name}")
    opts = dict(shard_size=30_000, unit_bytes=12_000)  # a.jsonl splits into byte ranges
    m_s3 = tokenize([f"s3://{bucket}/src/"], str(tmp_path / "from_s3"), workers=2, **opts)
    m_local = tokenize([str(local)], str(tmp_path / "from_disk"), **opts)
    assert [i["file"] for i in m_s3["inputs"]] == [f"s3://{bucket}/src/{f.name}" for f in files]
    assert m_s3["totals"] == m_local["totals"]
    assert m_s3["bad_input"] == {}
    a, b = TokenizedSource(tmp_path / "from_s3"), TokenizedSource(tmp_path / "from_disk")
    assert a.num_documents == 18
    for i in range(18):
        assert np.array_equal(a.tokens(i), b.tokens(i))
    da, db = a.documents().to_pylist(), b.documents().to_pylist()
    for x, y in zip(da, db, strict=True):
        assert x["file"].rsplit("/", 1)[1] == Path(y["file"]).name
        assert {k: v for k, v in x.items() if k != "file"} == {
            k: v for k, v in y.items() if k != "file"
        }


def test_it_refuses_a_missing_s3_object_before_any_work(tmp_path, s3):
    fs, bucket = s3
    url = f"s3://{bucket}/nope.jsonl"
    with pytest.raises(InputError, match=f"{url}: no such file or directory"):
        tokenize([url], str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()

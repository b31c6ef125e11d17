"""Sources on S3 (a local moto_server on 127.0.0.1) tokenize like the same files on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shardcore.errors import InputError
from shardcore.tokenize import tokenize
from shardcore.tokenized import TokenizedSource
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl, write_parquet


@pytest.fixture
def s3(s3_bucket, moto_server):
    """(an s3fs file system on moto's server, the bucket name); the environment holds the
    endpoint and credentials, which spawned worker processes inherit."""
    import s3fs

    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": moto_server.endpoint})
    return fs, s3_bucket.removeprefix("s3://")


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

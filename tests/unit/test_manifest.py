"""Manifests of format 3 (a JSON header plus the shard table and block checksums it
checksums) and the format-2 artifacts written before them, which still read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from shardcore import formats
from shardcore import manifest as mf
from shardcore.errors import ManifestError
from shardcore.locate import locate_any, locate_pool
from shardcore.pool import PoolReader
from shardcore.tokenized import TokenizedSource
from shardcore.verify import verify
from tests.unit.manifest_fixtures import format2_document

# Built by the code before format 3 (main at f74f716) with `shardyard tokenize` and
# `shardyard pool --seq-len 16 --shard-size 1500 --memory 1MiB`: 60 documents, 5 shards.
FORMAT2 = Path(__file__).parent / "data" / "format2"


def _shards(n: int, prefixes: list[str] | None = None) -> dict:
    rng = np.random.default_rng(n)
    records = rng.integers(1, 9, n).tolist()
    cumulative = np.concatenate([[0], np.cumsum(records)]).tolist()
    prefixes = prefixes or [f"shards/pool-{i:05d}" for i in range(n)]
    shards = [
        {"prefix": p, "records": r, "first_record": c, "documents": r + 1}
        for p, r, c in zip(prefixes, records, cumulative, strict=False)
    ]
    files = [{"path": "documents.parquet", "size": 5, "xxh3": f"{7:016x}", "block_size": 4096,
              "blocks": f"{7:016x}"}]  # fmt: skip
    for i, p in enumerate(prefixes):
        for sfx, nblocks in ((".bin", 3), (".idx", 1)):
            blocks = "".join(
                f"{(i * 10 + k) * 0x0101010101010101 % 2**64:016x}" for k in range(nblocks)
            )
            size = 4096 * (nblocks - 1) + 1 + i
            files.append({"path": p + sfx, "size": size, "xxh3": f"{i * 977 + nblocks:016x}",
                          "block_size": 4096, "blocks": blocks})  # fmt: skip
    files.sort(key=lambda e: e["path"])
    return {"kind": "pool", "fingerprint": "f" * 32, "seq_len": 4, "num_records": cumulative[-1],
            "shards": shards, "cumulative_records": cumulative, "files": files}  # fmt: skip


@pytest.mark.parametrize(
    "prefixes",
    [
        None,  # the pool's names: a pattern and integer keys
        [f"shards/{i // 1000:03d}/pool-{i:07d}" for i in range(0, 3000, 7)],  # fanned out
        [f"shards/{name}" for name in ("zeta", "alpha", "m-3", "b")],  # no pattern: stored
    ],
)
def test_it_reads_back_what_it_wrote_with_the_header_written_last(tmp_path, prefixes):
    n = len(prefixes) if prefixes else 700
    written = _shards(n, prefixes)
    mf.write_manifest(tmp_path, written)
    header = json.loads((tmp_path / mf.MANIFEST_NAME).read_text())
    assert header["format_version"] == 3 and "shards" not in header and "files" not in header
    names = header[mf.LAYOUT]["names"]
    if prefixes is None:
        assert names == {"pattern": "shards/pool-{key:05d}"}
    elif "/000/" in prefixes[0]:
        assert names["fanout"] == 1000
    else:
        assert names is None and "name_bytes" in header[mf.LAYOUT]["table"]["columns"]
    m = mf.read_manifest(tmp_path)
    assert m["shards"] == written["shards"] and len(m["shards"]) == n
    assert m["cumulative_records"] == written["cumulative_records"]
    # Block checksums included; in path order where the shards are (names are not here).
    assert sorted(m["files"], key=lambda e: e["path"]) == written["files"]
    assert prefixes is not None or m["files"] == written["files"]
    assert mf.content_digest(m) == mf.content_digest(written)
    assert mf.total_bytes(m) == sum(e["size"] for e in written["files"])
    by_path = mf.files_by_path(m)
    for e in written["files"][:: max(1, n // 17)]:
        assert by_path[e["path"]] == e and e["path"] in by_path
    assert "shards/nope.bin" not in by_path and by_path.get("shards/pool-99999999.bin") is None
    for sample in range(0, written["num_records"], 13):
        where = locate_pool(m, sample=sample)
        k = where["shard"]
        assert written["cumulative_records"][k] <= sample < written["cumulative_records"][k + 1]
        assert where["shard_prefix"] == written["shards"][k]["prefix"]
    # Writing a manifest read back gives the same files byte for byte.
    again = tmp_path / "again"
    mf.write_manifest(again, m)
    for name in mf.MANIFEST_FILES:
        assert (again / name).read_bytes() == (tmp_path / name).read_bytes(), name


def test_a_damaged_or_missing_table_is_named(tmp_path):
    mf.write_manifest(tmp_path, _shards(50))
    table = tmp_path / mf.TABLE_NAME
    data = bytearray(table.read_bytes())
    data[100] ^= 1
    table.write_bytes(bytes(data))
    (problem,) = verify(tmp_path, content=False).problems
    assert problem.path == mf.TABLE_NAME and "xxh3" in problem.message
    table.write_bytes(bytes(data[:-64]))
    with pytest.raises(ManifestError, match=f"{mf.TABLE_NAME}: .* bytes, .* says"):
        mf.read_manifest(tmp_path)
    table.unlink()
    with pytest.raises(ManifestError, match=f"{mf.TABLE_NAME}: missing"):
        mf.read_manifest(tmp_path)


def test_the_fingerprint_keeps_the_data_format_version():
    """Format 3 changed how manifests are stored, not the data: an artifact built again
    keeps its fingerprint."""
    assert mf.FORMAT_VERSION == 3 and mf.FINGERPRINT_FORMAT == 2
    assert mf.fingerprint("pool", parents=["a"], params={"x": 1}) == (
        __import__("xxhash").xxh3_128_hexdigest(
            mf.canonical_json({"kind": "pool", "format": 2, "parents": ["a"], "params": {"x": 1}})
        )
    )


def test_names_follow_a_pattern_only_when_every_shard_does():
    names, keys = formats.infer_names(["a/s-001", "a/s-002", "a/s-010"])
    assert names == {"pattern": "a/s-{key:03d}"} and keys.tolist() == [1, 2, 10]
    assert formats.infer_names(["a/s-001", "a/t-002"]) is None
    assert formats.infer_names(["a/s-1", "a/s-002"]) is None
    fan = [f"x/{k // 256:02d}/p{k:06d}" for k in (0, 255, 256, 70000)]
    names, keys = formats.infer_names(fan)
    assert names["fanout"] == 256 and [formats.shard_name(names, k) for k in keys] == fan


def test_format2_artifacts_built_before_still_read_verify_and_locate(tmp_path):
    root = tmp_path / "format2"
    shutil.copytree(FORMAT2, root)
    for rel in ("tok", "pool"):
        assert json.loads((root / rel / mf.MANIFEST_NAME).read_text())["format_version"] == 2
        assert not (root / rel / mf.TABLE_NAME).exists()
        report = verify(root / rel)
        assert report.ok and report.files_checked > 0, report.problems
    m = mf.read_manifest(root / "pool")
    assert isinstance(m["shards"], list) and len(m["shards"]) == 5
    # The answer `shardyard locate` gave on the code that built it.
    assert locate_any(root / "pool", sample=50) == {
        "shard": 2, "shard_prefix": "shards/pool-00002", "record": 50, "record_in_shard": 1,
        "token_offset": 0,
    }  # fmt: skip
    pool = PoolReader(root / "pool")
    assert pool.num_records == 97 and pool.num_shards == 5
    assert pool.records(0, 97).shape == (97, 17)
    assert TokenizedSource(root / "tok").num_documents == 60
    # The same artifact with a format-3 manifest: same answers, same digest.
    doc = format2_document(m)
    mf.write_manifest(tmp_path / "v3", doc)
    v3 = mf.read_manifest(tmp_path / "v3")
    assert mf.content_digest(v3) == mf.content_digest(m)
    assert v3["shards"] == m["shards"] and v3["files"] == m["files"]
    for s in range(97):
        assert locate_pool(v3, sample=s) == locate_pool(m, sample=s)

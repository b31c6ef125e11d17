"""verify re-reads every file of an artifact and names the file and offset of corruption."""

from __future__ import annotations

import shutil

import pytest

from shardcore.manifest import read_manifest, write_manifest
from shardcore.tokenize import tokenize
from shardcore.verify import block_size_for, file_entry, verify
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verify")
    src = write_jsonl(tmp / "s.jsonl", stdlib_records(24))
    tokenize([str(src)], str(tmp / "ref"), shard_size=30_000)
    return tmp / "ref"


@pytest.fixture
def copy(built, tmp_path):
    dst = tmp_path / "art"
    shutil.copytree(built, dst)
    return dst


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def test_it_passes_an_intact_tokenized_source(built):
    report = verify(built)
    assert report.ok, report.problems
    assert report.kind == "tokenized"
    m = read_manifest(built)
    assert report.files_checked == len(m["files"]) == 3 * len(m["shards"])


def test_it_names_the_shard_and_offset_of_a_flipped_byte(copy):
    m = read_manifest(copy)
    shard = m["shards"][1]["prefix"]
    path = copy / f"{shard}.bin"
    offset = 20_001
    _flip(path, offset)
    report = verify(copy)
    assert not report.ok
    first = report.problems[0]
    assert first.path == f"{shard}.bin"
    bs = block_size_for(path.stat().st_size)
    assert first.offset == offset - offset % bs
    assert first.offset <= offset < first.offset + bs
    assert f"checksum mismatch in bytes [{first.offset}, " in first.message
    assert f"{shard}.bin at byte {first.offset}" in str(first)


def test_it_pinpoints_a_broken_end_of_document_exactly(copy):
    m = read_manifest(copy)
    shard = m["shards"][0]["prefix"]
    from shardcore.formats import IndexedReader

    r = IndexedReader(copy / shard)
    end = int(r.index.pointers[3]) + 4 * (int(r.lengths[3]) - 1)  # EOS of document 3
    del r
    _flip(copy / f"{shard}.bin", end)
    problems = verify(copy).problems
    assert [(p.path, p.offset, p.message) for p in problems[1:]] == [
        (f"{shard}.bin", end, "document 3 does not end with EOS 100257"),
        # 100257 ^ 0x40 = 100321, above cl100k's last id
        (f"{shard}.bin", end, "token id 100321 is outside the vocabulary [0, 100277)"),
    ]


def test_it_reports_a_damaged_index_and_a_missing_file(copy):
    m = read_manifest(copy)
    _flip(copy / f"{m['shards'][0]['prefix']}.idx", 2)
    (copy / f"{m['shards'][1]['prefix']}.docs.parquet").unlink()
    msgs = [str(p) for p in verify(copy).problems]
    assert f"{m['shards'][0]['prefix']}.idx at byte 0: checksum mismatch in bytes [0, " in msgs[0]
    assert f"{m['shards'][1]['prefix']}.docs.parquet: missing" in msgs
    assert any("bad magic" in s for s in msgs)


def test_it_verifies_any_kind_of_artifact_by_its_file_list(tmp_path):
    (tmp_path / "part").mkdir()
    (tmp_path / "part" / "a.txt").write_bytes(b"records " * 5000)
    write_manifest(tmp_path, {"kind": "other", "files": [file_entry(tmp_path, "part/a.txt")]})
    assert verify(tmp_path).ok
    _flip(tmp_path / "part" / "a.txt", 39_000)
    (problem,) = verify(tmp_path).problems
    assert (problem.path, problem.offset) == ("part/a.txt", 36_864)  # 4,096-byte blocks


def test_it_reports_a_directory_without_manifest(tmp_path):
    (problem,) = verify(tmp_path).problems
    assert problem.path == "manifest.json"
    assert "no manifest.json" in problem.message

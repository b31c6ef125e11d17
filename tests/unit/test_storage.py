"""The storage layer reads and writes a local directory and an S3 prefix (moto's real
server) the same way, and never shows a partial object under its final name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardcore import manifest as mf
from shardcore import storage, verify
from shardcore.errors import CorruptDataError, ManifestError

TEXT = (
    b"Return a new array of bytes. The bytearray class is a mutable sequence of integers "
    b"in the range 0 <= x < 256.\n"
)


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return storage.open_store(tmp_path / "root")
    bucket = request.getfixturevalue("s3_bucket")
    return storage.S3Store(f"{bucket}/some/prefix", part_size=5 << 20)


def test_it_reads_back_what_it_wrote_whole_and_by_range(store):
    store.put_bytes("a/b.txt", TEXT)
    assert store.exists("a/b.txt") and not store.exists("a/c.txt")
    assert store.read_bytes("a/b.txt") == TEXT
    assert store.read_range("a/b.txt", 7, 20) == TEXT[7:20]
    assert store.read_range("a/b.txt", len(TEXT) - 3, len(TEXT) + 50) == TEXT[-3:]
    assert store.size("a/b.txt") == len(TEXT)
    with store.open("a/b.txt") as f:
        assert f.read() == TEXT
    store.put_bytes("z.bin", b"\x00\x01")
    assert store.list() == ["a/b.txt", "z.bin"]
    assert store.list("a") == ["a/b.txt"]
    assert store.sizes() == {"a/b.txt": len(TEXT), "z.bin": 2}
    store.delete("z.bin")
    store.delete("never-written")
    assert store.list() == ["a/b.txt"]
    with pytest.raises(FileNotFoundError, match="c.txt"):
        store.read_bytes("a/c.txt")


def test_it_streams_a_large_object_in_parts_and_shows_it_only_when_complete(store, tmp_path):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, size=(12 << 20) + 12345, dtype=np.uint8).tobytes()
    with store.writer("big/obj.bin") as w:
        for i in range(0, len(data), 3 << 20):
            w.write(data[i : i + (3 << 20)])
            assert not store.exists("big/obj.bin")
    assert store.read_bytes("big/obj.bin") == data
    assert store.read_range("big/obj.bin", 6 << 20, (6 << 20) + 100) == data[6 << 20 :][:100]
    src = tmp_path / "src.bin"
    src.write_bytes(data[::-1])
    store.put_file("big/put.bin", src)
    store.get_file("big/put.bin", tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == data[::-1]
    if isinstance(store, storage.S3Store):
        assert store.multipart_uploads() == []


def test_an_interrupted_write_leaves_no_object_and_no_pending_upload(store):
    chunk = bytes(range(256)) * 4096  # 1 MiB
    with pytest.raises(RuntimeError, match="interrupted"), store.writer("part/obj.bin") as w:
        for _ in range(11):  # past two 5 MiB parts on S3
            w.write(chunk)
        raise RuntimeError("interrupted")
    assert not store.exists("part/obj.bin")
    assert store.list() == []
    if isinstance(store, storage.S3Store):
        assert store.multipart_uploads() == []


def _artifact(store, tmp_path):
    """A small artifact written through a store: two files, then the manifest."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.bin").write_bytes(TEXT * 50)
    (work / "sub").mkdir()
    (work / "sub" / "other.txt").write_bytes(TEXT)
    files = [verify.file_entry(work, rel) for rel in ("data.bin", "sub/other.txt")]
    for rel in ("data.bin", "sub/other.txt"):
        store.put_file(rel, work / rel)
    manifest = {"format_version": mf.FORMAT_VERSION, "kind": "test", "files": files}
    store.put_bytes(mf.MANIFEST_NAME, json.dumps(manifest).encode())
    return manifest


def test_it_copies_a_remote_artifact_checked_against_its_manifest(s3_bucket, tmp_path):
    url = f"{s3_bucket}/art"
    store = storage.open_store(url)
    with pytest.raises(ManifestError, match=f"{url}: no such artifact"):
        storage.local_artifact(url, cache_dir=tmp_path / "cache")
    store.put_bytes("data.bin", b"unfinished")
    with pytest.raises(ManifestError, match="build did not finish"):
        mf.read_manifest(url)
    manifest = _artifact(store, tmp_path)
    assert mf.read_manifest(url) == manifest and mf.is_complete(url)
    local = storage.local_artifact(url, cache_dir=tmp_path / "cache")
    assert (tmp_path / "work" / "data.bin").read_bytes() == open(f"{local}/data.bin", "rb").read()
    assert mf.read_manifest(local) == manifest
    assert verify.verify(local).ok
    # A corrupted object is refused by name and never lands in the cache.
    store.put_bytes("sub/other.txt", TEXT.replace(b"mutable", b"MUTABLE"))
    with pytest.raises(CorruptDataError, match=f"{url}/sub/other.txt: checksum"):
        storage.local_artifact(url, cache_dir=tmp_path / "cache2")
    assert not (tmp_path / "cache2").exists() or not list((tmp_path / "cache2").rglob("*.json"))


def test_it_names_locations_the_same_way_for_both_kinds(tmp_path):
    assert storage.resolve("s3://bucket/a/b/") == "s3://bucket/a/b"
    assert storage.join("s3://bucket/a", "m", "x.bin") == "s3://bucket/a/m/x.bin"
    assert storage.resolve("file://" + str(tmp_path)) == str(tmp_path)
    assert not storage.is_remote(tmp_path) and storage.is_remote("s3://b/k")
    with pytest.raises(ValueError, match="unsupported storage scheme 'gs'"):
        storage.resolve("gs://bucket/x")

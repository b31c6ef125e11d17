"""The storage layer reads and writes a local directory and an S3 prefix (moto's real
server) the same way, and never shows a partial object under its final name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shardcore import config, storage, verify
from shardcore import manifest as mf
from shardcore.errors import CorruptDataError, InputError, ManifestError
from shardcore.storage import artifact_cache

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
    manifest = {"format_version": mf.FORMAT_VERSION, "kind": "test", "files": files}
    mf.write_manifest(work, manifest)
    for rel in ("data.bin", "sub/other.txt", mf.TABLE_NAME, mf.BLOCKS_NAME):
        store.put_file(rel, work / rel)
    store.put_bytes(mf.MANIFEST_NAME, (work / mf.MANIFEST_NAME).read_bytes())
    return manifest


def test_it_copies_a_remote_artifact_checked_against_its_manifest(s3_bucket, tmp_path):
    url = f"{s3_bucket}/art"
    store = storage.open_store(url)
    with pytest.raises(ManifestError, match=f"{url}: no such artifact"):
        artifact_cache.local_artifact(url, cache_dir=tmp_path / "cache")
    store.put_bytes("data.bin", b"unfinished")
    with pytest.raises(ManifestError, match="build did not finish"):
        mf.read_manifest(url)
    manifest = _artifact(store, tmp_path)
    read = mf.read_manifest(url)
    assert read["files"] == manifest["files"] and read["kind"] == "test" and mf.is_complete(url)
    local = artifact_cache.local_artifact(url, cache_dir=tmp_path / "cache")
    assert (tmp_path / "work" / "data.bin").read_bytes() == open(f"{local}/data.bin", "rb").read()
    assert mf.read_manifest(local)["files"] == manifest["files"]
    assert verify.verify(local).ok
    # A corrupted object is refused by name and never lands in the cache.
    store.put_bytes("sub/other.txt", TEXT.replace(b"mutable", b"MUTABLE"))
    with pytest.raises(CorruptDataError, match=f"{url}/sub/other.txt: checksum"):
        artifact_cache.local_artifact(url, cache_dir=tmp_path / "cache2")
    assert not (tmp_path / "cache2").exists() or not list((tmp_path / "cache2").rglob("*.json"))


def test_it_names_locations_the_same_way_for_both_kinds(tmp_path):
    assert storage.resolve("s3://bucket/a/b/") == "s3://bucket/a/b"
    assert storage.join("s3://bucket/a", "m", "x.bin") == "s3://bucket/a/m/x.bin"
    assert storage.resolve("file://" + str(tmp_path)) == str(tmp_path)
    assert not storage.is_remote(tmp_path) and storage.is_remote("s3://b/k")
    with pytest.raises(ValueError, match="unsupported storage scheme 'gs'"):
        storage.resolve("gs://bucket/x")


# --------------------------------------------------------------------------- artifact cache


def _blob(s3_bucket, tmp_path, name, *, files=3, size=4000):
    """An artifact of ``files`` files of ``size`` random bytes on the bucket; its URL."""
    rng = np.random.default_rng(int.from_bytes(name.encode(), "little"))
    work = tmp_path / "blobs" / name
    work.mkdir(parents=True)
    rels = [f"part-{i}.bin" for i in range(files)]
    for rel in rels:
        (work / rel).write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    manifest = {  # format 2: one JSON document, as artifacts written before format 3
        "format_version": 2,
        "kind": "test",
        "files": [verify.file_entry(work, rel) for rel in rels],
    }
    (work / mf.MANIFEST_NAME).write_text(json.dumps(manifest))
    url = f"{s3_bucket}/{name}"
    artifact_cache.publish_directory(work, url)
    return url


def _copy_bytes(url):
    """What a copy of ``url`` takes in the cache: its files and its manifest."""
    store = storage.open_store(url)
    return sum(store.sizes().values())


def _cached(cache):
    """The copies (keys) present and complete in the cache directory."""
    return {p.parent.name for p in cache.glob(f"*/{mf.MANIFEST_NAME}")}


def _key(url, cache):
    with artifact_cache.artifact_copy(url, cache_dir=cache, limit="none") as copy:
        return os.path.basename(copy.path)


# A process that takes a copy, says so, and holds it until its stdin closes; with "kill",
# one that is killed (SIGKILL) halfway through writing the second file of its download.
_HOLD = """
import os, signal, sys
from pathlib import Path
from shardcore import atomic
from shardcore.storage import artifact_cache

url, cache, mode = sys.argv[1:4]
if mode == "kill":
    real, seen = artifact_cache.download_checked, []

    def download_checked(store, entry, dest):
        seen.append(dest)
        if len(seen) < 2:
            return real(store, entry, dest)
        data = store.read_bytes(entry["path"])
        with open(atomic.temp_path(dest), "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    artifact_cache.download_checked = download_checked
copy = artifact_cache.artifact_copy(url, cache_dir=cache)
print(copy.path, flush=True)
sys.stdin.read()
"""


def _holder(url, cache, mode="hold", limit="none"):
    env = {**os.environ, "SHARDYARD_ARTIFACT_CACHE_LIMIT": str(limit)}
    return subprocess.Popen(
        [sys.executable, "-c", _HOLD, url, str(cache), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_the_artifact_cache_limit_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("SHARDYARD_ARTIFACT_CACHE_LIMIT", raising=False)
    assert config.artifact_cache_limit() == 64 << 30
    monkeypatch.setenv("SHARDYARD_ARTIFACT_CACHE_LIMIT", "1.5GiB")
    assert config.artifact_cache_limit() == 3 << 29
    monkeypatch.setenv("SHARDYARD_ARTIFACT_CACHE_LIMIT", "None")
    assert config.artifact_cache_limit() is None
    assert config.artifact_cache_limit("20kB") == 20_000
    monkeypatch.setenv("SHARDYARD_ARTIFACT_CACHE_LIMIT", "lots")
    with pytest.raises(InputError, match="SHARDYARD_ARTIFACT_CACHE_LIMIT: not a size: 'lots'"):
        config.artifact_cache_limit()
    with pytest.raises(InputError, match="must be a positive size or none"):
        config.artifact_cache_limit("0")


def test_the_least_recently_used_copies_are_evicted_to_make_room(s3_bucket, tmp_path):
    cache = tmp_path / "cache"
    a, b, c = (_blob(s3_bucket, tmp_path, n) for n in "abc")
    one = _copy_bytes(a)
    keys = {u: _key(u, tmp_path / "keys") for u in (a, b, c)}
    limit = 2 * one + one // 2  # two copies fit, three do not
    artifact_cache.artifact_copy(a, cache_dir=cache, limit=limit).close()
    time.sleep(0.05)  # distinct modification times, whatever the filesystem's clock
    artifact_cache.artifact_copy(b, cache_dir=cache, limit=limit).close()
    time.sleep(0.05)
    with artifact_cache.artifact_copy(a, cache_dir=cache, limit=limit) as copy:  # a is used again
        assert verify.verify(copy.path).ok
    time.sleep(0.05)
    artifact_cache.artifact_copy(c, cache_dir=cache, limit=limit).close()
    assert _cached(cache) == {keys[a], keys[c]}  # b, the least recently used, went
    assert not (cache / f"{keys[b]}.lock").exists()
    time.sleep(0.05)
    local = artifact_cache.local_artifact(b, cache_dir=cache, limit=limit)  # fetched again
    assert verify.verify(local).ok
    assert _cached(cache) == {keys[c], keys[b]}
    assert sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) <= limit


def test_a_copy_another_process_holds_is_never_evicted(s3_bucket, tmp_path):
    cache = tmp_path / "cache"
    a, b, c = (_blob(s3_bucket, tmp_path, n) for n in "abc")
    keys = {u: _key(u, tmp_path / "keys") for u in (a, b, c)}
    limit = 2 * _copy_bytes(a) + _copy_bytes(a) // 2
    holder = _holder(a, cache)  # takes a first: the least recently used
    try:
        assert holder.stdout.readline().strip() == str(cache / keys[a])
        time.sleep(0.05)
        artifact_cache.artifact_copy(b, cache_dir=cache, limit=limit).close()
        time.sleep(0.05)
        artifact_cache.artifact_copy(c, cache_dir=cache, limit=limit).close()
        assert _cached(cache) == {keys[a], keys[c]}  # b went, not the older a, held
        with artifact_cache.artifact_scope():
            artifact_cache.local_artifact(b, cache_dir=cache, limit=limit)  # c goes
            # Every other copy is in use: the directory goes over the limit for now.
            artifact_cache.local_artifact(c, cache_dir=cache, limit=limit)
            assert _cached(cache) == {keys[a], keys[b], keys[c]}
            assert verify.verify(cache / keys[a]).ok
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    # Released by both: the next download evicts the least recently used (a).
    _blob(s3_bucket, tmp_path, "d")
    artifact_cache.artifact_copy(f"{s3_bucket}/d", cache_dir=cache, limit=limit).close()
    assert keys[a] not in _cached(cache) and len(_cached(cache)) == 2


def test_a_copy_larger_than_the_limit_is_refused_with_the_numbers(s3_bucket, tmp_path):
    url = _blob(s3_bucket, tmp_path, "big", files=2, size=10_000)
    size = _copy_bytes(url)
    with pytest.raises(
        artifact_cache.ArtifactCacheError,
        match=rf"{url}: its local copy needs {size} bytes \(2 files and the manifest\), more "
        rf"than the artifact cache limit of 15000 bytes in .*SHARDYARD_ARTIFACT_CACHE_LIMIT",
    ):
        artifact_cache.local_artifact(url, cache_dir=tmp_path / "cache", limit="15kB")
    assert not list((tmp_path / "cache").glob("*/*"))  # nothing downloaded


def test_a_killed_download_is_finished_by_the_next_run(s3_bucket, tmp_path):
    cache = tmp_path / "cache"
    url = _blob(s3_bucket, tmp_path, "killed", files=3, size=50_000)
    holder = _holder(url, cache, mode="kill")
    assert holder.wait(timeout=60) == -signal.SIGKILL
    (copy,) = [p for p in cache.iterdir() if p.is_dir()]
    assert not (copy / mf.MANIFEST_NAME).exists()
    left = sorted(p.name for p in copy.iterdir())
    assert left[0].startswith(".part-1.bin.") and left[0].endswith(".tmp")
    assert left[1:] == ["part-0.bin"]
    first = (copy / "part-0.bin").stat().st_ino
    local = artifact_cache.local_artifact(url, cache_dir=cache, limit="1MB")
    assert local == str(copy) and verify.verify(local).ok
    assert sorted(p.name for p in copy.iterdir()) == [
        mf.MANIFEST_NAME, "part-0.bin", "part-1.bin", "part-2.bin"
    ]  # fmt: skip
    assert (copy / "part-0.bin").stat().st_ino == first  # kept, not fetched again


def test_two_processes_fetching_one_copy_share_it(s3_bucket, tmp_path):
    cache = tmp_path / "cache"
    url = _blob(s3_bucket, tmp_path, "shared", files=6, size=200_000)
    holders = [_holder(url, cache, limit="10MB") for _ in range(2)]
    try:
        paths = {h.stdout.readline().strip() for h in holders}
    finally:
        for h in holders:
            h.stdin.close()
            h.wait(timeout=60)
    (path,) = paths
    assert verify.verify(path).ok
    assert not [p for p in Path(path).iterdir() if p.name.endswith(".tmp")]


def test_the_cache_is_the_services_local_home_unless_set(monkeypatch, tmp_path):
    for name in ("SHARDYARD_CACHE", "SHARDYARD_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SHARDYARD_DATA", str(tmp_path / "data"))
    assert storage.cache_root() == tmp_path / "data" / "cache"
    monkeypatch.setenv("SHARDYARD_DATA", "s3://bucket/data")
    assert storage.cache_root() == Path("~/.cache/shardyard").expanduser()
    monkeypatch.setenv("SHARDYARD_HOME", str(tmp_path / "home"))
    assert storage.cache_root() == tmp_path / "home" / "cache"
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    assert storage.cache_root() == tmp_path / "cache"


def test_s3fs_bounds_follow_the_variables_unless_the_process_set_its_own(monkeypatch):
    """The bounds s3fs gets are the variables' values at each call (a process whose bounds
    change does not keep the first ones), and a config the process set itself is kept."""
    import fsspec.config

    monkeypatch.setattr(fsspec.config, "conf", {})
    monkeypatch.delenv("SHARDYARD_S3_READ_TIMEOUT", raising=False)
    storage.s3fs_defaults()
    assert fsspec.config.conf["s3"]["config_kwargs"]["read_timeout"] == 10
    monkeypatch.setenv("SHARDYARD_S3_READ_TIMEOUT", "1")
    storage.s3fs_defaults()
    assert fsspec.config.conf["s3"]["config_kwargs"]["read_timeout"] == 1
    fsspec.config.conf["s3"]["config_kwargs"] = own = {"read_timeout": 99}
    storage.s3fs_defaults()
    assert fsspec.config.conf["s3"]["config_kwargs"] is own

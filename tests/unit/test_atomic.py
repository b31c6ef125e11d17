"""shardcore.atomic: a file or directory appears complete at its final path or not at
all, and a failed write leaves the previous contents and no temporary behind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardcore import atomic
from shardcore.formats import IndexedReader, IndexedWriter


def test_write_text_and_bytes_replace_the_file(tmp_path: Path) -> None:
    path = tmp_path / "stats.json"
    atomic.write_text(path, json.dumps({"documents": 1}))
    atomic.write_text(path, json.dumps({"documents": 2}))
    assert json.loads(path.read_text()) == {"documents": 2}
    atomic.write_bytes(tmp_path / "b.bin", b"\x00\xff")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.bin", "stats.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic.atomic_open(path, "w") as f:
        f.write("half of the new")
        raise RuntimeError("writer failed")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_the_temporary_is_hidden_unique_and_skipped_as_tmp(tmp_path: Path) -> None:
    path = tmp_path / "shard.docs.parquet"
    a, b = atomic.temp_path(path), atomic.temp_path(path)
    assert a != b
    for t in (a, b):
        assert t.parent == tmp_path
        assert t.name.startswith(".shard.docs.parquet.") and t.name.endswith(".tmp")


def test_atomic_path_for_writers_that_want_a_path(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    with atomic.atomic_path(path) as tmp:
        np.save(tmp, np.arange(5))  # np.save adds .npy unless the name has it
        tmp.with_name(tmp.name + ".npy").rename(tmp)
        assert not path.exists()
    assert np.load(path).tolist() == [0, 1, 2, 3, 4]
    assert [p.name for p in tmp_path.iterdir()] == ["a.npy"]


def test_atomic_path_builds_a_directory_in_one_rename(tmp_path: Path) -> None:
    dest = tmp_path / "view"
    with pytest.raises(ValueError), atomic.atomic_path(dest) as tmp:
        tmp.mkdir()
        (tmp / "x.ds.metadata").write_text("1\n")
        raise ValueError("bad shard")
    assert list(tmp_path.iterdir()) == []
    with atomic.atomic_path(dest) as tmp:
        tmp.mkdir()
        (tmp / "x.ds.metadata").write_text("1\n")
    assert (dest / "x.ds.metadata").read_text() == "1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["view"]


def test_atomic_file_commit_and_discard(tmp_path: Path) -> None:
    kept = atomic.AtomicFile(tmp_path / "kept.bin")
    kept.file.write(b"abc")
    assert not (tmp_path / "kept.bin").exists()
    assert kept.commit() == tmp_path / "kept.bin"
    assert (tmp_path / "kept.bin").read_bytes() == b"abc"
    dropped = atomic.AtomicFile(tmp_path / "dropped.bin")
    dropped.file.write(b"abc")
    dropped.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.bin"]
    with pytest.raises(ValueError, match="does not write"):
        atomic.AtomicFile(tmp_path / "r.bin", "rb")


def test_an_aborted_indexed_writer_leaves_nothing(tmp_path: Path) -> None:
    w = IndexedWriter(tmp_path / "shard-00000", np.uint16)
    w.add(np.array([1, 2, 3]))
    w.abort()
    assert list(tmp_path.iterdir()) == []
    with IndexedWriter(tmp_path / "shard-00000", np.uint16) as w:
        w.add(np.array([1, 2, 3]))
        w.add(np.array([4]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-00000.bin", "shard-00000.idx"]
    r = IndexedReader(tmp_path / "shard-00000")
    assert [r[i].tolist() for i in range(len(r))] == [[1, 2, 3], [4]]


def test_a_batch_commits_its_files_together_or_none(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(b"old")
    synced: list[str] = []
    durable = atomic._make_durable
    monkeypatch.setattr(atomic, "_make_durable", lambda p: synced.append(p.name) or durable(p))
    with atomic.Batch() as batch:
        batch.path(tmp_path / "a.bin").write_bytes(b"new")
        with open(batch.path(tmp_path / "sub" / "b.npy"), "wb") as f:
            np.save(f, np.arange(3))
        assert (tmp_path / "a.bin").read_bytes() == b"old"  # nothing renamed before the end
    assert (tmp_path / "a.bin").read_bytes() == b"new"
    assert np.array_equal(np.load(tmp_path / "sub" / "b.npy"), np.arange(3))
    assert len(synced) == 2 and all(name.endswith(".tmp") for name in synced)
    with pytest.raises(RuntimeError), atomic.Batch() as batch:
        batch.path(tmp_path / "a.bin").write_bytes(b"newer")
        batch.path(tmp_path / "c.bin").write_bytes(b"c")
        raise RuntimeError("the unit failed")
    assert (tmp_path / "a.bin").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "sub"]
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["b.npy"]

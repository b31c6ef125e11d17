"""A unit holds a batch of texts, not a shard: the texts read a batch at a time are the
shard's texts (from the sources and from the tokens), and an annotation built with batches
of a few documents has the bytes of one built with the whole shard in one batch. The
``.npy`` rows files the units append to read back as ``numpy.save``'s."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shardcore.annotate import texts as texts_module
from shardcore.annotate.artifact import annotate
from shardcore.annotate.buckets import ROW
from shardcore.annotate.texts import shard_text_batches, shard_texts
from shardcore.npy_rows import RowsFile
from shardcore.tokenize import tokenize
from shardcore.tokenized import TokenizedSource
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("batches")
    records = stdlib_records(30)
    records += [dict(r) for r in records[:10]]  # exact copies, for the clusters
    src = write_jsonl(tmp / "stdlib.jsonl", records)
    out = tmp / "tok"
    tokenize([str(src)], str(out), shard_size=60_000)
    return out


@pytest.mark.parametrize("text_from", ["source", "tokens"])
def test_batches_are_the_shard_texts_in_order(tokenized, text_from):
    ts = TokenizedSource(tokenized)
    for shard in range(len(ts.manifest["shards"])):
        whole, origin = shard_texts(ts, shard, text_from=text_from)
        batches, origin_b, n = shard_text_batches(ts, shard, text_from=text_from, batch=3)
        got = list(batches)
        assert origin_b == origin == text_from
        assert n == len(whole) == ts.manifest["shards"][shard]["documents"]
        assert [len(b) for b in got[:-1]] == [3] * (len(got) - 1)
        assert [t for b in got for t in b] == whole


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*.parquet"))}


@pytest.mark.parametrize("annotator", ["minhash", "quality"])
def test_an_annotation_in_small_batches_has_the_bytes_of_one_batch(
    tokenized, tmp_path, monkeypatch, annotator
):
    whole = tmp_path / "whole"
    annotate(str(tokenized), str(whole), annotator)
    monkeypatch.setattr(texts_module, "BATCH", 4)
    small = tmp_path / "small"
    annotate(str(tokenized), str(small), annotator)
    assert _files(small) == _files(whole) != {}
    assert (small / "manifest.json").read_bytes() == (whole / "manifest.json").read_bytes()


def test_rows_files_read_back_as_numpy_saved_them(tmp_path):
    rng = np.random.default_rng(0)
    sig = rng.integers(0, 2**32, size=(10, 128), dtype=np.uint32)
    rows = np.zeros(7, ROW)
    rows["key"], rows["doc"] = rng.integers(0, 2**63, size=7), np.arange(7)
    for name, arr, tail in (("sig", sig, (128,)), ("rows", rows, ())):
        with RowsFile(tmp_path / f"{name}.npy", arr.dtype, tail) as f:
            f.append(arr[:3])
            f.append(arr[3:3])
            f.append(arr[3:])
        assert np.array_equal(np.load(tmp_path / f"{name}.npy"), arr)
        assert np.array_equal(np.load(tmp_path / f"{name}.npy", mmap_mode="r"), arr)
    with RowsFile(tmp_path / "empty.npy", ROW):
        pass
    assert np.load(tmp_path / "empty.npy").shape == (0,)
    with (
        pytest.raises(ValueError, match="shape"),
        RowsFile(tmp_path / "bad.npy", np.uint32, (128,)) as f,
    ):
        f.append(sig[:, :64])


def test_signature_rows_read_with_pread_are_the_maps_rows(tmp_path):
    """A bucket unit reads the signatures of its candidate pairs with pread (runs of
    consecutive rows at once), not through the map: the same rows, in the order asked,
    repeated ones too; a view of part of a file is indexed as it is."""
    from shardcore.annotate.dedup import _take_rows

    rng = np.random.default_rng(3)
    np.save(tmp_path / "sig.npy", rng.integers(0, 2**32, size=(5000, 128), dtype=np.uint32))
    mapped = np.load(tmp_path / "sig.npy", mmap_mode="r")
    whole = np.asarray(mapped).copy()
    for ix in (rng.integers(0, 5000, 3000), np.arange(100, 400), np.array([4999, 0, 0, 7])):
        assert np.array_equal(_take_rows(mapped, ix), whole[ix])
    view = mapped[1000:2000]
    assert np.array_equal(_take_rows(view, np.array([0, 999, 5])), whole[[1000, 1999, 1005]])
    assert _take_rows(mapped, np.zeros(0, dtype=np.int64)).shape == (0, 128)


def test_rows_read_by_ranges_from_a_store_are_the_files_rows(tmp_path, monkeypatch):
    """``RemoteRows`` (a bucket unit's signatures on object storage) gives the rows asked
    for, in the order asked, repeats included, with the runs and gaps of any spacing; a
    truncated object is an error naming it, not short rows."""
    from shardcore import storage
    from shardcore.errors import CorruptDataError
    from shardcore.npy_rows import RemoteRows

    rng = np.random.default_rng(3)
    sig = rng.integers(0, 2**32, size=(1000, 16), dtype=np.uint32)
    with RowsFile(tmp_path / "sig.npy", np.uint32, (16,)) as f:
        f.append(sig)
    exact = rng.integers(0, 2**63, size=1000, dtype=np.uint64)
    np.save(tmp_path / "exact.npy", exact)
    store = storage.open_store(str(tmp_path))
    for gap in (0, 64, 1 << 16):
        monkeypatch.setattr(RemoteRows, "GAP", gap)
        for ix in (rng.integers(0, 1000, 300), np.array([999, 0, 0, 5, 6, 7]), np.zeros(0, int)):
            assert np.array_equal(RemoteRows(store, "sig.npy")[ix], sig[ix])
            assert np.array_equal(RemoteRows(store, "exact.npy")[ix], exact[ix])
    assert RemoteRows(store, "sig.npy").shape == (1000, 16)
    with pytest.raises(IndexError):
        RemoteRows(store, "sig.npy")[np.array([1000])]
    data = (tmp_path / "sig.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-64])
    with pytest.raises(CorruptDataError, match="cut.npy"):
        RemoteRows(store, "cut.npy")[np.array([1])]

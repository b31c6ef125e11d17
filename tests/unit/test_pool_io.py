"""The pool's copy, read and write loops: the compiled loop and the loop without a C
compiler give the bytes of plain slicing, on real text, and refuse ranges outside their
arrays; the shard writer's files and checksums are the same direct or buffered."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import numpy as np
import pytest

from shardcore import direct as pool_direct
from shardcore.errors import ManifestError
from shardcore.pool import io as pool_io


def _text_tokens() -> np.ndarray:
    """Bytes of real CPython sources, as int32 items."""
    import json
    import textwrap

    data = b"".join(Path(inspect.getsourcefile(m)).read_bytes() for m in (json, textwrap, os))
    data = data[: len(data) // 4 * 4]
    return np.frombuffer(data, dtype=np.int32)


def _ranges(rng, size: int, count: int, *, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Ascending, non-overlapping ranges of [0, size): short and long, near and far."""
    starts = np.sort(rng.choice(size - max_len, count, replace=False)).astype(np.int64)
    room = np.diff(np.append(starts, size))
    lengths = np.minimum(rng.integers(0, max_len, count), room).astype(np.int64)
    return starts, lengths


def _sliced(src: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([src[s : s + n] for s, n in zip(starts, lengths, strict=True)])


@pytest.mark.parametrize("compiled", [True, False])
def test_it_copies_ranges_as_slices_do(compiled):
    src = _text_tokens()
    rng = np.random.default_rng(5)
    starts, lengths = _ranges(rng, src.size, 400, max_len=300)
    dst = np.zeros(int(lengths.sum()) + 10, dtype=np.int32)
    dst_at = np.concatenate([[0], np.cumsum(lengths[:-1])])
    perm = rng.permutation(lengths.size)  # the copies may come in any order
    if compiled:
        assert pool_io._copy_kernel() is not None  # the test machine has a C compiler
        pool_io.copy_ranges(dst, dst_at[perm], src, starts[perm], lengths[perm])
    else:
        pool_io._copy_ranges_py(dst, dst_at[perm], src, starts[perm], lengths[perm])
    assert np.array_equal(dst[: dst_at[-1] + lengths[-1]], _sliced(src, starts, lengths))
    assert not dst[dst_at[-1] + lengths[-1] :].any()


def test_it_refuses_a_copy_range_outside_either_array():
    src = _text_tokens()
    dst = np.zeros(100, dtype=np.int32)
    with pytest.raises(ValueError, match="outside its array"):
        pool_io.copy_ranges(dst, np.array([90]), src, np.array([0]), np.array([11]))
    with pytest.raises(ValueError, match="outside its array"):
        pool_io.copy_ranges(dst, np.array([0]), src, np.array([src.size - 5]), np.array([6]))
    with pytest.raises(ValueError, match="one item size"):
        pool_io.copy_ranges(dst, np.array([0]), src.view(np.int16), np.array([0]), np.array([1]))


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("max_len", [40, 9000])  # gaps mostly under / over _GAP_BYTES
def test_it_reads_spans_as_slices_do(tmp_path, compiled, max_len):
    src = _text_tokens()
    path = tmp_path / "text.bin"
    src.tofile(path)
    rng = np.random.default_rng(max_len)
    starts, lengths = _ranges(rng, src.size, 150, max_len=max_len)
    out = np.zeros(int(lengths.sum()), dtype=np.int32)
    span = 64 << 10  # small: groups are cut at the span, long ranges read straight
    if compiled:
        pool_io.read_spans(path, starts * 4, lengths * 4, out, span=span)
    else:
        fd = os.open(path, os.O_RDONLY)
        try:
            pool_io._read_spans_py(fd, path, starts * 4, lengths * 4, out, span)
        finally:
            os.close(fd)
    assert np.array_equal(out, _sliced(src, starts, lengths))


def test_it_names_a_file_shorter_than_the_spans_it_reads(tmp_path):
    src = _text_tokens()
    path = tmp_path / "text.bin"
    src[:1000].tofile(path)
    out = np.zeros(200, dtype=np.int32)
    with pytest.raises(ManifestError, match=r"text\.bin: ends before offset 4000"):
        pool_io.read_spans(path, np.array([3900]), np.array([800]), out, span=1 << 20)
    with pytest.raises(ValueError, match="ascending"):
        pool_io.read_spans(path, np.array([400, 0]), np.array([8, 8]), out, span=1 << 20)


@pytest.mark.parametrize("thread", [0, 1])
def test_its_threads_read_documents_in_any_order_and_name_a_short_file(tmp_path, thread):
    # A window of many documents is read by READ_THREADS threads: the bytes of slicing, and
    # a file ending too soon fails the fill, whichever thread read that document.
    src = _text_tokens()
    paths = [tmp_path / "a.bin", tmp_path / "b.bin"]
    src[:9000].tofile(paths[0])
    src[9000:18000].tofile(paths[1])
    rng = np.random.default_rng(3)
    n = 600
    file = rng.integers(0, 2, n)
    starts = rng.integers(0, 8900, n)
    lengths = rng.integers(0, 100, n)
    parts = zip(file, starts, lengths, strict=True)
    want = np.concatenate([src[f * 9000 + s :][:m] for f, s, m in parts])
    out = np.zeros(want.size, dtype=np.int32)
    with pool_io.FileDocuments(paths, file, starts * 4, lengths, 4) as docs:
        docs.fill(out, 0)
    assert np.array_equal(out, want)
    bad = (n // 4, 3 * n // 4)[thread]  # in the half the calling thread or the helper reads
    starts[bad], lengths[bad] = 30000, 10  # past the end of either file
    with (
        pytest.raises(ManifestError, match=r"[ab]\.bin: ends before offset"),
        pool_io.FileDocuments(paths, file, starts * 4, lengths, 4) as docs,
    ):
        docs.fill(np.zeros(int(lengths.sum()), dtype=np.int32), 0)


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("size", [1, 4095, 4096, 3 * 4096 + 7, 5 * 4096])
def test_it_writes_windows_and_their_checksums_as_file_entry_reads_them(tmp_path, direct, size):
    # Direct I/O writes whole blocks and cuts the last one back; buffered writes the bytes:
    # either way the file holds the stream, and its entry is the one read back from disk.
    data = np.frombuffer(np.random.default_rng(size).bytes(size), dtype=np.uint8)
    window = pool_direct.window_items(2 * 4096, 1)
    path = tmp_path / "out.bin"
    opener = pool_direct.direct_opener if direct else None
    bufs = [pool_direct.aligned_empty(window, np.dtype(np.uint8)) for _ in range(2)]
    with open(path, "wb", buffering=0, opener=opener) as f:
        writer = pool_direct.HashingWriter(f, size)
        for k, w0 in enumerate(range(0, size, window)):
            buf = bufs[k % 2]
            n = min(window, size - w0)
            buf[:n] = data[w0 : w0 + n]
            writer.submit(buf, n).result()
        writer.close()
    assert path.read_bytes() == data.tobytes()
    assert writer.entry("out.bin") == pool_io.file_entry(path, "out.bin")


@pytest.mark.parametrize("refused", [False, True])
@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 3 * 4096 + 7])
def test_a_scratch_file_written_direct_holds_exactly_its_bytes(
    tmp_path, monkeypatch, size, refused
):
    """``write_file`` (a tokenize unit's chunks) writes whole blocks with direct I/O and
    cuts the file back to its size; where the file system refuses the direct write
    (EINVAL), it writes the bytes buffered: the same file either way."""
    import errno

    data = np.frombuffer(np.random.default_rng(size).bytes(size), dtype=np.uint8)
    buf = pool_direct.aligned_empty(max(size, 1), np.dtype(np.uint8))
    buf[:size] = data
    if refused:
        real, calls = pool_direct.write_all, []

        def refuse_first(f, view):
            calls.append(len(view))
            if len(calls) == 1:
                raise OSError(errno.EINVAL, "direct I/O refused")
            return real(f, view)

        monkeypatch.setattr(pool_direct, "write_all", refuse_first)
    path = tmp_path / "chunk.bin"
    pool_direct.write_file(path, buf, size)
    assert path.read_bytes() == data.tobytes()
    pool_direct.write_file(path, buf, size)  # a rerun rewrites it whole
    assert path.read_bytes() == data.tobytes()


@pytest.mark.parametrize("refused", [False, True])
def test_a_direct_reader_reads_any_range_as_a_slice_does(tmp_path, monkeypatch, refused):
    """``DirectReader`` (an assemble unit reading its chunks) reads any byte range into any
    buffer, through a bounce buffer smaller than the range, at unaligned offsets; where
    the file system refuses direct reads (EINVAL) it reads buffered; a range past the end
    of the file is an error that names it."""
    import errno

    data = np.random.default_rng(3).bytes(5 * 4096 + 123)
    path = tmp_path / "c00000.bin"
    path.write_bytes(data)
    reader = pool_direct.DirectReader(size=2 * 4096)
    if refused:
        real, calls = os.preadv, []

        def refuse_first(fd, buffers, offset):
            calls.append(offset)
            if len(calls) == 1:
                raise OSError(errno.EINVAL, "direct I/O refused")
            return real(fd, buffers, offset)

        monkeypatch.setattr(pool_direct.os, "preadv", refuse_first)
    rng = np.random.default_rng(4)
    fd = reader.open(path)
    try:
        for _ in range(60):
            a = int(rng.integers(0, len(data)))
            b = int(rng.integers(a, len(data) + 1))
            out = bytearray(b - a + 5)
            reader.read_into(fd, memoryview(out)[2 : 2 + b - a], a, path)
            assert bytes(out[2 : 2 + b - a]) == data[a:b] and out[:2] == out[-3:][:2] == b"\0\0"
        with pytest.raises(OSError, match="c00000.bin: unexpected end of file"):
            reader.read_into(fd, memoryview(bytearray(10)), len(data) - 4, path)
    finally:
        os.close(fd)


def test_it_aligns_windows_to_whole_blocks():
    assert pool_direct.window_items(2_500, 4) == 2048  # two blocks of 1,024 int32
    assert pool_direct.window_items(10, 4) == 1024  # at least one block
    buf = pool_direct.aligned_empty(10, np.dtype(np.int32))
    assert (
        buf.ctypes.data % pool_direct.DIRECT_ALIGN == 0 and buf.nbytes == pool_direct.DIRECT_ALIGN
    )


def test_a_bucket_range_of_a_run_file_is_its_rows_in_memory_of_their_own(tmp_path):
    """``read_buckets`` gives exactly the rows of buckets [lo, hi) of a file sorted by
    bucket (strings, nulls, nested values, dictionaries and several record batches
    included), as copies: the file can be rewritten afterwards without changing them."""
    import pyarrow as pa

    from shardcore.pool.layout import BUCKET_COL
    from shardcore.pool.merge import read_buckets

    names = sorted(p.name for p in Path(inspect.getsourcefile(os)).parent.glob("*.py"))
    n = 3 * len(names)
    rng = np.random.default_rng(7)
    buckets = np.sort(rng.integers(0, 9, n))
    table = pa.table(
        {
            "file": pa.array([names[i % len(names)] for i in range(n)]),
            "line": pa.array([None if i % 5 == 0 else i for i in range(n)], type=pa.int64()),
            "meta": pa.array([{"at": i, "tags": names[i % 3 : i % 3 + 2]} for i in range(n)]),
            BUCKET_COL: pa.array(buckets),
        }
    )
    path = tmp_path / "run.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=max(1, n // 4))  # several record batches
    for lo, hi in ((0, 1), (2, 5), (8, 9), (4, 4), (9, 12)):
        got = read_buckets(path, lo, hi)
        keep = np.flatnonzero((buckets >= lo) & (buckets < hi))
        assert got.schema == table.schema
        assert got.to_pydict() == table.take(pa.array(keep)).to_pydict()
    # A dictionary column (its values are shared with the file, not copied: run files are
    # replaced by renames, never rewritten in place).
    coded = table.append_column("coded", table.column("file").dictionary_encode())
    coded_path = tmp_path / "coded.arrow"
    with pa.OSFile(str(coded_path), "wb") as sink, pa.ipc.new_file(sink, coded.schema) as w:
        w.write_table(coded, max_chunksize=max(1, n // 4))
    keep = np.flatnonzero((buckets >= 3) & (buckets < 7))
    got = read_buckets(coded_path, 3, 7)
    assert got.to_pydict() == coded.take(pa.array(keep)).to_pydict()
    got = read_buckets(path, 2, 5)
    expected = got.to_pydict()
    with open(path, "r+b") as f:  # overwritten in place: a view of the file would change
        f.write(b"\0" * path.stat().st_size)
    assert got.to_pydict() == expected

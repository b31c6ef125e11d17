"""The ``.idx`` layout constants of shardcore.formats name the bytes encode_idx writes
and megatron-core reads."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from shardcore import formats
from shardcore.errors import FormatError


def test_the_offsets_point_at_the_fields_encode_idx_writes() -> None:
    lengths = np.array([5, 1, 7], dtype=np.int64)
    docs = np.array([0, 2, 3], dtype=np.int64)
    raw = formats.encode_idx(np.uint16, lengths, docs)
    s = lengths.size
    assert len(raw) == formats.idx_size(s, docs.size)
    assert raw[:9] == formats.IDX_MAGIC
    assert struct.unpack_from("<Q", raw, formats.IDX_VERSION_OFFSET)[0] == formats.IDX_VERSION
    assert raw[formats.IDX_DTYPE_OFFSET] == formats.CODE_OF_DTYPE[np.dtype(np.uint16)]
    assert struct.unpack_from("<Q", raw, formats.IDX_SEQUENCES_OFFSET)[0] == s
    assert struct.unpack_from("<Q", raw, formats.IDX_DOCUMENTS_OFFSET)[0] == docs.size
    for i, n in enumerate(lengths):
        assert struct.unpack_from("<i", raw, formats.idx_length_offset(i))[0] == n
    pointers = [0, 10, 12]  # bytes: uint16 tokens
    for i, p in enumerate(pointers):
        assert struct.unpack_from("<q", raw, formats.idx_pointer_offset(s, i))[0] == p
    for i, d in enumerate(docs):
        assert struct.unpack_from("<q", raw, formats.idx_document_offset(s, i))[0] == d


def test_a_damaged_header_is_reported_at_its_offset(tmp_path) -> None:
    raw = bytearray(formats.encode_idx(np.int32, np.array([3, 4])))
    raw[formats.IDX_DTYPE_OFFSET] = 99
    path = tmp_path / "x.idx"
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=f"dtype code 99 at offset {formats.IDX_DTYPE_OFFSET}"):
        formats.read_idx(path)
    raw[formats.IDX_DTYPE_OFFSET] = 4
    struct.pack_into("<Q", raw, formats.IDX_VERSION_OFFSET, 2)
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=f"version 2 at offset {formats.IDX_VERSION_OFFSET}"):
        formats.read_idx(path)


def test_megatron_core_reads_the_layout(tmp_path) -> None:
    from megatron.core.datasets import indexed_dataset

    with formats.IndexedWriter(tmp_path / "s", np.int32) as w:
        w.add(np.array([1, 2, 3]))
        w.add(np.array([4]))
    ds = indexed_dataset.IndexedDataset(str(tmp_path / "s"))
    assert [ds[i].tolist() for i in range(len(ds))] == [[1, 2, 3], [4]]

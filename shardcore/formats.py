"""Megatron-LM's IndexedDataset (``.bin`` + ``.idx``), defined once, here.

``.idx`` layout (little-endian, no padding)::

    b"MMIDIDX\\x00\\x00"        9 bytes   magic
    u64 version = 1
    u8  dtype code            1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16
    u64 S                     number of sequences
    u64 D                     number of document indices (documents + 1)
    int32[S] lengths          tokens per sequence
    int64[S] pointers         byte offset of each sequence in .bin
    int64[D] document indices sequence index where each document starts, then S

``.bin`` is the sequences' tokens back to back in that dtype. There is no uint32 code, so a
vocabulary of 65,500 or more tokens is stored as int32 (Megatron's own threshold). Tokenized
sources store one sequence per document; pool shards store one sequence per packed record,
so both open with ``megatron.core.datasets.indexed_dataset.IndexedDataset``.

Writers write under temporary names and rename on ``close()``: a crashed writer leaves no
file that looks complete.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import xxhash

from shardcore import atomic
from shardcore.errors import FormatError

IDX_MAGIC = b"MMIDIDX\x00\x00"
IDX_VERSION = 1
IDX_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, S, D
# Byte offsets of the header's fields, and of the arrays after it (S sequences).
IDX_VERSION_OFFSET = 9
IDX_DTYPE_OFFSET = 17
IDX_SEQUENCES_OFFSET = 18
IDX_DOCUMENTS_OFFSET = 26
IDX_HEADER_SIZE = IDX_HEADER.size  # 34


def idx_length_offset(i: int) -> int:
    """Byte offset in an ``.idx`` of sequence ``i``'s int32 length."""
    return IDX_HEADER_SIZE + 4 * i


def idx_pointer_offset(num_sequences: int, i: int) -> int:
    """Byte offset in an ``.idx`` of sequence ``i``'s int64 pointer."""
    return IDX_HEADER_SIZE + 4 * num_sequences + 8 * i


def idx_document_offset(num_sequences: int, i: int) -> int:
    """Byte offset in an ``.idx`` of document index ``i`` (int64)."""
    return IDX_HEADER_SIZE + 12 * num_sequences + 8 * i


def idx_size(num_sequences: int, num_document_indices: int) -> int:
    """Bytes of an ``.idx`` file with these counts."""
    return idx_document_offset(num_sequences, num_document_indices)


DTYPE_CODES: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
CODE_OF_DTYPE = {dt: code for code, dt in DTYPE_CODES.items()}

# Megatron switches to int32 at this vocabulary size, not at 65,536: stay identical.
UINT16_VOCAB_LIMIT = 65500


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every token id fits below Megatron's threshold, else int32."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return np.dtype(np.uint16) if vocab_size < UINT16_VOCAB_LIMIT else np.dtype(np.int32)


def bin_path(prefix: str | os.PathLike) -> Path:
    return Path(f"{os.fspath(prefix)}.bin")


def idx_path(prefix: str | os.PathLike) -> Path:
    return Path(f"{os.fspath(prefix)}.idx")


def encode_idx(
    dtype: np.dtype, lengths: np.ndarray, document_indices: np.ndarray | None = None
) -> bytes:
    """The bytes of an ``.idx`` file for sequences of ``lengths`` tokens of ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype not in CODE_OF_DTYPE:
        raise FormatError(f"dtype {dtype} has no IndexedDataset code")
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and (lengths.min() < 0 or lengths.max() > np.iinfo(np.int32).max):
        raise FormatError("sequence lengths must fit in int32")
    pointers = np.zeros(lengths.size, dtype=np.int64)
    if lengths.size > 1:
        np.cumsum(lengths[:-1] * dtype.itemsize, out=pointers[1:])
    if document_indices is None:
        document_indices = np.arange(lengths.size + 1, dtype=np.int64)
    document_indices = np.asarray(document_indices, dtype=np.int64)
    header = IDX_HEADER.pack(
        IDX_MAGIC, IDX_VERSION, CODE_OF_DTYPE[dtype], lengths.size, document_indices.size
    )
    return b"".join(
        [
            header,
            lengths.astype("<i4").tobytes(),
            pointers.astype("<i8").tobytes(),
            document_indices.astype("<i8").tobytes(),
        ]
    )


@dataclass(frozen=True)
class IndexHeader:
    dtype: np.dtype
    lengths: np.ndarray  # int32[S]
    pointers: np.ndarray  # int64[S], byte offsets into .bin
    document_indices: np.ndarray  # int64[D]

    @property
    def num_sequences(self) -> int:
        return int(self.lengths.size)

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum(dtype=np.int64))


def read_idx(path: str | os.PathLike) -> IndexHeader:
    """Parse an ``.idx`` file; raises FormatError naming the file and the bad field."""
    path = Path(path)
    try:
        raw = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise FormatError(f"{path}: cannot open index: {exc}") from exc
    if raw.size < IDX_HEADER_SIZE:
        raise FormatError(
            f"{path}: {raw.size} bytes is shorter than the {IDX_HEADER_SIZE}-byte header"
        )
    magic, version, code, n_seq, n_doc = IDX_HEADER.unpack(bytes(raw[:IDX_HEADER_SIZE]))
    if magic != IDX_MAGIC:
        raise FormatError(f"{path}: bad magic {magic!r} at offset 0 (expected {IDX_MAGIC!r})")
    if version != IDX_VERSION:
        raise FormatError(f"{path}: unsupported version {version} at offset {IDX_VERSION_OFFSET}")
    if code not in DTYPE_CODES:
        raise FormatError(f"{path}: unknown dtype code {code} at offset {IDX_DTYPE_OFFSET}")
    expected = idx_size(n_seq, n_doc)
    if raw.size != expected:
        raise FormatError(
            f"{path}: size {raw.size} bytes, header says {expected} ({n_seq} sequences, {n_doc} document indices)"
        )
    lengths = np.frombuffer(raw, dtype="<i4", count=n_seq, offset=idx_length_offset(0))
    pointers = np.frombuffer(raw, dtype="<i8", count=n_seq, offset=idx_pointer_offset(n_seq, 0))
    docs = np.frombuffer(raw, dtype="<i8", count=n_doc, offset=idx_document_offset(n_seq, 0))
    return IndexHeader(DTYPE_CODES[code], lengths, pointers, docs)


class IndexedWriter:
    """Write one IndexedDataset, one sequence per ``add()``. A context manager: on a clean
    exit the ``.idx`` is written and both files are renamed into place; on an exception the
    temporary files are removed.

    >>> with IndexedWriter("out/shard-00000", np.uint16) as w:   # doctest: +SKIP
    ...     w.add(np.array([1, 2, 3]))
    """

    def __init__(self, prefix: str | os.PathLike, dtype: np.dtype | type):
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in CODE_OF_DTYPE:
            raise FormatError(f"dtype {self.dtype} has no IndexedDataset code")
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self._out = atomic.AtomicFile(bin_path(self.prefix))
        self._bin = self._out.file
        self._lengths: list[np.ndarray] = []
        self._pending: list[int] = []
        self.num_tokens = 0
        self.closed = False

    def add(self, tokens: np.ndarray) -> None:
        arr = np.asarray(tokens)
        if arr.dtype != self.dtype:
            arr = self._checked_cast(arr)
        self._bin.write(arr.tobytes(order="C"))
        self._pending.append(arr.size)
        self.num_tokens += arr.size
        if len(self._pending) >= 65536:
            self._flush_lengths()

    def add_many(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        """Add several sequences at once: ``tokens`` is their concatenation."""
        arr = np.asarray(tokens)
        lengths = np.asarray(lengths, dtype=np.int64)
        if int(lengths.sum()) != arr.size:
            raise FormatError(
                f"{self.prefix}: lengths sum to {int(lengths.sum())}, tokens has {arr.size}"
            )
        if arr.dtype != self.dtype:
            arr = self._checked_cast(arr)
        self._bin.write(arr.tobytes(order="C"))
        self._flush_lengths()
        self._lengths.append(lengths)
        self.num_tokens += arr.size

    def _checked_cast(self, arr: np.ndarray) -> np.ndarray:
        if arr.size and np.issubdtype(self.dtype, np.integer):
            info = np.iinfo(self.dtype)
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                raise FormatError(
                    f"{self.prefix}: token ids [{lo}, {hi}] do not fit in {self.dtype}"
                )
        return arr.astype(self.dtype)

    def _flush_lengths(self) -> None:
        if self._pending:
            self._lengths.append(np.asarray(self._pending, dtype=np.int64))
            self._pending = []

    @property
    def num_sequences(self) -> int:
        return sum(a.size for a in self._lengths) + len(self._pending)

    @property
    def num_bytes(self) -> int:
        return self.num_tokens * self.dtype.itemsize

    def close(self) -> None:
        if self.closed:
            return
        self._flush_lengths()
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        try:
            idx = encode_idx(self.dtype, lengths)
        except BaseException:
            self.abort()
            raise
        self._out.commit()
        atomic.write_bytes(idx_path(self.prefix), idx)
        self.closed = True

    def abort(self) -> None:
        self._out.discard()
        self.closed = True

    def __enter__(self) -> IndexedWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class IndexedReader:
    """Read an IndexedDataset with np.memmap: ``reader[i]`` is sequence i (a view)."""

    def __init__(self, prefix: str | os.PathLike):
        self.prefix = Path(prefix)
        self.index = read_idx(idx_path(self.prefix))
        self.dtype = self.index.dtype
        path = bin_path(self.prefix)
        size = path.stat().st_size if path.exists() else -1
        expected = self.index.num_tokens * self.dtype.itemsize
        if size != expected:
            raise FormatError(f"{path}: {size} bytes, index says {expected}")
        self.tokens = (
            np.memmap(path, dtype=self.dtype, mode="r")
            if expected
            else np.zeros(0, dtype=self.dtype)
        )
        itemsize = self.dtype.itemsize
        self.starts = (self.index.pointers // itemsize).astype(np.int64)

    def __len__(self) -> int:
        return self.index.num_sequences

    @property
    def lengths(self) -> np.ndarray:
        return self.index.lengths

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self.prefix}: sequence {i} out of range [0, {n})")
        start = int(self.starts[i])
        return self.tokens[start : start + int(self.index.lengths[i])]

    def slice(self, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
        """Tokens and lengths of sequences [first, last) as one contiguous view."""
        lengths = self.index.lengths[first:last]
        if first >= last:
            return self.tokens[0:0], lengths
        start = int(self.starts[first])
        return self.tokens[start : start + int(lengths.sum(dtype=np.int64))], lengths


# --- Manifest tables ---------------------------------------------------------------------
#
# A format-3 manifest is a small JSON header (``manifest.json``, written last: the commit
# point) plus two binary files it describes and checksums:
#
#     manifest.shards   the shard table: fixed-width little-endian columns, one after the
#                       other, each starting at a multiple of TABLE_ALIGN bytes; the header
#                       gives each column's dtype, offset and length (``rows`` values;
#                       ``cumulative_records`` has rows + 1) and its xxh3-64.
#     manifest.blocks   u64 little-endian xxh3-64 of every block of every shard file, the
#                       files one after the other; a file's first block is in the table.
#
# Readers memory-map both (or range-read them on object storage): opening an artifact
# parses only the header, a lookup touches the pages it reads, and verify-on-read reads
# the <= MAX_BLOCKS checksums of one file. Shard names are not stored: ``shard_name``
# derives them from an integer ``key`` column and the header's naming pattern (with a
# fan-out directory level when the pattern has ``{dir}``); a table whose names follow no
# pattern stores them as a string column (``name_offsets`` u64 + ``name_bytes`` u8).

TABLE_ALIGN = 64


def table_layout(columns: dict[str, np.ndarray]) -> tuple[dict[str, dict], int]:
    """Where each column goes in a table file: ``{name: {dtype, offset, length}}`` in the
    given order, and the file's size."""
    layout, offset = {}, 0
    for name, values in columns.items():
        dtype = np.dtype(values.dtype).newbyteorder("<")
        if values.ndim != 1:
            raise FormatError(f"table column {name!r}: {values.ndim}-d, columns are 1-d")
        layout[name] = {"dtype": dtype.str, "offset": offset, "length": int(values.size)}
        offset += -(-values.size * dtype.itemsize // TABLE_ALIGN) * TABLE_ALIGN
    return layout, offset


def write_table(path: str | os.PathLike, columns: dict[str, np.ndarray]) -> dict:
    """Write ``columns`` as a table file (atomically); its description for the header:
    ``{"size", "xxh3", "columns": {name: {dtype, offset, length, xxh3}}}``."""

    layout, size = table_layout(columns)
    whole = xxhash.xxh3_64()
    with atomic.atomic_open(path) as f:
        written = 0
        for name, values in columns.items():
            spec = layout[name]
            data = np.ascontiguousarray(values, dtype=np.dtype(spec["dtype"]))
            raw = memoryview(data).cast("B")  # type: ignore[arg-type]  # numpy arrays are buffers
            spec["xxh3"] = xxhash.xxh3_64_hexdigest(raw)
            pad = spec["offset"] - written
            if pad:
                whole.update(b"\0" * pad)
                f.write(b"\0" * pad)
            whole.update(raw)
            f.write(raw)
            written = spec["offset"] + len(raw)
        if size > written:
            whole.update(b"\0" * (size - written))
            f.write(b"\0" * (size - written))
    return {"size": size, "xxh3": whole.hexdigest(), "columns": layout}


def write_column_parts(path: str | os.PathLike, name: str, parts: list, dtype: Any) -> dict:
    """Write a table file of one column given as consecutive ``parts`` (arrays, or objects
    with ``len()`` and ``chunks()`` yielding arrays, such as a spill file's): the bytes and
    description ``write_table({name: concatenation})`` gives, without the concatenation."""
    dt = np.dtype(dtype).newbyteorder("<")
    length = sum(len(part) for part in parts)
    size = -(-length * dt.itemsize // TABLE_ALIGN) * TABLE_ALIGN
    column, whole = xxhash.xxh3_64(), xxhash.xxh3_64()
    with atomic.atomic_open(path) as f:
        for part in parts:
            pieces = part.chunks() if hasattr(part, "chunks") else (part,)
            for piece in pieces:
                data = np.ascontiguousarray(piece, dtype=dt)
                raw = memoryview(data).cast("B")  # type: ignore[arg-type]  # numpy arrays are buffers
                column.update(raw)
                whole.update(raw)
                f.write(raw)
        pad = size - length * dt.itemsize
        if pad:
            whole.update(b"\0" * pad)
            f.write(b"\0" * pad)
    spec = {"dtype": dt.str, "offset": 0, "length": length, "xxh3": column.hexdigest()}
    return {"size": size, "xxh3": whole.hexdigest(), "columns": {name: spec}}


def table_column(buffer: mmap.mmap | bytes, spec: dict, where: str) -> np.ndarray:
    """A column of a table file held in ``buffer`` (an mmap, or the column's bytes with
    ``spec["offset"]`` 0): a read-only view, checked to fit."""
    dtype = np.dtype(spec["dtype"])
    end = spec["offset"] + spec["length"] * dtype.itemsize
    if end > len(buffer):
        raise FormatError(f"{where}: {len(buffer)} bytes, its column needs {end}")
    return np.frombuffer(buffer, dtype=dtype, count=spec["length"], offset=spec["offset"])


def shard_name(names: dict, key: int) -> str:
    """The name of the shard whose key is ``key`` under a naming pattern
    ``{"pattern": "shards/pool-{key:05d}"}`` or, fanned out,
    ``{"pattern": "shards/{dir:04d}/pool-{key:08d}", "fanout": 1000}`` (dir = key // fanout)."""
    fanout = int(names.get("fanout") or 0)
    return names["pattern"].format(key=key, dir=key // fanout if fanout else 0)


_NAME_RE = re.compile(r"^(.*?)(\d+)$")


def infer_names(prefixes: list[str]) -> tuple[dict, np.ndarray] | None:
    """A naming pattern and the keys that give exactly ``prefixes``, or None: names that
    end in a zero-padded number after a common stem (flat), or ``<stem><dir>/<mid><key>``
    with dir = key // fanout for a fan-out of 10^k or 2^k."""

    if not prefixes:
        return {"pattern": "{key}"}, np.zeros(0, dtype=np.int64)
    m = _NAME_RE.match(prefixes[0])
    if m is None:
        return None
    keys = np.zeros(len(prefixes), dtype=np.int64)
    head, digits = m.group(1), m.group(2)
    fan = re.match(r"^(.*?)(\d+)(/[^/]*?)$", head)
    candidates: list[tuple[dict[str, str | int], int | None]] = []
    candidates.append(({"pattern": _escape(head) + f"{{key:0{len(digits)}d}}"}, None))
    if fan is not None:
        for fanout in (10, 100, 1000, 10000, 256, 1024, 4096, 65536):
            names = {
                "pattern": _escape(fan.group(1))
                + f"{{dir:0{len(fan.group(2))}d}}"
                + _escape(fan.group(3))
                + f"{{key:0{len(digits)}d}}",
                "fanout": fanout,
            }
            candidates.append((names, fanout))
    for names, _ in candidates:
        ok = True
        for i, p in enumerate(prefixes):
            mm = _NAME_RE.match(p)
            if mm is None:
                ok = False
                break
            keys[i] = int(mm.group(2))
            if shard_name(names, int(keys[i])) != p:
                ok = False
                break
        if ok:
            return names, keys.copy()
    return None


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")

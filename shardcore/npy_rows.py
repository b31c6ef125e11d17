"""An ``.npy`` file written a block of rows at a time, for a unit whose output grows with
its input (a shard's MinHash signatures, its bucket rows by partition) and whose memory
must not: the header is written first with room to spare and rewritten with the row count
on close, so ``numpy.load`` (memory-mapped or not) reads the file as if ``numpy.save`` had
written it whole."""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np

from shardcore.errors import CorruptDataError
from shardcore.storage.ranged import _header as npy_header

# The whole header, magic to newline: a multiple of 64 as numpy writes it, and room for a
# structured dtype's description and a shape of any count.
HEADER_BYTES = 256
_MAGIC = b"\x93NUMPY\x01\x00"


def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    descr = np.lib.format.dtype_to_descr(dtype)
    text = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {shape!r}, }}"
    room = HEADER_BYTES - len(_MAGIC) - 2 - 1
    if len(text) > room:
        raise ValueError(f"npy rows: the header of {dtype} x {shape} does not fit {HEADER_BYTES} B")
    return _MAGIC + struct.pack("<H", room + 1) + text.ljust(room).encode("latin1") + b"\n"


class RowsFile:
    """Rows of ``dtype`` (each of shape ``tail``) appended to the ``.npy`` file ``path``;
    :meth:`close` (or leaving the ``with`` block without an error) writes the count."""

    def __init__(self, path: str | os.PathLike, dtype: Any, tail: tuple[int, ...] = ()) -> None:
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.tail = tuple(int(x) for x in tail)
        self.rows = 0
        self._f = open(self.path, "wb")  # noqa: SIM115  # closed by close()
        self._f.write(_header(self.dtype, (0, *self.tail)))

    def append(self, rows: np.ndarray) -> None:
        block = np.ascontiguousarray(rows, dtype=self.dtype)
        if block.shape[1:] != self.tail:
            raise ValueError(f"{self.path}: rows of shape {block.shape[1:]}, expected {self.tail}")
        self._f.write(block.reshape(-1).view(np.uint8).data)
        self.rows += len(block)

    def close(self) -> None:
        if self._f.closed:
            return
        self._f.seek(0)
        self._f.write(_header(self.dtype, (self.rows, *self.tail)))
        self._f.close()

    def __enter__(self) -> RowsFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.close()
        else:
            self._f.close()


def read_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, Fortran order, dtype) of the ``.npy`` file open at its start as ``f``, left
    at the first byte of its body."""
    major, _ = np.lib.format.read_magic(f)
    if major == 1:
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


def read_blocks(path: str | os.PathLike, rows: int) -> Iterator[np.ndarray]:
    """The ``.npy`` file ``path`` (C order) ``rows`` rows at a time, each block read into
    memory of its own: a memory map's pages would stay resident, the whole file's worth."""
    with open(path, "rb") as f:
        shape, fortran, dtype = read_header(f)
        if fortran:
            raise ValueError(f"{path}: a Fortran-ordered array")
        offset = f.tell()
        row_bytes = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        for lo in range(0, shape[0] if shape else 0, rows):
            hi = min(shape[0], lo + rows)
            raw = os.pread(f.fileno(), (hi - lo) * row_bytes, offset + lo * row_bytes)
            yield np.frombuffer(raw, dtype=dtype).reshape(hi - lo, *shape[1:])


class RemoteRows:
    """The rows of an ``.npy`` file on object storage, read by ranges: ``rows[ix]`` (an
    array of row numbers) fetches only the runs of rows asked for, rows nearer than
    ``GAP`` bytes to each other in one request, the requests ``THREADS`` at a time. A
    bucket unit of a MinHash annotation reads the signatures of its candidates this way:
    downloading every signature file whole would move 4 * num_perm bytes per document of
    the whole corpus to every bucket unit. The object's size is checked against its header
    once, so a truncated object is an error, not short rows."""

    GAP = 64 << 10
    THREADS = 16

    def __init__(self, store: Any, key: str) -> None:
        self.store, self.key = store, key
        self._shape: tuple[int, ...] | None = None  # read with the header, on first use

    def _open(self) -> None:
        f = io.BytesIO(self.store.read_range(self.key, 0, HEADER_BYTES * 16))
        shape, fortran, dtype = npy_header(f)
        where = self.store.location(self.key)
        if fortran or not shape:
            raise CorruptDataError(f"{where}: not a C-ordered array of rows")
        self._dtype, self.offset = np.dtype(dtype), f.tell()
        self.row = self._dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        size = self.store.size(self.key)
        if size != self.offset + int(shape[0]) * self.row:
            said = self.offset + int(shape[0]) * self.row
            raise CorruptDataError(f"{where}: {size} bytes, its header says {said}")
        self._shape = tuple(int(x) for x in shape)

    @property
    def shape(self) -> tuple[int, ...]:
        if self._shape is None:
            self._open()
        return cast("tuple[int, ...]", self._shape)

    @property
    def dtype(self) -> np.dtype:
        self.shape  # noqa: B018 - reads the header
        return self._dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, ix: Any) -> np.ndarray:
        shape, dtype = self.shape, self.dtype
        ix = np.asarray(ix, dtype=np.int64)
        if ix.size and (ix.min() < 0 or ix.max() >= shape[0]):
            raise IndexError(f"{self.key}: rows outside [0, {shape[0]})")
        want, back = np.unique(ix, return_inverse=True)
        out = np.empty((len(want), *shape[1:]), dtype=dtype)
        if not len(want):
            return out[back]
        cuts = np.flatnonzero(np.diff(want) > max(1, self.GAP // max(self.row, 1))) + 1
        firsts, lasts = np.r_[0, cuts], np.r_[cuts, len(want)]
        runs = list(zip(want[firsts].tolist(), (want[lasts - 1] + 1).tolist(), strict=True))

        def fetch(run: tuple[int, int]) -> bytes:
            lo, hi = run
            start = self.offset + lo * self.row
            data = self.store.read_range(self.key, start, start + (hi - lo) * self.row)
            if len(data) != (hi - lo) * self.row:
                raise CorruptDataError(
                    f"{self.store.location(self.key)}: short read of rows {lo}-{hi}"
                )
            return data

        with ThreadPoolExecutor(max_workers=min(self.THREADS, len(runs))) as pool:
            blocks = pool.map(fetch, runs)
            for (lo, hi), a, b, data in zip(runs, firsts, lasts, blocks, strict=True):
                block = np.frombuffer(data, dtype=dtype).reshape(hi - lo, *shape[1:])
                out[a:b] = block[want[a:b] - lo]
        return out[back]

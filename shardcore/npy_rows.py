"""An ``.npy`` file written a block of rows at a time, for a unit whose output grows with
its input (a shard's MinHash signatures, its bucket rows by partition) and whose memory
must not: the header is written first with room to spare and rewritten with the row count
on close, so ``numpy.load`` (memory-mapped or not) reads the file as if ``numpy.save`` had
written it whole."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

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

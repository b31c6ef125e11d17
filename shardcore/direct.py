"""Writing a shard's tokens: direct I/O from page-aligned windows of whole blocks, the
file's manifest entry computed from the bytes as they are written, and early writeback
of buffered writes. Used by the pool's pass 2 and the tokenize stage's assemble units."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any

import numpy as np
import xxhash

from shardcore import verify

# Direct I/O (O_DIRECT) moves a shard's tokens from the window to the disk without
# copying them into the page cache: measured on 2 GB of output, the copy and its writeback
# were a fifth of pass 2's CPU, and dd's buffered rate is half the disk's direct one. It
# needs buffers, offsets and lengths aligned to the device's block: 4096 bytes covers the
# usual 512- and 4096-byte logical blocks.
DIRECT_ALIGN = 4096
_O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux only; elsewhere files are written buffered


_SYNC_FILE_RANGE_WRITE = 2


def write_all(f: IO[bytes], arr: np.ndarray | memoryview) -> None:
    view = arr.data.cast("B") if isinstance(arr, np.ndarray) else arr
    while view.nbytes:
        view = view[f.write(view) :]


def _load_sync_file_range() -> Callable[..., int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux / not glibc: no early writeback
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


_sync_file_range = _load_sync_file_range()


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing a just-written range to disk now, without waiting:
    the disk works while the next window is gathered, so the final fdatasync has little
    left to wait for. A hint only; durability comes from the fdatasync."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)


def direct_opener(path: str, flags: int) -> int:
    """An ``open`` opener that adds O_DIRECT where the file system takes it (tmpfs before
    Linux 6.6, for one, refuses it: then the file is opened as asked)."""
    if _O_DIRECT:
        try:
            return os.open(path, flags | _O_DIRECT, 0o666)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
    return os.open(path, flags, 0o666)


def aligned_empty(count: int, dtype: np.dtype) -> np.ndarray:
    """An uninitialized array of at least ``count`` items (rounded up to whole DIRECT_ALIGN
    blocks) starting on a page: anonymous memory, aligned for direct I/O."""
    nbytes = -(-max(1, count * dtype.itemsize) // DIRECT_ALIGN) * DIRECT_ALIGN
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype)


def window_items(items: int, itemsize: int) -> int:
    """``items`` rounded down to whole DIRECT_ALIGN blocks (at least one): windows of
    this many items keep every write of a file at an aligned offset."""
    per_block = DIRECT_ALIGN // itemsize
    return max(1, items // per_block) * per_block


def write_file(path: str | os.PathLike, buf: np.ndarray, count: int) -> None:
    """Write the first ``count`` items of ``buf`` (an ``aligned_empty`` array) as the whole
    file ``path``: with direct I/O up to the last block's end, then cut back to the exact
    size; buffered where the file system refuses direct I/O. Scratch files (a unit's parts,
    read once by a later phase) skip the page cache this way; they are not synced."""
    nbytes = count * buf.dtype.itemsize
    data = buf.data.cast("B")
    padded = data[: -(-nbytes // DIRECT_ALIGN) * DIRECT_ALIGN]
    with open(path, "wb", buffering=0, opener=direct_opener) as f:
        direct = bool(_O_DIRECT and fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & _O_DIRECT)
        if direct:
            try:
                write_all(f, padded)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                fd = f.fileno()
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_O_DIRECT)
                f.seek(0)
                direct = False
        if direct:
            os.ftruncate(f.fileno(), nbytes)
        else:
            f.truncate(0)
            write_all(f, data[:nbytes])


class DirectReader:
    """Reads byte ranges of files with direct I/O into any buffer, through one aligned
    bounce buffer: the disk's data lands in it without passing through the page cache
    (whose copy and page bookkeeping cost ~1 ns a byte of a file read once), and one
    memcpy puts it where it belongs. Buffered where the file system refuses direct I/O."""

    def __init__(self, size: int = 8 << 20) -> None:
        self.bounce = aligned_empty(size, np.dtype(np.uint8)).data.cast("B")

    def open(self, path: str | os.PathLike) -> int:
        return direct_opener(os.fspath(path), os.O_RDONLY)

    def read_into(self, fd: int, view: memoryview, offset: int, path: object) -> None:
        """Fill ``view`` with the bytes of ``fd`` from ``offset`` (OSError at the end of
        the file before it is full)."""
        bounce = self.bounce
        while view.nbytes:
            start = offset - offset % DIRECT_ALIGN
            skip = offset - start
            want = min(-(-(skip + view.nbytes) // DIRECT_ALIGN) * DIRECT_ALIGN, len(bounce))
            try:
                got = os.preadv(fd, [bounce[:want]], start) - skip
            except OSError as exc:
                if exc.errno != errno.EINVAL or not _drop_direct(fd):
                    raise
                continue  # read again, buffered
            if got <= 0:
                raise OSError(f"{path}: unexpected end of file at byte {offset}")
            got = min(got, view.nbytes)
            view[:got] = bounce[skip : skip + got]
            view = view[got:]
            offset += got


def _drop_direct(fd: int) -> bool:
    """Turn direct I/O off on ``fd``; whether it was on."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    if not (_O_DIRECT and flags & _O_DIRECT):
        return False
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~_O_DIRECT)
    return True


class HashingWriter:
    """Writes windows to an open unbuffered binary file in order, in a background thread,
    and computes the file's manifest entry (as ``file_entry``) from the bytes written:
    checksums cost no second read of the output. ``size`` is the file's final size (it
    sets the block size).

    A file opened with O_DIRECT (``direct_opener``) gets its windows straight from their
    buffers (``aligned_empty``; every window but the last a whole number of
    DIRECT_ALIGN blocks): the last one is written up to its block's end and the file cut
    back to ``size``. Where the kernel refuses a direct write, the file falls back to
    buffered writes. Buffered, each window's writeback is started as it is written."""

    def __init__(self, f: IO[bytes], size: int) -> None:
        self.f, self.size, self.pos = f, size, 0
        self.block = verify.block_size_for(size)
        self.whole, self.current, self.filled = xxhash.xxh3_64(), xxhash.xxh3_64(), 0
        self.blocks: list[str] = []
        self.direct = bool(_O_DIRECT and fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & _O_DIRECT)
        self.pool = ThreadPoolExecutor(max_workers=1)

    def submit(self, buf: np.ndarray, count: int) -> Future[None]:
        """Queue the first ``count`` items of ``buf`` (left untouched until the returned
        future is done); ``buf`` is an ``aligned_empty`` array."""
        return self.pool.submit(self._write, buf, count)

    def _write(self, buf: np.ndarray, count: int) -> None:
        view = buf.data.cast("B")[: count * buf.dtype.itemsize]
        nbytes = view.nbytes
        tail = nbytes % DIRECT_ALIGN
        if self.direct and tail and self.pos + nbytes != self.size:
            raise ValueError(f"a window of {nbytes} bytes at {self.pos} is not block-aligned")
        if self.direct:
            padded = buf.data.cast("B")[: nbytes + (DIRECT_ALIGN - tail if tail else 0)]
            try:
                write_all(self.f, padded)
                if tail:
                    os.ftruncate(self.f.fileno(), self.pos + nbytes)
            except OSError as exc:
                if exc.errno != errno.EINVAL or self.f.tell() != self.pos:
                    raise
                self._buffered()
                write_all(self.f, view)
        else:
            write_all(self.f, view)
            start_writeback(self.f.fileno(), self.pos, nbytes)
        self.pos += nbytes
        self._hash(view)

    def _buffered(self) -> None:
        """Turn O_DIRECT off for the rest of the file (a file system that opened it so but
        refuses the writes)."""
        fd = self.f.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_O_DIRECT)
        self.direct = False

    def _hash(self, view: memoryview) -> None:
        self.whole.update(view)
        while view.nbytes:
            take = min(self.block - self.filled, view.nbytes)
            self.current.update(view[:take])
            self.filled += take
            view = view[take:]
            if self.filled == self.block:
                self.blocks.append(self.current.hexdigest())
                self.current.reset()
                self.filled = 0

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def entry(self, rel: str) -> dict[str, Any]:
        if self.pos != self.size:
            raise ValueError(f"{rel}: wrote {self.pos} bytes, expected {self.size}")
        blocks = self.blocks + ([self.current.hexdigest()] if self.filled else [])
        return {
            "path": rel,
            "size": self.size,
            "xxh3": self.whole.hexdigest(),
            "block_size": self.block,
            "blocks": "".join(blocks),
        }


def bytes_entry(data: bytes, rel: str) -> dict[str, Any]:
    """``file_entry`` of a file whose bytes are ``data``."""
    block = verify.block_size_for(len(data))
    view = memoryview(data)
    return {
        "path": rel,
        "size": len(data),
        "xxh3": xxhash.xxh3_64_hexdigest(view),
        "block_size": block,
        "blocks": "".join(
            xxhash.xxh3_64_hexdigest(view[i : i + block]) for i in range(0, len(data), block)
        ),
    }

"""File input and output for the pool: mount detection, early writeback, positioned span
reads with an in-memory gather, and checksummed file entries."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from shardcore import atomic, pack, verify
from shardcore.blend import compile_kernel
from shardcore.errors import ManifestError

if TYPE_CHECKING:
    import pyarrow as pa

# File system types whose random reads cost a network round trip (NFS, SMB, object stores
# mounted through FUSE): pass 2 reads a staged copy there instead of gathering documents.
_NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs")


def on_network_fs(path: str) -> bool:
    """True if ``path`` is on a network or FUSE file system (per /proc/mounts; False where
    that cannot be read)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    real, best, fstype = os.path.realpath(path), "", ""
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, fields[2]
    return fstype in _NETWORK_FS or fstype.startswith("fuse")


# Without the compiled copy loop, a document part of at least this many tokens is copied as
# one slice (one memcpy); shorter ones together through one index array. Measured on
# 167,000 documents of ~300 tokens: a slice copy costs about what an index of 64 tokens does
# (building the index is most of a gather's cost), so all-index gathering took 3x the CPU
# of slices, and a threshold of 64 beat 256 by ~10%.
SLICE_TOKENS = 64


def _load_malloc_trim() -> Callable[..., int] | None:
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes = [ctypes.c_size_t]
    return fn


_malloc_trim = _load_malloc_trim()


def release_memory() -> None:
    """Give the memory a finished unit freed back to the system: a worker runs unit after
    unit, and the C heap (numpy's temporaries) and Arrow's allocator otherwise keep what
    the largest unit needed (measured: 20-45 MB per worker on ~1 KB documents)."""

    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    if _malloc_trim is not None:
        _malloc_trim(0)


# Documents closer than this in a file are read with one read (through a scratch buffer)
# rather than one read each: a system call costs about as much as copying 16 KiB.
_GAP_BYTES = 16 << 10


def read_spans(
    path: Path, offsets: np.ndarray, nbytes: np.ndarray, out: np.ndarray, *, span: int
) -> None:
    """Read the byte ranges ``[offsets[k], offsets[k] + nbytes[k])`` (ascending, not
    overlapping) of ``path`` back to back into ``out``. Ranges closer than _GAP_BYTES are
    read together, at most ``span`` bytes at a time, through a scratch buffer (a range
    longer than that is read straight into ``out``); no memory map: its fault-around would
    map, and count in RSS, far more than the documents. Read-ahead is turned off for the
    file: the reads say exactly what is needed. The loop over the ranges (one positioned
    read per group, one memcpy per range) is compiled, so a bucket of a million small
    documents costs system calls, not Python."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    nbytes = np.ascontiguousarray(nbytes, dtype=np.int64)
    ends = offsets + nbytes
    if offsets.size and (
        int(offsets.min()) < 0 or int(nbytes.min()) < 0 or (offsets[1:] < ends[:-1]).any()
    ):
        raise ValueError(f"{path}: ranges must be ascending and not overlap")
    if int(nbytes.sum()) > out.nbytes or not out.flags.c_contiguous:
        raise ValueError(f"{path}: ranges do not fit the output array")
    lib = _copy_kernel()
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        if lib is None:
            _read_spans_py(fd, path, offsets, nbytes, out, span)
            return
        scratch = np.empty(span, dtype=np.uint8)
        where = np.zeros(1, dtype=np.int64)
        rc = lib.sy_read_ranges(
            fd,
            offsets.ctypes.data,
            nbytes.ctypes.data,
            offsets.size,
            out.ctypes.data,
            scratch.ctypes.data,
            span,
            _GAP_BYTES,
            where.ctypes.data,
        )
    finally:
        os.close(fd)
    if rc < 0:
        raise ManifestError(f"{path}: ends before offset {int(where[0])}; changed since pass 1?")
    if rc > 0:
        raise OSError(rc, f"{path}: {os.strerror(rc)} reading at offset {int(where[0])}")


def _read_spans_py(
    fd: int, path: Path, offsets: np.ndarray, nbytes: np.ndarray, out: np.ndarray, span: int
) -> None:
    """``read_spans`` without a C compiler: the same reads, looped in Python."""
    dst = out.data.cast("B")
    # Gather whole tokens, not bytes, when every range is token-aligned (always, for
    # IndexedDataset pointers): an index per token is itemsize times fewer than per byte.
    unit = out.dtype.itemsize
    if unit > 1 and ((offsets % unit).any() or (nbytes % unit).any()):
        unit = 1
    gather_dtype = out.dtype if unit > 1 else np.uint8
    ends = offsets + nbytes
    # Runs of ranges with gaps under _GAP_BYTES, each at most ``span`` bytes long.
    breaks = np.flatnonzero(offsets[1:] - ends[:-1] > _GAP_BYTES) + 1
    bounds = [0, *breaks.tolist(), offsets.size]
    scratch = None
    at = 0
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        while lo < hi:
            # The longest prefix of the run within one span (at least one range).
            stop = lo + 1
            limit = int(offsets[lo]) + span
            stop = max(stop, int(np.searchsorted(ends[lo:hi], limit, side="right")) + lo)
            first, last = int(offsets[lo]), int(ends[stop - 1])
            want = int(nbytes[lo:stop].sum())
            if last - first == want:  # contiguous: straight into place
                _pread_into(fd, dst[at : at + want], first, path)
            else:
                if scratch is None or scratch.nbytes < last - first:
                    scratch = np.empty(span, dtype=np.uint8)
                _pread_into(fd, scratch.data[: last - first], first, path)
                gather(
                    scratch[: last - first].view(gather_dtype),
                    (offsets[lo:stop] - first) // unit,
                    nbytes[lo:stop] // unit,
                    np.frombuffer(dst[at : at + want], dtype=gather_dtype),
                )
            at += want
            lo = stop


def gather(src: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
    """``out`` = the ranges ``src[starts[k] : starts[k] + lengths[k]]`` back to back."""
    at = np.zeros(lengths.size, dtype=np.int64)
    if lengths.size > 1:
        np.cumsum(lengths[:-1], out=at[1:])
    copy_ranges(out, at, src, starts, lengths)


def copy_ranges(
    dst: np.ndarray, dst_at: np.ndarray, src: np.ndarray, src_at: np.ndarray, n: np.ndarray
) -> None:
    """``dst[dst_at[k] : dst_at[k] + n[k]] = src[src_at[k] : src_at[k] + n[k]]`` for every k
    (items of one dtype; ranges checked against both arrays first). One call of a compiled
    loop of memcpy over all ranges, whatever their number and size: per-document work at
    array speed. Without a C compiler: slices for ranges of at least SLICE_TOKENS items
    and one index array for the shorter ones (same bytes)."""
    dst_at = np.ascontiguousarray(dst_at, dtype=np.int64)
    src_at = np.ascontiguousarray(src_at, dtype=np.int64)
    n = np.ascontiguousarray(n, dtype=np.int64)
    if not n.size:
        return
    if src.dtype.itemsize != dst.dtype.itemsize or not (
        dst.flags.c_contiguous and src.flags.c_contiguous and dst.flags.writeable
    ):
        raise ValueError("copy_ranges needs contiguous arrays of one item size")
    if (
        int(n.min()) < 0
        or int(dst_at.min()) < 0
        or int(src_at.min()) < 0
        or int((dst_at + n).max()) > dst.size
        or int((src_at + n).max()) > src.size
    ):
        raise ValueError("copy_ranges: a range is outside its array")
    lib = _copy_kernel()
    if lib is None:
        _copy_ranges_py(dst, dst_at, src, src_at, n)
    else:
        lib.sy_copy_ranges(
            dst.ctypes.data,
            dst_at.ctypes.data,
            src.ctypes.data,
            src_at.ctypes.data,
            n.ctypes.data,
            n.size,
            dst.dtype.itemsize,
        )


def _copy_ranges_py(
    dst: np.ndarray, dst_at: np.ndarray, src: np.ndarray, src_at: np.ndarray, n: np.ndarray
) -> None:
    """``copy_ranges`` without a C compiler (same bytes)."""
    long = n >= SLICE_TOKENS
    for d, s, m in zip(dst_at[long].tolist(), src_at[long].tolist(), n[long].tolist(), strict=True):
        dst[d : d + m] = src[s : s + m]
    short = ~long & (n > 0)
    if short.any():
        dst[pack.ranges(dst_at[short], n[short])] = src[pack.ranges(src_at[short], n[short])]


_COPY_SOURCE = r"""
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

void sy_copy_ranges(char *dst, const int64_t *dst_at, const char *src, const int64_t *src_at,
                    const int64_t *n, int64_t count, int64_t itemsize) {
    for (int64_t k = 0; k < count; ++k)
        memcpy(dst + dst_at[k] * itemsize, src + src_at[k] * itemsize,
               (size_t)(n[k] * itemsize));
}

/* 0, or -1 at end of file, or errno; *where is the offset that failed. */
static int read_full(int fd, char *buf, int64_t n, int64_t off, int64_t *where) {
    while (n > 0) {
        ssize_t r = pread(fd, buf, (size_t)n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            *where = off;
            return errno;
        }
        if (r == 0) {
            *where = off;
            return -1;
        }
        buf += r;
        n -= r;
        off += r;
    }
    return 0;
}

/* Range k: len[k] bytes at off[k] of file fds[file[k]] to dst + dst_at[k]; any order. */
int sy_pread_ranges(const int *fds, const int64_t *file, const int64_t *off, const int64_t *len,
                    const int64_t *dst_at, int64_t count, char *dst, int64_t *where) {
    for (int64_t k = 0; k < count; ++k) {
        int rc = read_full(fds[file[k]], dst + dst_at[k], len[k], off[k], where);
        if (rc) {
            where[1] = k;
            return rc;
        }
    }
    return 0;
}

/* The ranges [off[k], off[k] + len[k]) (ascending, not overlapping) back to back into dst:
   ranges less than gap bytes apart are read with one pread of at most span bytes into
   scratch, then copied out; a lone or contiguous group is read straight into dst. */
int sy_read_ranges(int fd, const int64_t *off, const int64_t *len, int64_t count, char *dst,
                   char *scratch, int64_t span, int64_t gap, int64_t *where) {
    int64_t at = 0, lo = 0;
    while (lo < count) {
        int64_t first = off[lo], last = off[lo] + len[lo], want = len[lo], stop = lo + 1;
        while (stop < count && off[stop] - last <= gap && off[stop] + len[stop] - first <= span) {
            last = off[stop] + len[stop];
            want += len[stop];
            ++stop;
        }
        int rc;
        if (last - first == want) {
            rc = read_full(fd, dst + at, want, first, where);
            if (rc) return rc;
            at += want;
        } else {
            rc = read_full(fd, scratch, last - first, first, where);
            if (rc) return rc;
            for (int64_t k = lo; k < stop; ++k) {
                memcpy(dst + at, scratch + (off[k] - first), (size_t)len[k]);
                at += len[k];
            }
        }
        lo = stop;
    }
    return 0;
}
"""


def _copy_kernel() -> ctypes.CDLL | None:
    lib = compile_kernel("copy_ranges", _COPY_SOURCE, ["-O2", "-fPIC", "-shared"])
    if lib is not None and not getattr(lib, "_sy_typed", False):
        p, i64 = ctypes.c_void_p, ctypes.c_int64
        lib.sy_copy_ranges.argtypes = [p, p, p, p, p, i64, i64]
        lib.sy_copy_ranges.restype = None
        lib.sy_read_ranges.argtypes = [ctypes.c_int, p, p, i64, p, p, i64, i64, p]
        lib.sy_read_ranges.restype = ctypes.c_int
        lib.sy_pread_ranges.argtypes = [p, p, p, p, p, i64, p, p]
        lib.sy_pread_ranges.restype = ctypes.c_int
        lib._sy_typed = True  # type: ignore[attr-defined]  # a mark on the loaded library
    return lib


# A pass-2 unit's positioned reads run in this many threads: the kernel's work per read
# (the page-cache lookup and the copy, 1-2 us for a ~1 KB document; most of pass 2's CPU)
# goes on in parallel where a core is free, while the writer thread mostly waits on the
# disk. Each thread reads through descriptors of its own (one shared open file's
# reference count would bounce between the cores at every read).
READ_THREADS = 2
# Fewer document parts than this in a window are read by one thread.
_SPLIT_MIN = 256


class FileDocuments:
    """Documents concatenated into one stream, in order, read from files: document d is
    ``lengths[d]`` items at byte ``offsets[d]`` of ``paths[file[d]]``, preceded by the
    token ``head`` (a BOS) if it is not None. ``fill`` reads any window of the stream
    straight into place, one positioned read per document part (compiled loops, the
    window's parts split between READ_THREADS threads): no copy of the documents is held,
    in any order; the page cache serves the random reads. Used as a context manager (it
    holds the files open)."""

    def __init__(
        self,
        paths: list,
        file: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        itemsize: int,
        head: int | None = None,
    ):
        self.paths, self.head, self.itemsize = [str(p) for p in paths], head, itemsize
        self.file = np.ascontiguousarray(file, dtype=np.int64)
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.out_start, self.out_end, self.total = stream_bounds(self.lengths, head)
        self.fds: list[np.ndarray] = []  # per thread, a descriptor per path
        self.pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> FileDocuments:
        try:
            for _ in range(READ_THREADS):
                fds = np.full(len(self.paths), -1, dtype=np.intc)
                self.fds.append(fds)
                for k, path in enumerate(self.paths):
                    fds[k] = os.open(path, os.O_RDONLY)
                    if hasattr(os, "posix_fadvise"):  # the reads say exactly what is needed
                        os.posix_fadvise(int(fds[k]), 0, 0, os.POSIX_FADV_RANDOM)
        except BaseException:
            self.__exit__()
            raise
        if READ_THREADS > 1:
            self.pool = ThreadPoolExecutor(max_workers=READ_THREADS - 1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
        for fds in self.fds:
            for fd in fds[fds >= 0].tolist():
                os.close(fd)
        self.fds = []

    def fill(self, view: np.ndarray, w0: int) -> None:
        """Read stream positions [w0, w0 + view.size) into ``view`` (C-contiguous);
        positions past the end of the stream are left as they are."""
        window = stream_window(view, w0, self.out_start, self.out_end, self.lengths, self.head)
        if window is None:
            return
        lo, hi, first, at, n = window
        n = n * self.itemsize
        src = self.offsets[lo:hi] + (at - first) * self.itemsize
        dst = (at - w0) * self.itemsize
        file = self.file[lo:hi]
        keep = n > 0
        if not keep.all():
            n, src, dst, file = n[keep], src[keep], dst[keep], file[keep]
        lib = _copy_kernel()
        if lib is None:
            out = view.data.cast("B")
            for f, o, m, d in zip(
                file.tolist(), src.tolist(), n.tolist(), dst.tolist(), strict=True
            ):
                _pread_into(int(self.fds[0][f]), out[d : d + m], o, Path(self.paths[f]))
            return
        pool = self.pool
        parts = READ_THREADS if pool is not None and n.size >= _SPLIT_MIN else 1
        cuts = [n.size * t // parts for t in range(parts + 1)]
        pieces = [[a[cuts[t] : cuts[t + 1]] for a in (file, src, n, dst)] for t in range(parts)]
        futures = [
            pool.submit(self._pread, lib, t, view, *pieces[t])
            for t in range(1, parts)
            if pool is not None
        ]
        try:
            self._pread(lib, 0, view, *pieces[0])
        finally:
            wait(futures)  # every read into ``view`` ends before the caller may free it
        for fut in futures:
            fut.result()

    def _pread(
        self,
        lib: ctypes.CDLL,
        thread: int,
        view: np.ndarray,
        file: np.ndarray,
        src: np.ndarray,
        n: np.ndarray,
        dst: np.ndarray,
    ) -> None:
        """One compiled loop of positioned reads (part k: ``n[k]`` bytes at ``src[k]`` of
        file ``file[k]`` to byte ``dst[k]`` of ``view``) through thread ``thread``'s
        descriptors."""
        file, src, n, dst = (np.ascontiguousarray(a, dtype=np.int64) for a in (file, src, n, dst))
        where = np.zeros(2, dtype=np.int64)
        rc = lib.sy_pread_ranges(
            self.fds[thread].ctypes.data,
            file.ctypes.data,
            src.ctypes.data,
            n.ctypes.data,
            dst.ctypes.data,
            n.size,
            view.ctypes.data,
            where.ctypes.data,
        )
        if rc:
            path = self.paths[int(file[int(where[1])])]
            if rc < 0:
                raise ManifestError(f"{path}: ends before offset {int(where[0])}; changed?")
            raise OSError(rc, f"{path}: {os.strerror(rc)} reading at offset {int(where[0])}")


def _pread_into(fd: int, view: memoryview, offset: int, path: Path) -> None:
    while view.nbytes:
        n = os.preadv(fd, [view], offset)
        if n == 0:
            raise ManifestError(f"{path}: ends before offset {offset}; changed since pass 1?")
        view, offset = view[n:], offset + n


def stream_bounds(lengths: np.ndarray, head: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Where each document of a packed stream starts and ends (its ``head`` token, a BOS,
    first when set) and the stream's length, documents back to back in order."""
    h = int(head is not None)
    out_start = np.zeros(lengths.size, dtype=np.int64)
    if lengths.size > 1:
        np.cumsum(lengths[:-1] + h, out=out_start[1:])
    out_end = out_start + lengths + h
    return out_start, out_end, int(out_end[-1]) if lengths.size else 0


def stream_window(
    view: np.ndarray,
    w0: int,
    out_start: np.ndarray,
    out_end: np.ndarray,
    lengths: np.ndarray,
    head: int | None,
) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray] | None:
    """The documents of a packed stream that overlap positions [w0, w0 + view.size): their
    index range ``lo:hi``, where each one's tokens start in the stream (``first``, after its
    ``head`` token, which is written into ``view`` here), where the copy into the window
    starts (``at``) and how many tokens it copies (``n``). None when none overlaps. Each
    document occupies [out_start, out_end) of the stream, ``head`` (a BOS) first if set."""
    w1 = w0 + view.size
    lo = int(np.searchsorted(out_end, w0, side="right"))
    hi = int(np.searchsorted(out_start, w1, side="left"))
    if lo >= hi:
        return None
    first = out_start[lo:hi]
    if head is not None:
        heads = first[first >= w0]
        view[heads - w0] = head
        first = first + 1
    at = np.maximum(first, w0)
    n = np.minimum(first + lengths[lo:hi], w1) - at
    return lo, hi, first, at, n


def file_entry(path: Path, rel: str) -> dict[str, Any]:
    """``verify.file_entry``'s entry (size, xxh3, per-block xxh3), hashed through mmap so
    that checksumming needs no read buffer, in one pass, a block at a time."""
    size = path.stat().st_size
    block = verify.block_size_for(size)
    if size == 0:
        return {
            "path": rel,
            "size": 0,
            "xxh3": xxhash.xxh3_64_hexdigest(b""),
            "block_size": block,
            "blocks": "",
        }
    whole = xxhash.xxh3_64()
    parts = []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        view = memoryview(m)
        try:
            for i in range(0, size, block):
                whole.update(view[i : i + block])
                parts.append(xxhash.xxh3_64_hexdigest(view[i : i + block]))
                # One pass, the block's pages dropped from this process once hashed (they
                # stay cached): a large documents table would otherwise stay resident.
                m.madvise(mmap.MADV_DONTNEED, i, min(block, size - i))
        finally:
            view.release()
    return {
        "path": rel,
        "size": size,
        "xxh3": whole.hexdigest(),
        "block_size": block,
        "blocks": "".join(parts),
    }


def write_run(path: str | os.PathLike, docs: pa.Table) -> None:
    """Write a table of documents sorted by bucket (pass 1's, the merge's) as one Arrow IPC
    file, durable: a unit's completion marker never points at files a crash could have
    lost."""
    import pyarrow as pa

    with (
        atomic.atomic_path(path) as tmp,
        pa.OSFile(str(tmp), "wb") as sink,
        pa.ipc.new_file(sink, docs.schema) as w,
    ):
        w.write_table(docs, max_chunksize=1 << 20)

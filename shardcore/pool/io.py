"""File input and output for the pool: mount detection, early writeback, positioned span
reads with an in-memory gather, and checksummed file entries."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from shardcore import pack, verify
from shardcore.errors import ManifestError

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


# A document part of at least this many tokens is copied as one slice (one memcpy); shorter
# ones are gathered together through one index array per source. Measured on 167,000
# documents of ~300 tokens: a slice copy costs about what an index of 64 tokens does
# (building the index is most of a gather's cost), so all-index gathering took 3x the CPU
# of slices, and a threshold of 64 beat 256 by ~10%.
SLICE_TOKENS = 64
_SYNC_FILE_RANGE_WRITE = 2


def write_all(f, arr: np.ndarray) -> None:
    view = memoryview(arr).cast("B")
    while view.nbytes:
        view = view[f.write(view) :]


def _load_sync_file_range():
    try:
        import ctypes

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


# Documents closer than this in a file are read with one read (through a scratch buffer)
# rather than one read each: a system call costs about as much as copying 16 KiB.
_GAP_BYTES = 16 << 10


def read_spans(
    path: Path, offsets: np.ndarray, nbytes: np.ndarray, out: np.ndarray, *, span: int
) -> None:
    """Read the byte ranges ``[offsets[k], offsets[k] + nbytes[k])`` (ascending) of ``path``
    back to back into ``out``, with positioned reads of at most ``span`` bytes through a
    scratch buffer (a range longer than that is read straight into ``out``) (no memory map: its fault-around
    would map, and count in RSS, far more than the documents). Read-ahead is turned off
    for the file: the reads say exactly what is needed."""
    dst = memoryview(out).cast("B")
    offsets = np.asarray(offsets, dtype=np.int64)
    nbytes = np.asarray(nbytes, dtype=np.int64)
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
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
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
                    _pread_into(fd, memoryview(scratch)[: last - first], first, path)
                    gather(
                        scratch[: last - first].view(gather_dtype),
                        (offsets[lo:stop] - first) // unit,
                        nbytes[lo:stop] // unit,
                        np.frombuffer(dst[at : at + want], dtype=gather_dtype),
                    )
                at += want
                lo = stop
    finally:
        os.close(fd)


def gather(src: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
    """``out`` = the ranges ``src[starts[k] : starts[k] + lengths[k]]`` back to back. Ranges
    of at least SLICE_TOKENS items are copied as slices (one memcpy each: under 1 us per
    range, cheaper than an index of that many items); the shorter ones together through
    one index array."""
    ends = np.cumsum(lengths)
    at = ends - lengths
    long = lengths >= SLICE_TOKENS
    for d, s, m in zip(
        at[long].tolist(), starts[long].tolist(), lengths[long].tolist(), strict=True
    ):
        out[d : d + m] = src[s : s + m]
    short = ~long
    if short.any():
        out[pack.ranges(at[short], lengths[short])] = src[
            pack.ranges(starts[short], lengths[short])
        ]


def _pread_into(fd: int, view: memoryview, offset: int, path: Path) -> None:
    while view.nbytes:
        n = os.preadv(fd, [view], offset)
        if n == 0:
            raise ManifestError(f"{path}: ends before offset {offset}; changed since pass 1?")
        view, offset = view[n:], offset + n


def _staged_sources(
    parts: list[tuple], lengths: np.ndarray, dtype: np.dtype
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The "tokens" staging: the bucket's slice of every pass-1 tokens file, read sequentially
    straight into one array (the bucket's memory)."""
    bucket_tokens = np.empty(int(lengths.sum()), dtype=dtype)
    at = 0
    for _, _, path, t0, t1 in parts:
        with open(path, "rb") as f:
            f.seek(t0 * dtype.itemsize)
            view = memoryview(bucket_tokens[at : at + t1 - t0]).cast("B")
            if f.readinto(view) != view.nbytes:
                raise ManifestError(f"{path}: shorter than its offsets say")
        at += t1 - t0
    if at != bucket_tokens.size:
        raise ManifestError(f"{parts[0][2].parent}: pass-1 offsets disagree with n_tokens")
    starts = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return [bucket_tokens], np.zeros(lengths.size, dtype=np.int64), starts


def file_entry(path: Path, rel: str) -> dict[str, Any]:
    """``verify.file_entry``'s entry (size, xxh3, per-block xxh3), hashed through mmap so
    that checksumming needs no read buffer."""
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
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        view = memoryview(m)
        try:
            whole = xxhash.xxh3_64_hexdigest(view)
            blocks = "".join(
                xxhash.xxh3_64_hexdigest(view[i : i + block]) for i in range(0, size, block)
            )
        finally:
            view.release()
    return {"path": rel, "size": size, "xxh3": whole, "block_size": block, "blocks": blocks}

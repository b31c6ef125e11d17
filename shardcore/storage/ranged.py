"""A file of an artifact on object storage read by checked ranges: a schedule column
of a mixture (``RangedColumn``), a Parquet file of a pool's documents table (``RangedFile``).

A question about a few samples of a schedule (where a run resumes, how often a pool was read
before a sample, where an epoch starts) needs the per-chunk counts and at most a chunk of a
column; copying the whole schedule first (10 bytes a sample: 20 GB at 2^31 samples) to
answer it is what ``RangedColumn`` avoids. It reads the whole blocks of the manifest's block
checksums that cover the samples asked for, checks each against its checksum (a damaged or
replaced object is an error naming the file and the block, never a wrong answer) and keeps
the last blocks read, so that consecutive questions about one chunk read it once. The
blocks a read needs and does not hold are fetched in one ranged request per run of them.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, SupportsIndex

import numpy as np
import xxhash

from shardcore import storage
from shardcore.errors import CorruptDataError, ManifestError

if TYPE_CHECKING:
    from numpy.typing import DTypeLike
    from typing_extensions import Buffer

# Bytes of blocks kept per column (at least the last block read): the blocks of a chunk of
# the pool column (2^23 samples, 16 MiB) stay between the questions asked about it.
BYTES_KEPT = 48 << 20


class CheckedRanges:
    """Bytes of the file ``entry["path"]`` of the artifact at ``url`` by ranges: the whole
    blocks of the manifest's block checksums that cover them, each checked, the last ones
    read kept (``BYTES_KEPT``)."""

    def __init__(self, url: str, entry: dict[str, Any]):
        self.url, self.key = url, str(entry["path"])
        self.store = storage.open_store(url)
        self.size = int(entry["size"])
        if not entry.get("block_size"):
            raise ManifestError(f"{url}: {self.key} has no block checksums to read it by ranges")
        self.block_size = int(entry["block_size"])
        hexes = entry["blocks"]
        self.sums = [hexes[i : i + 16] for i in range(0, len(hexes), 16)]
        if len(self.sums) != -(-self.size // self.block_size):
            raise ManifestError(f"{url}: {self.key}: {len(self.sums)} block checksums")
        self._kept: OrderedDict[int, bytes] = OrderedDict()
        self._kept_bytes = 0

    def _fetch(self, first: int, last: int) -> None:
        """Blocks [first, last] in one ranged read, each checked against its checksum."""
        start = first * self.block_size
        data = self.store.read_range(self.key, start, min((last + 1) * self.block_size, self.size))
        for b in range(first, last + 1):
            piece = data[(b - first) * self.block_size : (b - first + 1) * self.block_size]
            if xxhash.xxh3_64_hexdigest(piece) != self.sums[b]:
                at = b * self.block_size
                raise CorruptDataError(
                    f"{self.url}: {self.key}: block {b} (bytes {at}-{at + len(piece)}) does "
                    "not match its checksum in the manifest"
                )
            self._keep(b, piece)

    def _keep(self, b: int, piece: bytes) -> None:
        self._kept[b] = piece
        self._kept_bytes += len(piece)
        while self._kept_bytes > BYTES_KEPT and len(self._kept) > 1:
            _, old = self._kept.popitem(last=False)
            self._kept_bytes -= len(old)

    def _bytes(self, start: int, stop: int) -> bytes:
        if start >= stop:
            return b""
        first, last = start // self.block_size, (stop - 1) // self.block_size
        b = first
        while b <= last:  # each run of blocks not kept: one read
            if b in self._kept:
                b += 1
                continue
            end = b
            while end + 1 <= last and end + 1 not in self._kept:
                end += 1
            self._fetch(b, end)
            b = end + 1
        parts = []
        for b in range(first, last + 1):
            self._kept.move_to_end(b)
            parts.append(self._kept[b])
        data = b"".join(parts)
        return data[start - first * self.block_size : stop - first * self.block_size]


class RangedColumn(CheckedRanges):
    """The one-dimensional ``.npy`` file ``entry["path"]`` of the artifact at ``url``:
    ``len``, ``dtype``, items and slices (step 1) as numpy arrays, ``np.asarray`` of the whole."""

    def __init__(self, url: str, entry: dict[str, Any]):
        super().__init__(url, entry)
        head = self._bytes(0, min(self.size, self.block_size))
        f = io.BytesIO(head)
        shape, fortran, dtype = _header(f)
        if len(shape) != 1 or fortran:
            raise ManifestError(f"{url}: {self.key} is not a one-dimensional column")
        self.dtype, self.offset, self.length = np.dtype(dtype), f.tell(), int(shape[0])
        if self.offset + self.length * self.dtype.itemsize != self.size:
            raise CorruptDataError(f"{url}: {self.key}: its header does not match its size")

    def __len__(self) -> int:
        return self.length

    @property
    def shape(self) -> tuple[int]:
        return (self.length,)

    def __getitem__(self, index: SupportsIndex | slice) -> Any:  # an array, or a numpy scalar
        if isinstance(index, slice):
            lo, hi, step = index.indices(self.length)
            if step != 1:
                raise IndexError(f"{self.key}: slices with a step are not read by ranges")
            hi = max(hi, lo)
        else:
            lo = int(index) + (self.length if int(index) < 0 else 0)
            if not 0 <= lo < self.length:
                raise IndexError(f"{self.key}: index {index} out of range [0, {self.length})")
            hi = lo + 1
        n = self.dtype.itemsize
        out = np.frombuffer(self._bytes(self.offset + lo * n, self.offset + hi * n), self.dtype)
        return out if isinstance(index, slice) else out[0]

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)


class RangedFile(io.RawIOBase):
    """The file ``entry["path"]`` of the artifact at ``url`` as a read-only seekable binary
    file (what pyarrow's ``ParquetFile`` reads: the footer, then the column chunks asked
    for), each read served by ``CheckedRanges``: never the whole object unless read whole."""

    def __init__(self, url: str, entry: dict[str, Any]):
        super().__init__()
        self.ranges = CheckedRanges(url, entry)
        self.name = f"{url}/{entry['path']}"
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self.ranges.size}[whence]
        if base + offset < 0:
            raise ValueError(f"{self.name}: seek before the start")
        self._at = base + offset
        return self._at

    def readinto(self, buffer: Buffer) -> int:
        view = memoryview(buffer)
        stop = min(self._at + len(view), self.ranges.size)
        data = self.ranges._bytes(self._at, stop)
        view[: len(data)] = data
        self._at += len(data)
        return len(data)


def _header(f: io.BytesIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    major, _ = np.lib.format.read_magic(f)
    if major == 1:
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


def load_checked(url: str, entry: dict[str, Any]) -> np.ndarray:
    """The whole ``.npy`` file ``entry["path"]`` of the artifact at ``url`` (a small one:
    the per-chunk counts), checked against the manifest's checksum of the file."""
    return np.load(io.BytesIO(storage.read_checked(url, entry)), allow_pickle=False)

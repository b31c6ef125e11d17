"""The shard table of a format-3 manifest (``manifest.shards``) and its block checksums
(``manifest.blocks``), read where they lie: ``ShardTable`` reads the values asked for
(positioned reads of a local file, range reads of a remote one), and the views
``read_manifest`` returns in a manifest dict's place of its ``shards``, ``files`` and
``cumulative_records`` lists (``ShardsView``, ``FilesView``, ``RecordsColumn``). Both files
are laid out in ``shardcore.formats``; ``shardcore.manifest`` writes them."""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import struct
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import xxhash

from shardcore import formats
from shardcore.errors import ManifestError

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

TABLE_NAME = "manifest.shards"
BLOCKS_NAME = "manifest.blocks"


def _blocks_hex(values: np.ndarray) -> str:
    """xxh3-64 values as the concatenated 16-digit hex of format 2 (``hexdigest`` is the
    big-endian hex of the value)."""
    return np.asarray(values, dtype=np.uint64).astype(">u8").tobytes().hex()


def _close_all(fds: dict[str, int]) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)


# struct codes of the table's dtypes at their standard (little-endian) sizes
_STRUCT_CODES = {
    ("i", 8): "q",
    ("u", 8): "Q",
    ("i", 4): "i",
    ("u", 4): "I",
    ("f", 8): "d",
    ("u", 1): "B",
}


class ShardTable:
    """The shard table and block checksums of a format-3 manifest. Local files are read
    with positioned reads (``os.pread``) of the values asked for, and memory-mapped only
    for a column a caller takes whole: a mapped page counts in the reader's resident set
    once touched, and the kernel maps whole folios of cached file pages around it; remote
    ones are range-read, a column (checked against its xxh3) or one file's checksums at a
    time."""

    def __init__(self, layout: dict[str, Any], source: Any, where: str):
        self.layout = layout
        self.rows = int(layout["table"]["rows"])
        self.where = where
        self._source = source
        self._local = isinstance(source, str | os.PathLike)
        self._files: dict[str, int] = {}
        # The descriptors close when the table is collected (no ResourceWarning).
        weakref.finalize(self, _close_all, self._files)
        self._maps: dict[str, Any] = {}
        self._columns: dict[str, np.ndarray] = {}
        self._cell_specs: dict[str, tuple[struct.Struct, int, int]] = {}
        self._specs = layout["table"]["columns"]
        self.names = layout.get("names")
        self.fields = list(layout.get("shard_fields") or [])
        self.suffixes = list(layout.get("suffixes") or [])
        self.extra = list(layout.get("extra_files") or [])
        if self._local:
            # Opened now: the views stay readable if the directory is removed or replaced
            # after the manifest was read.
            for part in ("table", "blocks"):
                self._open(part)

    def _open(self, part: str) -> int:
        if part not in self._files:
            desc = self.layout[part]
            path = Path(self._source) / desc["path"]
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                raise ManifestError(f"{path}: missing ({self.where} lists it)") from None
            size = os.fstat(fd).st_size
            if size != desc["size"]:
                os.close(fd)
                raise ManifestError(f"{path}: {size} bytes, {self.where} says {desc['size']}")
            self._files[part] = fd
        return self._files[part]

    def _map(self, part: str) -> mmap.mmap | bytes:
        if part not in self._maps:
            f = self._open(part)
            size = self.layout[part]["size"]
            self._maps[part] = mmap.mmap(f, 0, access=mmap.ACCESS_READ) if size else b""
        return self._maps[part]

    def _spec(self, name: str) -> dict[str, Any]:
        spec = self._specs.get(name)
        if spec is None:
            raise ManifestError(f"{self.where}: the shard table has no column {name!r}")
        return spec

    def column(self, name: str) -> np.ndarray:
        """A column of the shard table, whole (read-only; local: memory-mapped)."""
        if name not in self._columns:
            spec = self._spec(name)
            if self._local:
                self._columns[name] = formats.table_column(self._map("table"), spec, self.where)
            else:
                nbytes = spec["length"] * np.dtype(spec["dtype"]).itemsize
                raw = (
                    self._source.read_range(TABLE_NAME, spec["offset"], spec["offset"] + nbytes)
                    if nbytes
                    else b""
                )
                if xxhash.xxh3_64_hexdigest(raw) != spec["xxh3"]:
                    raise ManifestError(
                        f"{self._source.location(TABLE_NAME)}: column {name!r} does not match "
                        f"its checksum in {self.where}"
                    )
                self._columns[name] = formats.table_column(raw, {**spec, "offset": 0}, self.where)
        return self._columns[name]

    def cells(self, name: str, lo: int, hi: int) -> np.ndarray:
        """Values [lo, hi) of a column (local: one positioned read)."""
        spec = self._spec(name)
        if not 0 <= lo <= hi <= spec["length"]:
            raise IndexError(f"{self.where}: rows [{lo}, {hi}) of column {name!r}")
        if not self._local or name in self._columns:
            return self.column(name)[lo:hi]
        dtype = np.dtype(spec["dtype"])
        raw = os.pread(
            self._files["table"],
            (hi - lo) * dtype.itemsize,
            spec["offset"] + lo * dtype.itemsize,
        )
        if len(raw) != (hi - lo) * dtype.itemsize:
            raise ManifestError(f"{self.where}: the shard table ends early (column {name!r})")
        return np.frombuffer(raw, dtype=dtype)

    def cell(self, name: str, row: int) -> int | float:
        """One value of a column, as a Python number (local: one positioned read)."""
        if not self._local or name in self._columns:
            return self.cells(name, row, row + 1)[0].item()
        found = self._cell_specs.get(name)
        if found is None:
            spec = self._spec(name)
            dtype = np.dtype(spec["dtype"])
            code = _STRUCT_CODES[(dtype.kind, dtype.itemsize)]
            found = (struct.Struct("<" + code), spec["offset"], spec["length"])
            self._cell_specs[name] = found
        fmt, offset, length = found
        if not 0 <= row < length:
            raise IndexError(f"{self.where}: row {row} of column {name!r} ({length} rows)")
        raw = os.pread(self._files["table"], fmt.size, offset + row * fmt.size)
        if len(raw) != fmt.size:
            raise ManifestError(f"{self.where}: the shard table ends early (column {name!r})")
        return fmt.unpack(raw)[0]

    def search(self, name: str, value: int, side: str = "left") -> int:
        """``np.searchsorted`` of an ascending column, one positioned read per step."""
        lo, hi = 0, int(self._spec(name)["length"])
        if not self._local:
            return int(np.searchsorted(self.column(name), value, side=side))  # type: ignore[call-overload]
        while hi - lo > 512:  # then one read of at most 4 KB finishes the search
            mid = (lo + hi) // 2
            v = self.cell(name, mid)
            if v < value or (side == "right" and v == value):
                lo = mid + 1
            else:
                hi = mid
        return lo + int(np.searchsorted(self.cells(name, lo, hi), value, side=side))  # type: ignore[call-overload]

    def blocks(self, first: int, count: int) -> np.ndarray:
        """``count`` block checksums from ``first`` (u64)."""
        if count <= 0:
            return np.zeros(0, dtype=np.uint64)
        if self._local:
            raw = os.pread(self._files["blocks"], 8 * count, 8 * first)
        else:
            raw = self._source.read_range(BLOCKS_NAME, 8 * first, 8 * (first + count))
        if len(raw) != 8 * count:
            raise ManifestError(f"{self.where}: the block checksums end early")
        return np.frombuffer(raw, dtype="<u8")

    def name(self, row: int) -> str:
        if self.names is not None:
            return formats.shard_name(self.names, int(self.cell("key", row)))
        lo, hi = self.cells("name_offsets", row, row + 2).tolist()
        return self.cells("name_bytes", int(lo), int(hi)).tobytes().decode()

    def row_of(self, prefix: str) -> int | None:
        """The row of the shard named ``prefix``, or None."""
        if self.names is not None:
            m = formats._NAME_RE.match(prefix)
            if m is None:
                return None
            key = int(m.group(2))
            i = self.search("key", key)
            if i < self.rows and self.cell("key", i) == key and self.name(i) == prefix:
                return i
            hits = np.flatnonzero(self.column("key") == key)  # keys not ascending
            for i in hits.tolist():
                if self.name(i) == prefix:
                    return i
            return None
        if not hasattr(self, "_name_rows"):
            self._name_rows = {self.name(i): i for i in range(self.rows)}
        return self._name_rows.get(prefix)

    def shard(self, row: int) -> dict[str, Any]:
        out: dict[str, Any] = {"prefix": self.name(row)}
        for f in self.fields:
            out[f] = self.cell(f"field.{f}", row)
        return out

    def file(self, row: int, suffix: str) -> dict[str, Any]:
        """The entry of shard ``row``'s file with ``suffix``."""
        first = int(self.cell(f"block{suffix}", row))
        size = int(self.cell(f"size{suffix}", row))
        bs = int(self.cell(f"block_size{suffix}", row))
        entry = FileEntry(
            path=self.name(row) + suffix,
            size=size,
            xxh3=f"{int(self.cell(f'xxh3{suffix}', row)):016x}",
        )
        if first >= 0:
            entry["block_size"] = bs
            entry._blocks = (self, first, -(-size // bs))
        return entry

    def extra_file(self, k: int) -> dict[str, Any]:
        e = self.extra[k]
        entry = FileEntry(path=e["path"], size=e["size"], xxh3=e["xxh3"])
        if e["block"] >= 0:
            entry["block_size"] = e["block_size"]
            entry._blocks = (self, e["block"], e["block_count"])
        return entry


class FileEntry(dict):
    """A file entry whose block checksums (``"blocks"``) are read when first asked for."""

    _blocks: tuple[ShardTable, int, int] | None = None

    def __missing__(self, key: str) -> Any:
        if key == "blocks" and self._blocks is not None:
            table, first, count = self._blocks
            self["blocks"] = _blocks_hex(table.blocks(first, count))
            return self["blocks"]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (key == "blocks" and self._blocks is not None)

    def __eq__(self, other: object) -> bool:
        if self._blocks is not None and isinstance(other, dict) and "blocks" in other:
            self["blocks"]  # noqa: B018 - read, to compare as the entry format 2 held
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None


class ShardsView(Sequence[dict[str, Any]]):
    """``manifest["shards"]`` of a format-3 manifest: each shard as a dict (``prefix`` and
    its numbers), built from the table when asked for."""

    def __init__(self, table: ShardTable):
        self.table = table

    def __len__(self) -> int:
        return self.table.rows

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self.table.shard(k) for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"shard {i} out of range [0, {n})")
        return self.table.shard(i % n if n else i)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self.table.shard(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def column(self, name: str) -> np.ndarray:
        """A per-shard number as an array (``records``, ``first_record``, ...)."""
        return self.table.column(f"field.{name}")

    def __repr__(self) -> str:
        return f"<{len(self)} shards of {self.table.where}>"


class FilesView(Sequence[dict[str, Any]]):
    """``manifest["files"]`` of a format-3 manifest: entries built from the table when
    asked for, in path order as writers list them: the other files that sort before the
    first shard's, each shard's files (shard by shard, suffixes sorted), the rest."""

    def __init__(self, table: ShardTable):
        self.table = table
        first = table.name(0) + table.suffixes[0] if table.rows and table.suffixes else None
        self._before = sum(1 for e in table.extra if first is None or e["path"] < first)

    def __len__(self) -> int:
        return len(self.table.extra) + self.table.rows * len(self.table.suffixes)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"file {i} out of range [0, {n})")
        i %= n
        if i < self._before:
            return self.table.extra_file(i)
        in_shards = self.table.rows * len(self.table.suffixes)
        if i - self._before >= in_shards:
            return self.table.extra_file(i - in_shards)
        row, k = divmod(i - self._before, len(self.table.suffixes))
        return self.table.file(row, self.table.suffixes[k])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        def whole(e: Mapping[str, Any]) -> dict:
            return {**e, "blocks": e["blocks"]} if "blocks" in e else dict(e)

        return isinstance(other, Sequence) and [whole(e) for e in self] == [whole(e) for e in other]

    def by_path(self) -> FilesByPath:
        return FilesByPath(self.table)

    def __repr__(self) -> str:
        return f"<{len(self)} files of {self.table.where}>"


class FilesByPath(Mapping):
    """``files_by_path`` of a format-3 manifest: an entry by relative path, found by the
    shard's key (a binary search) and the file's suffix."""

    def __init__(self, table: ShardTable):
        self.table = table
        self._extra = {e["path"]: k for k, e in enumerate(table.extra)}

    def __getitem__(self, rel: str) -> dict[str, Any]:
        if rel in self._extra:
            return self.table.extra_file(self._extra[rel])
        head, sep, name = str(rel).rpartition("/")
        stem, dot, _ = name.partition(".")
        if dot:
            prefix = f"{head}{sep}{stem}"
            suffix = str(rel)[len(prefix) :]
            if suffix in self.table.suffixes:
                row = self.table.row_of(prefix)
                if row is not None:
                    return self.table.file(row, suffix)
        raise KeyError(rel)

    def __contains__(self, rel: object) -> bool:
        try:
            self[rel]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return (e["path"] for e in FilesView(self.table))

    def __len__(self) -> int:
        return len(FilesView(self.table))


class RecordsColumn(Sequence[int]):
    """``manifest["cumulative_records"]`` of a format-3 manifest: the table's int64 column
    behaving as the list format 2 stored (items are ints read one at a time, equal to a
    list of the same numbers); ``np.asarray`` of it is the whole column (memory-mapped)."""

    def __init__(self, table: ShardTable, name: str):
        self.table, self.name = table, name
        self._len = int(table._spec(name)["length"])

    @property
    def array(self) -> np.ndarray:
        return self.table.column(self.name)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return self.array[i].tolist()
        if not -self._len <= i < self._len:
            raise IndexError(f"cumulative record count {i} out of range [0, {self._len})")
        return int(self.table.cell(self.name, int(i) % self._len))

    def __iter__(self) -> Iterator[int]:
        for start in range(0, self._len, 1 << 16):
            yield from self.table.cells(
                self.name, start, min(start + (1 << 16), self._len)
            ).tolist()

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        return self.array if dtype is None else self.array.astype(dtype, copy=False)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordsColumn | np.ndarray):
            return np.array_equal(self.array, np.asarray(other))
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"<{len(self)} cumulative record counts>"


def bisect_records(cumulative: Sequence[int] | np.ndarray, record: int) -> int:
    """The shard holding ``record`` given the cumulative record counts (a list or the
    table's memory-mapped column): one binary search, touching log(shards) values."""
    if isinstance(cumulative, RecordsColumn):
        return cumulative.table.search(cumulative.name, record, side="right") - 1
    if isinstance(cumulative, np.ndarray):
        return int(np.searchsorted(cumulative, record, side="right")) - 1
    return bisect.bisect_right(cumulative, record) - 1

"""Atomic writes: a file (or directory) appears at its final path complete, or not at all.

Every file Shardyard renames into place follows one rule:

1. it is written under a temporary name in its final directory,
   ``.<name>.<random>.tmp`` (unique, so two writers of the same path never share one;
   artifact listings skip names ending in ``.tmp``);
2. its bytes are made durable (``fdatasync``; a directory: each file in it, then the
   directory) *before* it is renamed over the final path, so the final name never holds
   a torn file after a crash;
3. the parent directory is fsynced *after* the rename, so the rename itself is durable
   before the caller goes on (writes a manifest, a completion marker, a catalog row);
4. on any error the temporary is deleted and the final path is left as it was.

``durable=False`` skips 2 and 3 and is meant only for scratch files that the same build
deletes (a pool's staged tokens): the rename stays atomic, the bytes may be lost in a
crash, and whoever reads the file must check it (its size against an index).

Usage::

    atomic.write_text(out / "manifest.json", text)
    with atomic.atomic_open(path) as f:       # a handle (np.save, a stream of writes)
        np.save(f, arr)
    with atomic.atomic_path(side) as tmp:     # a path (pq.write_table, a directory)
        pq.write_table(table, tmp)
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import IO, Any

__all__ = [
    "AtomicFile",
    "Batch",
    "atomic_open",
    "atomic_path",
    "fsync_path",
    "remove_temporaries",
    "temp_path",
    "write_bytes",
    "write_text",
]

_datasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def temp_path(path: str | os.PathLike) -> Path:
    """A fresh temporary name next to ``path`` (nothing is created)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")


_TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{12}\.tmp")


def remove_temporaries(root: str | os.PathLike) -> list[Path]:
    """Delete the temporaries (``temp_path`` names) under ``root`` and its subdirectories,
    as a writer killed mid-write (SIGKILL, out of memory) leaves them; returns their paths.
    For the owner of ``root`` once no writer of it runs (a job's finalize): a live
    writer's temporary would go too, and its commit would fail."""
    removed = []
    for dirpath, dirs, files in os.walk(os.fspath(root)):
        for name in [*files, *dirs]:
            if _TEMP_NAME.fullmatch(name):
                path = Path(dirpath) / name
                _discard(path)
                removed.append(path)
        dirs[:] = [d for d in dirs if not _TEMP_NAME.fullmatch(d)]
    return sorted(removed)


def fsync_path(path: str | os.PathLike, *, data_only: bool = False) -> None:
    """fsync a file or a directory (a directory: to make the renames in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        (_datasync if data_only else os.fsync)(fd)
    finally:
        os.close(fd)


def _make_durable(tmp: Path) -> None:
    if tmp.is_dir() and not tmp.is_symlink():
        for dirpath, _dirs, files in os.walk(tmp):
            for name in files:
                p = Path(dirpath) / name
                if not p.is_symlink():
                    fsync_path(p, data_only=True)
            fsync_path(dirpath)
    else:
        fsync_path(tmp, data_only=True)


def _discard(tmp: Path) -> None:
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.unlink(missing_ok=True)


def _commit(tmp: Path, final: Path, durable: bool) -> None:
    if durable:
        _make_durable(tmp)
    os.replace(tmp, final)
    if durable:
        fsync_path(final.parent)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary path for a writer that wants a path (a Parquet or Arrow writer,
    a directory to fill); on success it is made durable and renamed to ``path``. The
    parent directory must exist. A directory cannot replace a non-empty one: remove the
    old one inside the block."""
    final = Path(path)
    tmp = temp_path(final)
    try:
        yield tmp
        _commit(tmp, final, durable)
    except BaseException:
        _discard(tmp)
        raise


class AtomicFile:
    """An open file under a temporary name, renamed to ``path`` by :meth:`commit` and
    deleted by :meth:`discard`: for a writer that stays open across calls (an
    IndexedDataset shard). ``open_kwargs`` go to :func:`open` (``buffering=0`` for
    large numpy writes)."""

    def __init__(
        self, path: str | os.PathLike, mode: str = "wb", *, durable: bool = True, **open_kwargs: Any
    ) -> None:
        if not any(c in mode for c in "wax"):
            raise ValueError(f"AtomicFile mode {mode!r} does not write")
        self.path = Path(path)
        self.tmp = temp_path(self.path)
        self.durable = durable
        self.file: IO[Any] = open(self.tmp, mode, **open_kwargs)  # noqa: SIM115 (closed in commit/discard)
        self.done = False

    def commit(self) -> Path:
        """Flush, make durable, close, rename into place (and make the rename durable)."""
        if self.done:
            return self.path
        try:
            self.file.flush()
            if self.durable:
                _datasync(self.file.fileno())
            self.file.close()
            os.replace(self.tmp, self.path)
            if self.durable:
                fsync_path(self.path.parent)
        except BaseException:
            self.discard()
            raise
        self.done = True
        return self.path

    def discard(self) -> None:
        """Close and delete the temporary; the final path is left as it was."""
        if not self.file.closed:
            self.file.close()
        self.tmp.unlink(missing_ok=True)
        self.done = True

    def __enter__(self) -> IO[Any]:
        return self.file

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def atomic_open(
    path: str | os.PathLike, mode: str = "wb", *, durable: bool = True, **open_kwargs: Any
) -> AtomicFile:
    """``with atomic_open(path, "wb") as f: ...``: write through ``f``; the file appears
    at ``path`` when the block ends without an error."""
    return AtomicFile(path, mode, durable=durable, **open_kwargs)


class Batch:
    """Files that appear together (a unit of work's outputs): each is written under the
    temporary name ``path`` gives, and the block's end commits them all: every file's
    bytes made durable, the fdatasyncs issued at once from threads (a journaling file
    system commits them in one transaction instead of one each), then every rename, then
    one fsync per directory. Each file keeps the module's rule (bytes durable before its
    rename, the rename durable before the block ends); on an error in the block or in a
    sync, every temporary is deleted and no final path changes. Files must be closed by
    the end of the block.

    Usage::

        with atomic.Batch() as batch:
            pq.write_table(table, batch.path(out / "a.parquet"))
            with open(batch.path(out / "b.npy"), "wb") as f:
                np.save(f, arr)
    """

    def __init__(self) -> None:
        self.items: list[tuple[Path, Path]] = []

    def path(self, path: str | os.PathLike) -> Path:
        """The temporary to write ``path``'s bytes to (its final directory must exist)."""
        tmp = temp_path(path)
        self.items.append((tmp, Path(path)))
        return tmp

    def commit(self) -> None:
        if len(self.items) > 1:
            with ThreadPoolExecutor(max_workers=len(self.items)) as pool:
                list(pool.map(_make_durable, [tmp for tmp, _ in self.items]))
        elif self.items:
            _make_durable(self.items[0][0])
        for tmp, final in self.items:
            os.replace(tmp, final)
        for parent in dict.fromkeys(final.parent for _, final in self.items):
            fsync_path(parent)
        self.items = []

    def discard(self) -> None:
        for tmp, _ in self.items:
            _discard(tmp)
        self.items = []

    def __enter__(self) -> Batch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.discard()
            return
        try:
            self.commit()
        except BaseException:
            self.discard()
            raise


def write_bytes(path: str | os.PathLike, data: bytes, *, durable: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    with atomic_open(path, "wb", durable=durable) as f:
        f.write(data)
    return Path(path)


def write_text(
    path: str | os.PathLike, text: str, *, encoding: str = "utf-8", durable: bool = True
) -> Path:
    """Write ``text`` to ``path`` atomically; returns ``path``."""
    return write_bytes(path, text.encode(encoding), durable=durable)

"""The artifact cache: checked local copies of remote artifacts, for the code that
memory-maps, and the publishing of a finished local artifact to a store.

``local_artifact(url)`` returns a local directory holding a finished remote artifact: every
file its manifest lists, checked against the manifest's checksums as it is downloaded, then
the manifest last (so an interrupted download is never taken for a copy). Copies live in
``$SHARDYARD_CACHE/artifacts/<key>/``, named by the artifact's URL and content digest; a
rebuilt artifact at the same URL gets a new copy.

That directory holds at most ``SHARDYARD_ARTIFACT_CACHE_LIMIT`` bytes (default 64GiB;
``none`` for no limit), evicting whole copies, least recently used first:

- **In use.** Each copy has a lock file beside it, ``<key>.lock``. A process using a copy
  holds a shared ``flock`` on it: ``artifact_copy(url)`` returns a ``LocalCopy`` that holds
  it until ``close()`` (or until it is garbage-collected), and ``local_artifact(url)``
  holds it until the innermost ``artifact_scope()`` block of the thread exits (a unit's run
  is one), or outside any such block until the process exits. An evicting process takes
  the lock exclusively without waiting (``LOCK_NB``): a copy that any process on the host
  holds (its forked children included, which share the lock) is skipped, never deleted.
  Evicting renames the copy aside and unlinks its lock file while holding the exclusive
  lock; a process that opened the lock file before that checks, once it holds its shared
  lock, that the file is still the one at that name, and otherwise starts over (and
  downloads the copy again). The kernel drops the locks of a killed process, so a crash
  pins nothing.
- **Recency.** Every use touches the lock file; its modification time orders eviction.
- **Room.** Before a download, under ``.evict.lock`` (one evicting process at a time per
  directory), unused copies are evicted, oldest first, until the copies present, the
  downloads other processes have under way (each writes its copy's full size into its lock
  file) and the new copy fit the limit. Copies other processes hold cannot be evicted: the
  directory then exceeds the limit by them until they are released and a later download
  evicts them. A copy larger than the limit by itself is refused before anything is
  downloaded, with the numbers (``ArtifactCacheError``).
- **Downloads.** Every file appears by atomic rename after its size and xxh3 are checked,
  the manifest last. Processes fetching the same copy take turns on ``<key>.fetch``
  (exclusive ``flock``): the second finds the first's copy finished, or, after a download
  that was killed, keeps the files it checked and renamed into place, deletes its
  temporaries and fetches the rest.

The lock files need a local filesystem (``flock`` is per host): share the cache between
processes of one host, not between hosts.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import xxhash

from shardcore import atomic, config
from shardcore import manifest as mf
from shardcore.errors import InputError, ManifestError
from shardcore.storage import (
    Store,
    cache_root,
    download_checked,
    is_remote,
    open_store,
    resolve,
)

log = logging.getLogger(__name__)


class ArtifactCacheError(InputError):
    """A remote artifact's local copy cannot fit the artifact cache's limit by itself."""


def _digest_of(manifest: dict[str, Any]) -> str:
    return mf.content_digest(manifest)


def _same_file(fd: int, path: Path) -> bool:
    """True if ``path`` still names the file open as ``fd`` (not unlinked or replaced)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _lock(path: Path, how: int) -> int | None:
    """An fd of the file at ``path`` (created if absent) holding ``flock(how)``, checked to
    still be the file at that name once locked; None if ``how`` has LOCK_NB and another
    holder conflicts, or if the file was unlinked meanwhile and LOCK_NB was given."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, how)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        if _same_file(fd, path):
            return fd
        os.close(fd)  # evicted between our open and our lock: the name is a new file now
        if how & fcntl.LOCK_NB:
            return None


@contextlib.contextmanager
def _locked(path: Path, how: int) -> Iterator[int]:
    fd = _lock(path, how)
    assert fd is not None
    try:
        yield fd
    finally:
        os.close(fd)


class LocalCopy:
    """A finished local copy of a remote artifact, in use (never evicted) until ``close()``.
    ``os.fspath(copy)`` and ``copy.path`` are its directory."""

    def __init__(self, path: Path, fd: int):
        self.path = str(path)
        self._fd: int | None = fd

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"LocalCopy({self.path!r}{'' if self._fd is not None else ', closed'})"

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> LocalCopy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:  # noqa: SIM105 - contextlib may be gone at interpreter exit
            self.close()
        except Exception:
            pass


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _reserved(lock: Path) -> int:
    """The full size a downloading process wrote into a copy's lock file (0 if none)."""
    try:
        return int(lock.read_bytes().strip() or 0)
    except (OSError, ValueError):
        return 0


def _evict(root: Path, key: str) -> bool:
    """Delete copy ``key`` unless a process holds it; True if it was deleted."""
    lock = root / f"{key}.lock"
    fd = _lock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if fd is None:
        return False
    aside = root / f".evicted-{key}-{uuid.uuid4().hex[:8]}"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.rename(root / key, aside)
        (root / f"{key}.fetch").unlink(missing_ok=True)
        lock.unlink(missing_ok=True)
    finally:
        os.close(fd)
    shutil.rmtree(aside, ignore_errors=True)
    return True


def _make_room(root: Path, key: str, size: int, limit: int) -> None:
    """Evict unused copies, least recently used first, until the copies present, the other
    processes' downloads under way and ``size`` bytes of copy ``key`` fit ``limit``. Call
    holding ``.evict.lock``."""
    for p in root.glob(".evicted-*"):  # an eviction killed before it finished
        shutil.rmtree(p, ignore_errors=True)
    keys = set()
    for p in root.iterdir():
        if p.name.startswith("."):
            continue
        name = p.name.removesuffix(".lock").removesuffix(".fetch")
        keys.add(name)
    keys.discard(key)
    used = max(size, _tree_bytes(root / key))
    candidates = []
    for k in keys:
        lock, copy = root / f"{k}.lock", root / k
        have = _tree_bytes(copy)
        try:
            recent = lock.stat().st_mtime_ns
        except FileNotFoundError:  # never used by a process that locks: the copy's own time
            try:
                recent = copy.stat().st_mtime_ns
            except FileNotFoundError:
                continue
        probe = _lock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if probe is None:  # in use; if being downloaded, count its full size
            complete = (copy / "manifest.json").exists()
            used += have if complete else max(have, _reserved(lock))
            continue
        os.close(probe)
        used += have
        candidates.append((recent, k, have))
    candidates.sort()
    for _, k, have in candidates:
        if used <= limit:
            break
        if _evict(root, k):
            used -= have
    if used > limit:
        log.warning(
            "%s: %d bytes of artifact copies in use by processes on this host exceed the "
            "limit of %d bytes (SHARDYARD_ARTIFACT_CACHE_LIMIT); they are evicted once released",
            root,
            used,
            limit,
        )


def artifact_copy(
    url: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    limit: int | str | None = None,
) -> LocalCopy:
    """A finished, checked local copy of the remote artifact at ``url``, held in use until
    it is closed (see the module docstring). ``cache_dir`` defaults to
    ``$SHARDYARD_CACHE/artifacts``, ``limit`` to ``SHARDYARD_ARTIFACT_CACHE_LIMIT``."""
    url = resolve(url)
    if not is_remote(url):
        raise ValueError(f"{url}: a local artifact is read where it is, not copied")
    store = open_store(url)
    data = mf.manifest_bytes(store)
    manifest = mf.parse_manifest(data, store.location(mf.MANIFEST_NAME), source=store)
    # The manifest's own table files first (checked against the header), then the files.
    entries = [*mf.sidecar_entries(manifest), *mf.file_entries(manifest)]
    size = (
        sum(int(e.get("size") or 0) for e in mf.sidecar_entries(manifest))
        + mf.total_bytes(manifest)
        + len(data)
    )
    bound = config.artifact_cache_limit(limit)
    key = xxhash.xxh3_64_hexdigest(f"{url}\0{_digest_of(manifest)}".encode())
    root = Path(cache_dir) if cache_dir is not None else cache_root() / "artifacts"
    local = root / key
    root.mkdir(parents=True, exist_ok=True)
    fd = _lock(root / f"{key}.lock", fcntl.LOCK_SH)
    assert fd is not None
    try:
        os.utime(fd)  # most recently used
        if not (local / mf.MANIFEST_NAME).exists():
            if bound is not None and size > bound:
                raise ArtifactCacheError(
                    f"{url}: its local copy needs {size} bytes ({len(entries)} files and the "
                    f"manifest), more than the artifact cache limit of {bound} bytes in {root}; "
                    "raise SHARDYARD_ARTIFACT_CACHE_LIMIT (or set it to none)"
                )
            _download(store, entries, data, root, key, fd, size, bound)
    except BaseException:
        os.close(fd)
        raise
    return LocalCopy(local, fd)


def _download(
    store: Store,
    entries: list[dict[str, Any]],
    data: bytes,
    root: Path,
    key: str,
    fd: int,
    size: int,
    bound: int | None,
) -> None:
    local = root / key
    with _locked(root / f"{key}.fetch", fcntl.LOCK_EX):
        if (local / mf.MANIFEST_NAME).exists():  # another process finished it meanwhile
            return
        local.mkdir(parents=True, exist_ok=True)
        # Fetchers of this copy take turns, so temporaries here are a killed download's.
        for dirpath, _dirs, files in os.walk(local):
            for name in files:
                if name.startswith(".") and name.endswith(".tmp"):
                    os.unlink(os.path.join(dirpath, name))
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(size).encode(), 0)  # counted by other processes making room
        if bound is not None:
            with _locked(root / ".evict.lock", fcntl.LOCK_EX):
                _make_room(root, key, size, bound)
        for entry in entries:
            dest = local / str(entry["path"])
            if not dest.exists():
                download_checked(store, entry, dest)
        atomic.write_bytes(local / mf.MANIFEST_NAME, data)
        os.ftruncate(fd, 0)


class _Scope(threading.local):
    def __init__(self) -> None:
        self.stack: list[list[LocalCopy]] = []


_scope = _Scope()
_process_copies: dict[str, LocalCopy] = {}
_process_lock = threading.Lock()


@contextlib.contextmanager
def artifact_scope() -> Iterator[None]:
    """Copies that ``local_artifact`` returns in this thread inside the block stay in use
    until it exits (then they may be evicted)."""
    held: list[LocalCopy] = []
    _scope.stack.append(held)
    try:
        yield
    finally:
        _scope.stack.pop()
        for copy in held:
            copy.close()


def local_artifact(
    url: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    limit: int | str | None = None,
) -> str:
    """A local directory holding the finished artifact at ``url`` (``url`` itself when it
    is local), in use until the innermost ``artifact_scope()`` exits, or outside one until
    the process exits. See the module docstring."""
    if not is_remote(url):
        return os.fspath(url)
    copy = artifact_copy(url, cache_dir=cache_dir, limit=limit)
    if _scope.stack:
        _scope.stack[-1].append(copy)
        return copy.path
    with _process_lock:
        if copy.path in _process_copies:
            copy.close()  # already held for the process
        else:
            _process_copies[copy.path] = copy
    return copy.path


def publish_directory(local: str | os.PathLike, url: str | os.PathLike) -> None:
    """Upload a finished local artifact to ``url``: every file, then the manifest last, so
    the copy reads as complete only once it is whole."""
    local = Path(local)
    if not (local / mf.MANIFEST_NAME).exists():
        raise ManifestError(
            f"{local}: no {mf.MANIFEST_NAME}; only a finished artifact is published"
        )
    store = open_store(url)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        rel = path.relative_to(local).as_posix()
        if rel != mf.MANIFEST_NAME:
            store.put_file(rel, path)
    store.put_file(mf.MANIFEST_NAME, local / mf.MANIFEST_NAME)

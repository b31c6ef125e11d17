"""A bounded local cache of remote shards, for reading pools and materialized mixtures
from object storage in training (``shardcore.loader`` uses it for ``s3://`` paths).

A shard is fetched whole (its ``.idx`` and ``.bin``) the first time a sample in it is read,
checked against the artifact manifest's size and xxh3 as it streams in, and then read from
local disk through np.memmap like a local shard. The cache directory holds at most
``limit`` bytes: before a download, the least recently used shards are deleted until the
new one fits, never the shards this process has open (the one being read and those
prefetched for the next samples). Background threads prefetch the next ``prefetch`` shards
in the order the stream will read them, so reading rarely waits for the network.

Downloads run on a pool of threads (two per prefetched shard: a shard's ``.idx`` and
``.bin`` come in at once, and the next shards beside them) sharing one S3 client and its
connections. A file is downloaded once per process: a read that needs a file a prefetch is
downloading waits for that download instead of starting another. Each file is checked as
it streams in (one xxh3 pass over the bytes received), its bytes are synced to disk, and it
is renamed into place; the rename is not synced, so after a crash a cached file is whole or
absent, never torn.

Trade-offs: whole-shard fetches (not ranged reads per sample) because training reads every
record of a shard and S3 charges per request; the limit must hold the open shards (the
current one, plus ``prefetch`` more) or a read fails with the numbers. Several processes
(DataLoader workers, ranks on one host) may share one directory: files appear by atomic
rename, and a shard another process deletes stays readable to a process that has it
mapped, so the directory can exceed the limit by the shards other processes have open.

Settings: ``cache_dir`` (default ``$SHARDYARD_CACHE/stream``), ``cache_limit``
(``SHARDYARD_STREAM_CACHE_LIMIT``, default 8GiB) and ``prefetch`` (``SHARDYARD_PREFETCH``, default
2 shards).
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from shardcore import config, storage
from shardcore import manifest as mf
from shardcore.errors import InputError, ManifestError
from shardcore.formats import IndexedReader
from shardcore.sizes import parse_size

_OPEN_READERS = 2  # shards a reader keeps mapped per artifact (the current one and the last)


def cache_settings(
    cache_dir: str | os.PathLike | None = None,
    cache_limit: int | str | None = None,
    prefetch: int | None = None,
) -> tuple[Path, int, int]:
    """The cache directory, limit (bytes) and prefetch depth: the arguments where given,
    else SHARDYARD_CACHE (its ``stream`` directory), SHARDYARD_STREAM_CACHE_LIMIT and
    SHARDYARD_PREFETCH, else the defaults."""
    directory = Path(cache_dir) if cache_dir is not None else storage.cache_root() / "stream"
    if cache_limit is None:
        cache_limit = config.stream_cache_limit()
    cache_limit = parse_size(cache_limit, name="cache_limit")
    if int(cache_limit) <= 0:
        raise InputError(f"cache limit: must be positive, got {cache_limit}")
    if prefetch is None:
        prefetch = config.prefetch()
    if int(prefetch) < 0:
        raise InputError(f"prefetch: must be >= 0 shards, got {prefetch}")
    return directory, int(cache_limit), int(prefetch)


class ShardCache:
    """Whole files of remote artifacts in a size-limited directory (see the module
    docstring). ``fetch(store, entries)`` returns local paths, downloading what is absent."""

    def __init__(self, directory: str | os.PathLike, limit: int, prefetch: int = 0):
        self.directory = Path(directory)
        self.limit = int(limit)
        self.prefetch_depth = int(prefetch)
        self._lock = threading.RLock()
        self._pinned: dict[Path, int] = {}
        self._reserved = 0  # bytes of downloads under way
        self._downloading: dict[Path, Future] = {}  # file -> its download under way
        self._inflight: dict[str, list[Future]] = {}  # prefetched shard -> its downloads
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self.downloads = 0  # files downloaded by this process (for tests and benchmarks)

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": str(self.directory), "limit": self.limit, "p": self.prefetch_depth}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"], state["limit"], state["p"])  # type: ignore[misc]

    def local_path(self, artifact: str, rel: str, content: str) -> Path:
        # Named by the artifact's URL and content digest: a rebuild never reads stale bytes.
        key = xxhash.xxh3_64_hexdigest(f"{artifact}\0{content}".encode())
        return self.directory / key / rel

    def usage(self) -> int:
        """Bytes of finished files in the directory."""
        total = 0
        for p in self._files():
            try:
                total += p.stat().st_size
            except OSError:
                continue  # evicted meanwhile (by a prefetch or another process)
        return total

    def _files(self) -> list[Path]:
        out: list[Path] = []
        if not self.directory.exists():
            return out
        for p in self.directory.rglob("*"):
            if p.name.startswith(".") and p.name.endswith(".tmp"):
                continue
            try:
                if p.is_file():
                    out.append(p)
            except OSError:
                continue  # deleted by another process meanwhile
        return out

    def unpin(self, paths: list[Path]) -> None:
        with self._lock:
            for p in paths:
                n = self._pinned.get(p, 0) - 1
                if n <= 0:
                    self._pinned.pop(p, None)
                else:
                    self._pinned[p] = n

    def _make_room(self, need: int, keep: set[Path], *, strict: bool) -> bool:
        """Delete least recently used unpinned files until ``need`` more bytes fit beside
        the files present and the downloads under way; a non-strict call deletes nothing
        unless that makes enough room."""
        files = []
        for p in self._files():
            try:
                st = p.stat()
            except OSError:
                continue
            files.append((st.st_mtime_ns, p, st.st_size))
        used = sum(size for _, _, size in files) + self._reserved
        if used + need <= self.limit:
            return True
        held = set(self._pinned) | keep
        evictable = [(t, p, size) for t, p, size in sorted(files) if p not in held]
        if used - sum(size for _, _, size in evictable) + need > self.limit:
            if strict:
                raise InputError(
                    f"cache limit {self.limit} bytes in {self.directory} cannot hold {need} "
                    f"more bytes beside the {used - sum(s for _, _, s in evictable)} bytes of "
                    "open shards; raise cache_limit (SHARDYARD_STREAM_CACHE_LIMIT) or lower prefetch "
                    "(SHARDYARD_PREFETCH)"
                )
            return False
        for _, p, size in evictable:
            p.unlink(missing_ok=True)
            used -= size
            if used + need <= self.limit:
                break
        return True

    def _executor(self) -> ThreadPoolExecutor:
        # Threads do not survive a fork (a DataLoader worker): a new pool in each process.
        if self._pool is None or self._pool_pid != os.getpid():
            workers = max(2, 2 * self.prefetch_depth)
            self._pool = ThreadPoolExecutor(workers, thread_name_prefix="shardyard-fetch")
            self._pool_pid = os.getpid()
            self._downloading, self._inflight, self._reserved = {}, {}, 0
        return self._pool

    def _download(self, store: storage.Store, entry: dict[str, Any], path: Path) -> None:
        try:
            if not path.exists():
                storage.download_checked(store, entry, path, sync_rename=False)
                with self._lock:
                    self.downloads += 1
        finally:
            with self._lock:
                self._reserved -= int(entry["size"])
                self._downloading.pop(path, None)

    def _start(
        self, store: storage.Store, content: str, entries: list[dict[str, Any]], strict: bool
    ) -> tuple[list[Path], list[Future]] | None:
        """Make room, pin the files and start the downloads of those absent (joining the
        ones under way); None if a non-strict call found no room."""
        paths = [self.local_path(store.url, str(e["path"]), content) for e in entries]
        with self._lock:
            pool = self._executor()
            missing = [
                (e, p)
                for e, p in zip(entries, paths, strict=True)
                if p not in self._downloading and not p.exists()
            ]
            need = sum(int(e["size"]) for e, _ in missing)
            if missing and not self._make_room(need, set(paths), strict=strict):
                return None
            for p in paths:
                if p.exists():
                    with contextlib.suppress(OSError):
                        os.utime(p)  # most recently used
                self._pinned[p] = self._pinned.get(p, 0) + 1
            self._reserved += need
            for e, p in missing:
                self._downloading[p] = pool.submit(self._download, store, e, p)
            futures = [self._downloading[p] for p in paths if p in self._downloading]
        return paths, futures

    def fetch(
        self,
        store: storage.Store,
        content: str,
        entries: list[dict[str, Any]],
        *,
        prefetching: bool = False,
    ) -> list[Path] | None:
        """Local paths of the files ``entries`` (manifest entries of the artifact at
        ``store``), downloading the absent ones after making room. A read (not
        ``prefetching``) pins the files: ``unpin`` them when done. A prefetch that would
        have to evict an open shard does nothing and returns None."""
        for attempt in (1, 2):
            started = self._start(store, content, entries, strict=not prefetching)
            if started is None:
                return None
            paths, futures = started
            try:
                for f in futures:
                    f.result()
            except Exception:
                self.unpin(paths)
                # A read that joined a prefetch's failed download tries once itself, and
                # reports its own error.
                if prefetching or attempt == 2:
                    raise
                continue
            if prefetching:
                self.unpin(paths)
            return paths
        raise AssertionError("unreachable")

    def prefetch(self, store: storage.Store, content: str, entries: list[dict[str, Any]]) -> None:
        """Fetch in the background (at most ``prefetch`` shards under way at a time)."""
        if not self.prefetch_depth:
            return
        key = f"{store.url}\0{entries[0]['path']}"
        with self._lock:
            self._executor()
            self._inflight = {
                k: fs for k, fs in self._inflight.items() if not all(f.done() for f in fs)
            }
            if key in self._inflight or len(self._inflight) >= self.prefetch_depth:
                return
            started = self._start(store, content, entries, strict=False)
            if started is None:
                return
            paths, futures = started
            if not futures:
                self.unpin(paths)
                return
            self._inflight[key] = futures
            # Unpinned once every file is in; a failed download is retried (and reported)
            # by the read that needs it.
            left = [len(futures)]

            def done(_: Future) -> None:
                with self._lock:
                    left[0] -= 1
                    if left[0] == 0:
                        self.unpin(paths)

            for f in futures:
                f.add_done_callback(done)

    def wait(self) -> None:
        """Block until queued prefetches finish."""
        with self._lock:
            futures = [f for fs in self._inflight.values() for f in fs]
        for f in futures:
            with contextlib.suppress(Exception):
                f.result()


class RemoteRecords:
    """Fixed-width records of a pool or materialized mixture on object storage, numbered
    across shards, read through a ``ShardCache``."""

    def __init__(self, url: str, cache: ShardCache, manifest: dict[str, Any] | None = None):
        self.path = storage.resolve(url)
        self.store = storage.open_store(self.path)
        self.manifest = manifest if manifest is not None else mf.read_manifest(self.path)
        self.cache = cache
        self.content = xxhash.xxh3_64_hexdigest(
            str(self.manifest.get("fingerprint")).encode()
            + mf.content_digest(self.manifest).encode()
        )
        self.cumulative = np.asarray(self.manifest["cumulative_records"], dtype=np.int64)
        self.width = int(self.manifest["seq_len"]) + 1
        self._by_path = mf.files_by_path(self.manifest)
        self._pairs: dict[int, list[dict[str, Any]]] = {}
        self._readers: dict[int, tuple[IndexedReader, list[Path]]] = {}

    def _entries(self, shard: int) -> list[dict[str, Any]]:
        """The .idx and .bin entries of ``shard``, looked up when first read (the manifest
        is never walked whole: a rank opens a pool of a million shards in constant time)."""
        if shard not in self._pairs:
            prefix = self.manifest["shards"][shard]["prefix"]
            pair = []
            for ext in (".idx", ".bin"):
                entry = self._by_path.get(f"{prefix}{ext}")
                if entry is None:
                    raise ManifestError(f"{self.path}: manifest lists no {prefix}{ext}")
                pair.append(entry)
            self._pairs[shard] = pair
        return self._pairs[shard]

    def __len__(self) -> int:
        return int(self.cumulative[-1])

    def shard_of(self, i: int) -> int:
        return int(np.searchsorted(self.cumulative, i, side="right")) - 1

    def _reader(self, shard: int) -> IndexedReader:
        if shard in self._readers:
            reader, paths = self._readers.pop(shard)
            self._readers[shard] = (reader, paths)  # most recent last
            return reader
        paths = self.cache.fetch(self.store, self.content, self._entries(shard))  # type: ignore[assignment]
        if paths is None:  # only a prefetch declines; a read raises instead
            raise RuntimeError(f"{self.path}: shard {shard} could not be fetched")
        reader = IndexedReader(str(paths[0])[: -len(".idx")])
        self._readers[shard] = (reader, paths)
        while len(self._readers) > _OPEN_READERS:
            old = next(iter(self._readers))
            _, old_paths = self._readers.pop(old)
            self.cache.unpin(old_paths)
        return reader

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < len(self):
            raise IndexError(f"{self.path}: record {i} out of range [0, {len(self)})")
        shard = self.shard_of(i)
        r = i - int(self.cumulative[shard])
        # A copy: the shard's file may be evicted once this reader moves on.
        return np.array(self._reader(shard).tokens[r * self.width : (r + 1) * self.width])

    def prefetch(self, shard: int) -> None:
        if shard not in self._readers:
            self.cache.prefetch(self.store, self.content, self._entries(shard))

    def close(self) -> None:
        for _, paths in self._readers.values():
            self.cache.unpin(paths)
        self._readers.clear()

"""Where artifacts live: a local directory or an S3-compatible object store, behind one
small interface.

``open_store(url)`` gives a ``Store`` rooted at a local directory or at ``s3://bucket/prefix``.
Keys are ``/``-separated paths relative to that root. A store reads whole objects, byte
ranges and streams; it writes atomically: ``put_bytes`` and ``put_file`` make an object
appear whole or not at all, and ``writer`` streams an object of any size that becomes
visible only when the writer closes without error. Locally that is a temporary name, fsync
and rename; on S3 a single PUT, or above ``part_size`` a multipart upload whose parts stay
invisible until it is completed (and which is aborted on error). So a reader never sees a
partial object under its final name, and an artifact's commit point (its manifest, a
unit's completion marker) can be written last on either kind of store.

S3 credentials and region come from the usual AWS variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_DEFAULT_REGION``, ``~/.aws``) and any
S3-compatible server is reached through ``AWS_ENDPOINT_URL``: botocore reads them itself.

The local copies of remote artifacts (the artifact cache) are ``shardcore.storage.artifact_cache``;
an artifact's manifest is read by ``shardcore.manifest.read_manifest``.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import xxhash

from shardcore import atomic, config
from shardcore.errors import CorruptDataError, InputError

if TYPE_CHECKING:
    from typing_extensions import Buffer

log = logging.getLogger(__name__)

PART_SIZE = 16 << 20  # multipart part size; S3 allows 5 MiB..5 GiB and 10,000 parts
_COPY = 8 << 20
_CONNECTIONS = 32  # per client: the threads of a process share one
_client_lock = threading.Lock()


def _new_client_lock() -> None:
    global _client_lock
    _client_lock = threading.Lock()  # a fork may copy it held by a thread it leaves behind


os.register_at_fork(after_in_child=_new_client_lock)


class LocationError(InputError, ValueError):
    """A location that names no place on a store (``s3://`` without a bucket)."""


class ArtifactCacheError(InputError):
    """A remote artifact's local copy cannot fit the artifact cache's limit by itself."""


def is_remote(url: str | os.PathLike) -> bool:
    """True for an object-store URL (``s3://...``); local paths and ``file://`` are not."""
    text = os.fspath(url)
    return "://" in text and not text.startswith("file://")


def resolve(url: str | os.PathLike) -> str:
    """A canonical location: an absolute local path, or the URL without a trailing slash."""
    text = os.fspath(url)
    if is_remote(text):
        scheme, rest = text.split("://", 1)
        if scheme != "s3":
            raise LocationError(f"{text}: unsupported storage scheme {scheme!r} (local or s3://)")
        return f"s3://{rest.strip('/')}"
    if text.startswith("file://"):
        text = text[len("file://") :]
    return os.path.abspath(os.path.expanduser(text))


def join(base: str | os.PathLike, *parts: str) -> str:
    """``base/part/...`` for a local path or a URL."""
    base = os.fspath(base)
    if is_remote(base):
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])
    return os.path.join(base, *parts)


def cache_root() -> Path:
    """The local cache: $SHARDYARD_CACHE, else $SHARDYARD_HOME/cache (the service's local
    directory), else $SHARDYARD_DATA/cache when the data root is local, else
    ~/.cache/shardyard."""
    own, home = config.cache_dir(), config.home_dir()
    if own is not None:
        return own
    if home is not None:
        return home / "cache"
    data = config.data_root()
    if data and not is_remote(data):
        return Path(data).expanduser() / "cache"
    return Path("~/.cache/shardyard").expanduser()


class Store:
    """Objects under one root. Subclasses implement the primitives below."""

    url: str

    def location(self, key: str) -> str:
        """The full path or URL of ``key``, for messages and manifests."""
        return join(self.url, key)

    def exists(self, key: str) -> bool:
        raise NotImplementedError

    def size(self, key: str) -> int:
        raise NotImplementedError

    def read_bytes(self, key: str) -> bytes:
        raise NotImplementedError

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of ``key`` (fewer at its end)."""
        raise NotImplementedError

    def open(self, key: str) -> IO[bytes]:
        """A readable binary stream of ``key``."""
        raise NotImplementedError

    def put_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def put_file(self, key: str, path: str | os.PathLike) -> None:
        """Upload a local file as ``key``, atomically."""
        with open(path, "rb") as src, self.writer(key) as dst:
            shutil.copyfileobj(src, dst, _COPY)

    def get_file(self, key: str, path: str | os.PathLike) -> None:
        """Download ``key`` to a local file, atomically."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with self.open(key) as src, atomic.atomic_open(path) as dst:
            shutil.copyfileobj(src, dst, _COPY)

    def writer(self, key: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """A binary stream; the object appears under ``key`` when the block exits without
        an exception, and not at all otherwise."""
        raise NotImplementedError

    def list(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` (recursively), sorted."""
        raise NotImplementedError

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """Key -> size of every object under ``prefix``."""
        return {k: self.size(k) for k in self.list(prefix)}

    def delete(self, key: str) -> None:
        """Remove ``key`` (nothing if absent)."""
        raise NotImplementedError


class LocalStore(Store):
    def __init__(self, root: str | os.PathLike):
        self.url = resolve(root)
        self.root = Path(self.url)

    def path(self, key: str) -> Path:
        return self.root / key

    def exists(self, key: str) -> bool:
        return self.path(key).exists()

    def size(self, key: str) -> int:
        return self.path(key).stat().st_size

    def read_bytes(self, key: str) -> bytes:
        return self.path(key).read_bytes()

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        with open(self.path(key), "rb") as f:
            f.seek(start)
            return f.read(max(0, stop - start))

    def open(self, key: str) -> IO[bytes]:
        return open(self.path(key), "rb")

    def put_bytes(self, key: str, data: bytes) -> None:
        self.path(key).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(self.path(key), data)

    def writer(self, key: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        return atomic.atomic_open(path)

    def list(self, prefix: str = "") -> list[str]:
        base = self.path(prefix) if prefix else self.root
        if base.is_file():
            return [prefix]
        if not base.is_dir():
            return []
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*") if p.is_file())

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)


class _MultipartWriter(io.RawIOBase):
    """Buffers writes into parts; one PUT if the object fits in a part, else a multipart
    upload completed by ``commit`` and aborted by ``abort``."""

    def __init__(self, store: S3Store, key: str):
        self.store, self.key = store, store._key(key)
        self.buffer = bytearray()
        self.upload_id: str | None = None
        self.parts: list[dict[str, Any]] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Buffer) -> int:
        self.buffer += data
        while len(self.buffer) >= self.store.part_size:
            self._send(bytes(self.buffer[: self.store.part_size]))
            del self.buffer[: self.store.part_size]
        return memoryview(data).nbytes  # bytes, as RawIOBase.write counts (len would count items)

    def _send(self, part: bytes) -> None:
        client = self.store.client
        if self.upload_id is None:
            self.upload_id = client.create_multipart_upload(Bucket=self.store.bucket, Key=self.key)[
                "UploadId"
            ]
        number = len(self.parts) + 1
        etag = client.upload_part(
            Bucket=self.store.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            PartNumber=number,
            Body=part,
        )["ETag"]
        self.parts.append({"ETag": etag, "PartNumber": number})

    def commit(self) -> None:
        client = self.store.client
        if self.upload_id is None:
            client.put_object(Bucket=self.store.bucket, Key=self.key, Body=bytes(self.buffer))
            return
        if self.buffer:
            self._send(bytes(self.buffer))
        client.complete_multipart_upload(
            Bucket=self.store.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            MultipartUpload={"Parts": self.parts},
        )

    def abort(self) -> None:
        if self.upload_id is not None:
            self.store.client.abort_multipart_upload(
                Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id
            )


_s3fs_config: dict | None = None  # the config_kwargs s3fs_defaults() set last


def s3fs_defaults() -> None:
    """The same bounds for s3fs (sources listed and read through fsspec): fsspec's config
    for the "s3" protocol, unless the process set its own."""
    import fsspec.config

    global _s3fs_config
    limits = config.s3_limits()
    conf = fsspec.config.conf.setdefault("s3", {})
    current = conf.get("config_kwargs")
    if current is None or current is _s3fs_config:
        # Ours (or none yet): follow the variables as they are now, so that a process whose
        # bounds change (a test, a reconfigured worker) does not keep the first ones.
        _s3fs_config = {
            "connect_timeout": limits["connect_timeout"],
            "read_timeout": limits["read_timeout"],
            "retries": {"total_max_attempts": limits["max_attempts"], "mode": "standard"},
        }
        conf["config_kwargs"] = _s3fs_config
    # s3fs retries a failed call in a loop of its own (5 times) around botocore's attempts:
    # a class attribute, not a constructor argument.
    import s3fs

    s3fs.S3FileSystem.retries = limits["max_attempts"]


# --- Fail fast: one store that stopped answering costs a request one timeout, not one each.
_fail = threading.local()
_OFF = object()
_unanswered: type | None = None


def _unanswered_error() -> type:
    """``StoreUnanswered``: a botocore error (``is_store_error``), neither an OSError nor a
    transient error that botocore retries: what a fail-fast scope raises at once."""
    global _unanswered
    if _unanswered is None:
        from botocore.exceptions import BotoCoreError

        class StoreUnanswered(BotoCoreError):
            fmt = "{error} (earlier in this request; not tried again)"

        _unanswered = StoreUnanswered
    return _unanswered


@contextlib.contextmanager
def fail_fast() -> Iterator[None]:
    """Inside the block (a web request), once an S3 request of this thread times out or
    cannot connect, every later S3 request of the thread fails at once (``StoreUnanswered``)
    instead of waiting out its own timeouts; ``store_failure()`` says what failed, even
    when the caller caught it (a timeout is an OSError, which readers often catch)."""
    previous = getattr(_fail, "error", _OFF)
    _fail.error = None
    try:
        yield
    finally:
        _fail.error = previous


def store_failure() -> BaseException | None:
    """The first S3 request of the innermost ``fail_fast()`` block that did not answer."""
    error = getattr(_fail, "error", None)
    return error if isinstance(error, BaseException) else None


def _before_send(**kwargs: object) -> None:
    error = getattr(_fail, "error", _OFF)
    if error is not _OFF and error is not None:
        raise _unanswered_error()(error=str(error))


def _after_attempt(caught_exception: BaseException | None = None, **kwargs: object) -> None:
    from botocore.exceptions import (
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    unanswered = (
        ConnectTimeoutError,
        ReadTimeoutError,
        EndpointConnectionError,
        ConnectionClosedError,
    )
    if getattr(_fail, "error", _OFF) is None and isinstance(caught_exception, unanswered):
        _fail.error = caught_exception


# What a client is made from; a client made before one of them changes is not reused.
_CLIENT_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    *config.S3_LIMIT_VARIABLES,
)
_clients: dict[tuple, Any] = {}


def _shared_client() -> Any:  # a boto3 S3 client (boto3 ships no types)
    """The process's S3 client for the current AWS environment: creating one costs tens of
    milliseconds of CPU, so every store and thread of the process shares it."""
    key = (os.getpid(), *(os.environ.get(k) for k in _CLIENT_ENV))
    client = _clients.get(key)
    if client is None:
        with _client_lock:
            client = _clients.get(key)
            if client is None:
                import boto3
                from botocore.config import Config

                limits = config.s3_limits()
                bounds = Config(
                    retries={"total_max_attempts": limits["max_attempts"], "mode": "standard"},
                    connect_timeout=limits["connect_timeout"],
                    read_timeout=limits["read_timeout"],
                    max_pool_connections=_CONNECTIONS,
                )
                client = boto3.session.Session().client("s3", config=bounds)
                client.meta.events.register("before-send.s3", _before_send)
                client.meta.events.register_first("needs-retry.s3", _after_attempt)
                if len(_clients) > 16:  # environments a long test run went through
                    _clients.clear()
                _clients[key] = client
    return client


class S3Store(Store):
    """A prefix of an S3 bucket, through boto3: one client per process and AWS environment,
    shared by its stores and threads (boto3's clients are thread-safe) with a pool of
    connections for them."""

    def __init__(self, url: str, *, part_size: int | None = None):
        self.url = resolve(url)
        rest = self.url[len("s3://") :]
        self.bucket, _, self.prefix = rest.partition("/")
        if not self.bucket:
            raise LocationError(f"{url}: no bucket in the URL")
        self.part_size = int(part_size or PART_SIZE)
        self._client: Any = None
        self._client_pid = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "part_size": self.part_size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], part_size=state["part_size"])  # type: ignore[misc]

    @property
    def client(self) -> Any:
        # boto3 clients are not safe to share across forked processes: one per pid.
        pid = os.getpid()
        if self._client_pid != pid:
            self._client = _shared_client()
            self._client_pid = pid
        return self._client

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _missing(self, exc: Exception) -> bool:
        code = str((getattr(exc, "response", None) or {}).get("Error", {}).get("Code", ""))
        return code in ("404", "NoSuchKey", "NotFound")

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:
            if self._missing(exc):
                return False
            raise
        return True

    def size(self, key: str) -> int:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:
            if self._missing(exc):
                raise FileNotFoundError(f"{self.location(key)}: no such object") from None
            raise
        return int(head["ContentLength"])

    def _get(self, key: str, **kwargs: Any) -> dict[str, Any]:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key), **kwargs)
        except Exception as exc:
            if self._missing(exc):
                raise FileNotFoundError(f"{self.location(key)}: no such object") from None
            raise

    def read_bytes(self, key: str) -> bytes:
        return self._get(key)["Body"].read()

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        if stop <= start:
            return b""
        try:
            return self._get(key, Range=f"bytes={start}-{stop - 1}")["Body"].read()
        except Exception as exc:
            if "InvalidRange" in str(exc):
                return b""
            raise

    def open(self, key: str) -> IO[bytes]:
        return self._get(key)["Body"]

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=bytes(data))

    @contextlib.contextmanager
    def writer(self, key: str) -> Iterator[IO[bytes]]:
        w = _MultipartWriter(self, key)
        try:
            yield w  # type: ignore[misc]
        except BaseException:
            w.abort()
            raise
        try:
            w.commit()
        except BaseException:
            w.abort()
            raise

    def list(self, prefix: str = "") -> list[str]:
        return sorted(self.sizes(prefix))

    def sizes(self, prefix: str = "") -> dict[str, int]:
        base = self._key(prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        strip = len(self.prefix) + 1 if self.prefix else 0
        out = {}
        pages = self.client.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self.bucket, Prefix=base):
            for obj in page.get("Contents", []):
                out[obj["Key"][strip:]] = int(obj["Size"])
        return out

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def _uploads(self) -> builtins.list[dict[str, Any]]:
        prefix = f"{self.prefix}/" if self.prefix else ""
        found = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=prefix)
        return list(found.get("Uploads", []))

    def multipart_uploads(self) -> builtins.list[str]:
        """Keys with a multipart upload started and neither completed nor aborted (a
        writer that died mid-upload): invisible, but their parts take space."""
        return [u["Key"] for u in self._uploads()]

    def abort_uploads(self) -> int:
        """Abort every unfinished multipart upload under the prefix; returns how many."""
        uploads = self._uploads()
        for u in uploads:
            self.client.abort_multipart_upload(
                Bucket=self.bucket, Key=u["Key"], UploadId=u["UploadId"]
            )
        return len(uploads)


def is_store_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the object store failing to answer (unreachable endpoint, refused
    credentials, a missing bucket...), as opposed to an artifact's own problem."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:  # no S3 client installed: nothing can have come from one
        return False
    return isinstance(exc, (BotoCoreError, ClientError))


def open_store(url: str | os.PathLike) -> Store:
    """The store rooted at ``url``: a local directory, or ``s3://bucket/prefix``."""
    if is_remote(url):
        return S3Store(os.fspath(url))
    return LocalStore(url)


def exists(url: str | os.PathLike) -> bool:
    """Whether ``url`` names anything: a local file or directory; on S3 an object, or a
    prefix with at least one object below it (one request each, whatever the prefix holds)."""
    if not is_remote(url):
        return os.path.exists(resolve(url))
    store = S3Store(os.fspath(url))
    if store.prefix:
        try:
            store.client.head_object(Bucket=store.bucket, Key=store.prefix)
            return True
        except Exception as exc:
            if not store._missing(exc):
                raise
    below = f"{store.prefix}/" if store.prefix else ""
    page = store.client.list_objects_v2(Bucket=store.bucket, Prefix=below, MaxKeys=1)
    return bool(page.get("KeyCount"))


def read_checked(url: str | os.PathLike, entry: dict[str, Any]) -> bytes:
    """The whole file ``entry["path"]`` (a manifest's entry) of the artifact at ``url``,
    read into memory (a small file: a shard's segment arrays, a column of counts) and
    checked against the entry's size and xxh3: a changed object is an error naming it."""
    store = open_store(url)
    rel = str(entry["path"])
    data = store.read_bytes(rel)
    if len(data) != int(entry["size"]) or xxhash.xxh3_64_hexdigest(data) != entry["xxh3"]:
        raise CorruptDataError(f"{store.location(rel)} does not match its manifest entry")
    return data


def download_checked(
    store: Store, entry: dict[str, Any], dest: Path, *, sync_rename: bool = True
) -> None:
    """Download one manifest-listed file, checking its size and xxh3 as it streams; a
    mismatch names the object and leaves nothing at ``dest``. The bytes are synced before
    the rename; ``sync_rename=False`` leaves the rename itself unsynced (a cache: after a
    crash the file is whole or absent)."""
    rel = str(entry["path"])
    dest.parent.mkdir(parents=True, exist_ok=True)
    h, size = xxhash.xxh3_64(), 0
    with store.open(rel) as src, atomic.atomic_open(dest, durable=sync_rename) as dst:
        while chunk := src.read(_COPY):
            h.update(chunk)
            size += len(chunk)
            dst.write(chunk)
        if entry.get("size") is not None and size != int(entry["size"]):
            raise CorruptDataError(
                f"{store.location(rel)}: {size} bytes, the manifest says {entry['size']}"
            )
        if entry.get("xxh3") and h.hexdigest() != entry["xxh3"]:
            raise CorruptDataError(
                f"{store.location(rel)}: checksum {h.hexdigest()} differs from the manifest's "
                f"{entry['xxh3']}"
            )
        if not sync_rename:
            dst.flush()
            getattr(os, "fdatasync", os.fsync)(dst.fileno())

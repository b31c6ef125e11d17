"""Typed reads of environment variables that fail loudly on bad values.

Every setting Shardyard takes from the environment goes through one of these helpers, so a
typo such as ``DEBUG=ture`` stops the process with a message naming the variable instead
of silently meaning something else. The generic readers (``env_str``, ``env_int``, ...)
serve the service's settings (``webapp/settings.py``); the library's own variables each have
a reader below (``cache_dir``, ``s3_limits``, ``filter_seconds``...), read when the value is
needed, never at import, so a test or a process may set them late.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, overload

from shardcore.errors import InputError
from shardcore.sizes import parse_size


class ConfigError(InputError):
    """An environment variable has a value Shardyard cannot use (the message names it)."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@overload
def env_str(name: str, default: str, *, required: bool = False) -> str: ...
@overload
def env_str(name: str, default: None = None, *, required: bool = False) -> str | None: ...
def env_str(name: str, default: str | None = None, *, required: bool = False) -> str | None:
    value = os.environ.get(name)
    if value is None or value == "":
        if required:
            raise ConfigError(f"{name} must be set")
        return default
    return value


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    low = value.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ConfigError(
        f"{name}={value!r} is not a boolean (use one of 1/0, true/false, yes/no, on/off)"
    )


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        out = int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not an integer") from None
    if minimum is not None and out < minimum:
        raise ConfigError(f"{name}={out} must be >= {minimum}")
    return out


def env_list(name: str, default: list[str] | None = None, *, sep: str = ",") -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return list(default or [])
    return [item.strip() for item in value.split(sep) if item.strip()]


def env_paths(name: str, default: list[Path]) -> list[Path]:
    """A list of absolute directories separated by ``os.pathsep`` (``:`` on Linux)."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    out = []
    for item in value.split(os.pathsep):
        item = item.strip()
        if not item:
            continue
        path = Path(item).expanduser()
        if not path.is_absolute():
            raise ConfigError(f"{name}: {item!r} is not an absolute path")
        out.append(path.resolve())
    return out


def env_roots(name: str, default: list[Path]) -> list[Path | str]:
    """Allowed roots separated by ``os.pathsep`` (``:``): absolute directories (Paths) and
    ``s3://bucket`` or ``s3://bucket/prefix`` locations (strings, scheme lower-cased, no
    trailing slash). ``s3://`` contains the separator: an item ``s3`` (any case) followed
    by one that starts with ``//`` is one location."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return list(default)
    items = [item.strip() for item in value.split(os.pathsep)]
    out: list[Path | str] = []
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if not item:
            continue
        if item.lower() == "s3" and i < len(items) and items[i].startswith("//"):
            raw = items[i][2:].strip()
            i += 1
            rest = raw.rstrip("/")
            if (
                not rest
                or raw.startswith("/")
                or any(part in ("", ".", "..") for part in rest.split("/"))
            ):
                raise ConfigError(f"{name}: 's3://{rest}' is not s3://bucket or s3://bucket/prefix")
            out.append(f"s3://{rest}")
            continue
        if "://" in item or item.lower() in ("s3", "file", "http", "https"):
            raise ConfigError(f"{name}: {item!r}: give absolute directories or s3://bucket/prefix")
        path = Path(item).expanduser()
        if not path.is_absolute():
            raise ConfigError(f"{name}: {item!r} is not an absolute path")
        out.append(path.resolve())
    return out


# --- the library's variables --------------------------------------------------------------

DEFAULT_ARTIFACT_CACHE_LIMIT = 64 << 30
DEFAULT_STREAM_CACHE_LIMIT = 8 << 30
DEFAULT_PREFETCH = 2
DEFAULT_MAX_SCHEDULE_SAMPLES = 1 << 36
_UNLIMITED = {"none", "unlimited"}


def _raw(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def cache_dir() -> Path | None:
    """``SHARDYARD_CACHE``: the library's local cache directory (None: not set)."""
    value = _raw("SHARDYARD_CACHE")
    return Path(value).expanduser() if value else None


def home_dir() -> Path | None:
    """``SHARDYARD_HOME``: the service's local directory (None: not set)."""
    value = _raw("SHARDYARD_HOME")
    return Path(value).expanduser() if value else None


def data_root() -> str | None:
    """``SHARDYARD_DATA``: the data root, a directory or an ``s3://`` prefix (None: not set)."""
    return _raw("SHARDYARD_DATA")


def artifact_cache_limit(value: int | str | None = None) -> int | None:
    """The artifact cache's limit in bytes (None: unlimited): ``value`` where given, else
    ``SHARDYARD_ARTIFACT_CACHE_LIMIT``, else 64GiB. ``none`` (or ``unlimited``) lifts it."""
    name = "artifact cache limit"
    if value is None:
        value = _raw("SHARDYARD_ARTIFACT_CACHE_LIMIT")
        name = "SHARDYARD_ARTIFACT_CACHE_LIMIT"
    if value is None:
        return DEFAULT_ARTIFACT_CACHE_LIMIT
    if isinstance(value, str) and value.strip().lower() in _UNLIMITED:
        return None
    limit = parse_size(value, name=name)
    if limit <= 0:
        raise InputError(f"{name}: must be a positive size or none (no limit), got {value!r}")
    return limit


def stream_cache_limit() -> int:
    """``SHARDYARD_STREAM_CACHE_LIMIT``: bytes of shards the loader keeps when it streams
    from object storage (default 8GiB). The variable's former name is refused, naming it."""
    if _raw("SHARDYARD_CACHE_LIMIT"):
        raise ConfigError(
            "SHARDYARD_CACHE_LIMIT is now SHARDYARD_STREAM_CACHE_LIMIT (the loader's shard "
            "cache; SHARDYARD_ARTIFACT_CACHE_LIMIT bounds the copies of input artifacts)"
        )
    value = _raw("SHARDYARD_STREAM_CACHE_LIMIT")
    if value is None:
        return DEFAULT_STREAM_CACHE_LIMIT
    return parse_size(value, name="SHARDYARD_STREAM_CACHE_LIMIT")


def prefetch() -> int:
    """``SHARDYARD_PREFETCH``: shards the loader downloads ahead (default 2)."""
    text = _raw("SHARDYARD_PREFETCH") or str(DEFAULT_PREFETCH)
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"SHARDYARD_PREFETCH: not a number of shards: {text!r}") from None


def _number(name: str, default: float, low: float, high: float, what: str) -> float:
    text = _raw(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a number of {what}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name}={text}: {what} must be in [{low:g}, {high:g}]")
    return value


# Bounds on every request to the object store, so that a store that stops answering is an
# error after attempts x timeout (20 s by default, below gunicorn's 30 s worker timeout: a
# page answers 503 naming the endpoint), never a hang. botocore's own defaults (60 s
# timeouts, and 8 attempts as configured before) held a request for minutes.
S3_LIMIT_VARIABLES = (
    "SHARDYARD_S3_CONNECT_TIMEOUT",
    "SHARDYARD_S3_READ_TIMEOUT",
    "SHARDYARD_S3_ATTEMPTS",
)


def s3_limits() -> dict[str, Any]:
    """``{"connect_timeout", "read_timeout", "max_attempts"}`` of S3 requests, from
    ``SHARDYARD_S3_CONNECT_TIMEOUT`` (default 5 s), ``SHARDYARD_S3_READ_TIMEOUT`` (10 s) and
    ``SHARDYARD_S3_ATTEMPTS`` (2: the first try and one retry)."""
    attempts = _number("SHARDYARD_S3_ATTEMPTS", 2, 1, 20, "tries per request")
    if attempts != int(attempts):
        raise ConfigError(f"SHARDYARD_S3_ATTEMPTS={attempts:g}: a whole number of tries")
    return {
        "connect_timeout": _number(
            "SHARDYARD_S3_CONNECT_TIMEOUT", 5.0, 0.01, 3600, "seconds to wait for a connection"
        ),
        "read_timeout": _number(
            "SHARDYARD_S3_READ_TIMEOUT", 10.0, 0.01, 3600, "seconds to wait for bytes of an answer"
        ),
        "max_attempts": int(attempts),
    }


def filter_memory() -> str:
    """``SHARDYARD_FILTER_MEMORY``: DuckDB's memory limit while a filter runs (512MB)."""
    value = _raw("SHARDYARD_FILTER_MEMORY") or "512MB"
    parse_size(value, name="SHARDYARD_FILTER_MEMORY")  # refused here, not by DuckDB
    return value


def filter_seconds() -> float:
    """``SHARDYARD_FILTER_SECONDS``: a filter's time over one sidecar (300 s)."""
    return _number("SHARDYARD_FILTER_SECONDS", 300.0, 0.001, 10**7, "seconds")


def max_schedule_samples() -> int:
    """``SHARDYARD_MAX_SCHEDULE_SAMPLES``: most samples a mixture's schedule may hold
    (2^36: 10 bytes a sample on disk; built in chunks, its memory does not grow with the
    samples, and the build checks the disk holds it)."""
    raw = _raw("SHARDYARD_MAX_SCHEDULE_SAMPLES")
    if raw is None:
        return DEFAULT_MAX_SCHEDULE_SAMPLES
    try:
        value = int(float(raw))
    except ValueError:
        raise ConfigError(f"SHARDYARD_MAX_SCHEDULE_SAMPLES={raw!r} is not a number") from None
    if value < 1:
        raise ConfigError(f"SHARDYARD_MAX_SCHEDULE_SAMPLES={raw!r} must be positive")
    return value

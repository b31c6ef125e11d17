"""Typed reads of environment variables that fail loudly on bad values.

Every setting Shardyard takes from the environment goes through one of these helpers, so a
typo such as ``DEBUG=ture`` stops the process with a message naming the variable instead
of silently meaning something else.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import overload


class ConfigError(RuntimeError):
    """An environment variable has a value Shardyard cannot use."""


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

"""The catalog's input guards, in one place so that every entry (API, pages, management
commands) applies the same rules:

- ``name_check``: the names of sources, pools, mixtures and runs. Artifact directories
  and download file names are built from them, so a name is a short token of letters,
  digits, ``.``, ``_`` and ``-`` (never a path, never ``..``, no control characters, no
  quotes).
- ``data_path``: an artifact location below the data root (a local directory or an
  ``s3://`` prefix), built from validated parts and checked again (after resolving
  symlinks, locally).
- ``uri_normalize``: the one parser of source locations. Its canonical form is what the
  catalog stores and what ``uri_is_remote`` reads, so the roots check and the reader never
  disagree about whether a location is remote (``S3://`` is ``s3://``).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

from django.conf import settings

from shardcore import storage

NAME_MAX = 100
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
REMOTE_SCHEMES = ("s3",)


class GuardError(ValueError):
    """An input refused by a guard; the message names the field and says why."""


def name_check(name, *, field: str = "name", max_length: int = NAME_MAX) -> str:
    """``name`` if it is a valid catalog name, else GuardError naming ``field``."""
    if not isinstance(name, str):
        raise GuardError(f"{field}: a name is text, got {type(name).__name__}")
    if not name:
        raise GuardError(f"{field}: give a name")
    if len(name) > max_length:
        raise GuardError(f"{field}: at most {max_length} characters, got {len(name)}")
    if _CONTROL.search(name):
        raise GuardError(f"{field}: {name!r} contains a control character (CR, LF, NUL...)")
    if not _NAME.fullmatch(name) or ".." in name:
        raise GuardError(
            f"{field}: {name!r} is not a valid name: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit (no '/', no '..', no spaces or quotes)"
        )
    return name


def data_root() -> str:
    """Where artifacts are written: a resolved local directory, or an ``s3://`` prefix."""
    root = str(settings.DATA_ROOT)
    return storage.resolve(root) if storage.is_remote(root) else str(Path(root).resolve())


def under_data_root(path: str | Path) -> str:
    """``path`` resolved, or GuardError when it lies outside the data root. On object
    storage a location is under the root when its key starts with the root's prefix and
    holds no ``.`` or ``..`` segment (there are no symlinks to follow)."""
    root = data_root()
    if storage.is_remote(root):
        text = str(path)
        rest = text[len(root) :]
        if text != root and not (text.startswith(root) and rest.startswith("/")):
            raise GuardError(f"{path} is outside the data root {root}")
        if rest and any(seg in (".", "..", "") for seg in rest[1:].split("/")):
            raise GuardError(f"{path}: a location below {root} has no empty, '.' or '..' part")
        return text
    resolved = Path(path).resolve()
    if resolved != Path(root) and not resolved.is_relative_to(root):
        raise GuardError(f"{path} resolves to {resolved}, outside the data root {root}")
    return str(resolved)


def data_path(*parts: str) -> str:
    """``<data root>/part/part...`` for parts that are single path components, checked to
    stay under the data root (resolving symlinks when it is local). An absolute or dotted
    part is refused, never joined (``Path(root) / "/abs"`` would be ``/abs``)."""
    for part in parts:
        if not part or "/" in part or "\\" in part or part in (".", "..") or "\0" in part:
            raise GuardError(f"{part!r} is not a single path component")
    return under_data_root(storage.join(data_root(), *parts))


def uri_normalize(uri: str) -> tuple[str, str]:
    """(scheme, location) of a source location: ``("s3", "s3://bucket/key")`` with the
    scheme lower-cased and no trailing slash, or ``("file", path)`` for a local path
    (``file://`` stripped; the path is not resolved here). Anything else is GuardError."""
    uri = (uri or "").strip()
    if not uri:
        raise GuardError("no location given")
    if _CONTROL.search(uri):
        raise GuardError(f"{uri!r}: a location has no control characters")
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme and len(scheme) > 1:  # "C:" style drive letters are not URLs
        if scheme in REMOTE_SCHEMES:
            if not parsed.netloc:
                raise GuardError(f"{uri}: an s3:// location needs a bucket (s3://bucket/path)")
            if ".." in parsed.path.split("/"):
                raise GuardError(f"{uri}: '..' is not allowed in a source location")
            rest = f"{parsed.netloc}{parsed.path}".rstrip("/")
            return scheme, f"{scheme}://{rest}"
        if scheme != "file":
            raise GuardError(f"{uri}: scheme {parsed.scheme!r} is not supported")
        if parsed.netloc not in ("", "localhost"):
            raise GuardError(f"{uri}: a file:// location names no host")
        return "file", parsed.path
    return "file", uri


_ENCODING = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def tokenizer_spec_check(spec: str) -> str:
    """``spec`` if the catalog may load it: ``tiktoken:<encoding name>``, or ``hf:<path>``
    with an absolute path that resolves (symlinks followed) to a regular file, or a
    directory holding ``tokenizer.json``, below one of ``settings.TOKENIZER_ROOTS``. The
    answer never says whether a path outside the roots exists."""
    spec = (spec or "").strip()
    if _CONTROL.search(spec):
        raise GuardError(f"tokenizer {spec!r}: contains a control character")
    kind, sep, rest = spec.partition(":")
    if kind == "tiktoken" and sep and _ENCODING.fullmatch(rest):
        return spec
    if kind != "hf" or not sep or not rest:
        raise GuardError(
            f"tokenizer {spec!r}: use tiktoken:<encoding> or hf:<path> (a tokenizer.json under "
            f"{_tokenizer_roots_text()})"
        )
    path = Path(rest)
    if not path.is_absolute() or ".." in path.parts:
        raise GuardError(f"tokenizer {spec!r}: give an absolute path without '..'")
    roots = [Path(r).resolve() for r in settings.TOKENIZER_ROOTS]
    resolved = path.resolve()
    if not any(resolved == r or resolved.is_relative_to(r) for r in roots):
        raise GuardError(
            f"tokenizer {spec!r} is outside the tokenizer roots {_tokenizer_roots_text()} "
            "(SHARDYARD_TOKENIZER_ROOTS)"
        )
    file = resolved / "tokenizer.json" if resolved.is_dir() else resolved
    if not file.is_file() or not file.resolve().is_relative_to(
        resolved if resolved.is_dir() else resolved.parent
    ):
        raise GuardError(f"tokenizer {spec!r}: no tokenizer.json file at {path}")
    return spec


def _tokenizer_roots_text() -> str:
    return ", ".join(str(r) for r in settings.TOKENIZER_ROOTS) or "(none configured)"


def uri_is_remote(uri: str) -> bool:
    """Whether a stored location is read through fsspec's remote file systems. Reads the
    scheme the way ``uri_normalize`` does (case-insensitive)."""
    scheme = urlparse((uri or "").strip()).scheme.lower()
    return scheme in REMOTE_SCHEMES

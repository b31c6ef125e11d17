"""Manifests, fingerprints and checksums: the bookkeeping every artifact carries.

An artifact is a directory of files plus ``manifest.json``. The manifest is written last,
atomically (``shardcore.atomic``): it is the commit point, so a directory without
one is an unfinished build, never a result. Fingerprints hash the inputs' fingerprints, the
parameters and the format version, so the same inputs and seed name the same bytes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import xxhash

from shardcore import atomic
from shardcore.errors import ManifestError

# 2: documents sidecars keep the user's properties in the struct column ``props``
# (shardcore.props); format 1 kept them as top-level columns. Both are read.
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MANIFEST_NAME = "manifest.json"
_CHUNK = 8 << 20


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def fingerprint(kind: str, *, parents: list[str] | tuple[str, ...] = (), params: Any = None) -> str:
    """xxh3-128 of the kind, the parents' fingerprints, the parameters and FORMAT_VERSION."""
    payload = {"kind": kind, "format": FORMAT_VERSION, "parents": list(parents), "params": params}
    return xxhash.xxh3_128_hexdigest(canonical_json(payload))


def file_entries(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The artifact's files: ``manifest["files"]``, a list of entries ``{"path", "size",
    "xxh3", "block_size", "blocks"}`` (``path`` relative to the artifact), in the order
    written. Every kind writes this list; mixtures and materialized copies built before
    held a mapping ``path -> entry`` instead, read here as the same list."""
    entries = manifest.get("files") or []
    if isinstance(entries, dict):
        return [{"path": rel, **entry} for rel, entry in sorted(entries.items())]
    return list(entries)


def files_by_path(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``file_entries`` keyed by relative path."""
    return {str(e["path"]): e for e in file_entries(manifest)}


def content_digest(manifest: dict[str, Any]) -> str:
    """xxh3-128 of the manifest's file list (path, size, xxh3): what the artifact's bytes
    are, where its fingerprint says what they were built from. A stage's fingerprint
    includes its inputs' content digests, so an input whose bytes differ (a corrupted
    shard, checksummed as it was) never gives an output the clean input's fingerprint."""
    files = sorted(
        (str(e.get("path")), e.get("size"), e.get("xxh3")) for e in file_entries(manifest)
    )
    return xxhash.xxh3_128_hexdigest(canonical_json(files))


def file_checksum(path: str | os.PathLike) -> str:
    """xxh3-64 of a file's bytes, streamed."""
    h = xxhash.xxh3_64()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(directory: str | os.PathLike, manifest: dict[str, Any]) -> Path:
    """Write ``manifest.json`` atomically; this marks the artifact complete."""
    data = {"format_version": FORMAT_VERSION, **manifest}
    return atomic.write_bytes(
        Path(directory) / MANIFEST_NAME,
        json.dumps(data, indent=1, sort_keys=True, default=str).encode(),
    )


def parse_manifest(data: bytes | str, where: str) -> dict[str, Any]:
    """A manifest from its bytes; ``where`` names it in errors."""
    try:
        parsed = json.loads(data)
    except ValueError as exc:
        raise ManifestError(f"{where}: unreadable manifest: {exc}") from exc
    if not isinstance(parsed, dict):
        raise ManifestError(f"{where}: unreadable manifest: not a JSON object")
    version = parsed.get("format_version")
    if version not in READABLE_VERSIONS:
        raise ManifestError(
            f"{where}: format_version {version!r}, this shardcore reads "
            f"{' and '.join(map(str, READABLE_VERSIONS))}"
        )
    return parsed


def read_manifest(directory: str | os.PathLike) -> dict[str, Any]:
    """The manifest of the artifact at ``directory`` (a local path or an s3:// URL)."""
    from shardcore import storage

    if storage.is_remote(directory):
        return storage.read_manifest(directory)
    directory = Path(directory)
    path = directory / MANIFEST_NAME if directory.is_dir() or not directory.suffix else directory
    if not directory.exists():
        raise ManifestError(f"{directory}: no such file or directory")
    if not path.exists():
        raise ManifestError(
            f"{directory}: no {MANIFEST_NAME} (not an artifact, or its build did not finish)"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"{path}: unreadable manifest: {exc}") from exc
    return parse_manifest(data, str(path))


def is_complete(directory: str | os.PathLike) -> bool:
    from shardcore import storage

    if storage.is_remote(directory):
        return storage.open_store(directory).exists(MANIFEST_NAME)
    return (Path(directory) / MANIFEST_NAME).exists()

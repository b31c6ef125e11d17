"""What recording an artifact built outside the service shares (``pools.pool_register``,
``mixtures.mixture_version_register``): the artifact found under the data root and checked
against its manifest, and its inputs found in the catalog by fingerprint.

The command line builds anywhere (local processes, Slurm job arrays, Ray tasks) with no
catalog in reach; ``shardyard register DIR`` then asks the service to record the result.
A manifest names its inputs by fingerprint (``parents``): each must be a ready catalog
artifact, so that the registered row has the same lineage (and so the same flags, taints
and corruption marks) as one the service built. The check here reads no file's bytes (a
request reads no whole artifact): every file the manifest lists must be there with its
size; the bytes are the scrub's to check, as for every artifact."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shardcore import storage
from shardcore.errors import ManifestError
from shardcore.manifest import MANIFEST_NAME, file_entries, read_manifest
from webapp.catalog import guards
from webapp.catalog.errors import CatalogError
from webapp.catalog.models import ArtifactStatus


def registered_artifact(path: str, *, kind: str) -> tuple[str, dict[str, Any]]:
    """(location, manifest) of the finished artifact of ``kind`` at ``path``, which must lie
    under the data root and hold every file its manifest lists, at its size."""
    text = str(path or "").strip()
    if not text:
        raise CatalogError("path: give the directory (or s3:// prefix) of a built artifact")
    if any(ord(ch) < 32 for ch in text):
        raise CatalogError("path: a location has no control characters")
    try:
        location = guards.under_data_root(storage.resolve(text))
    except guards.GuardError as exc:
        raise CatalogError(f"path: {exc}") from None
    except (ValueError, OSError) as exc:  # a location no file system or store can name
        raise CatalogError(f"path: {text!r}: {exc}") from None
    try:
        manifest = read_manifest(location)
    except (ManifestError, OSError) as exc:
        raise CatalogError(
            f"{location}: no finished artifact there (no readable {MANIFEST_NAME}: {exc})"
        ) from None
    found = manifest.get("kind")
    if found != kind:
        raise CatalogError(f"{location} holds a {found or 'unknown'} artifact, not a {kind}")
    wrong = _size_problems(location, file_entries(manifest))
    if wrong:
        raise CatalogError(
            f"{location} does not match its manifest: {'; '.join(wrong[:3])}"
            + (f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else "")
        )
    return location, manifest


def _size_problems(location: str, entries: Iterable[dict[str, Any]]) -> list[str]:
    sizes = storage.open_store(location).sizes() if storage.is_remote(location) else None
    problems = []
    for entry in entries:
        rel, want = str(entry["path"]), int(entry.get("size", 0))
        if sizes is not None:
            have = sizes.get(rel)
        else:
            try:
                have = (Path(location) / rel).stat().st_size
            except OSError:
                have = None
        if have is None:
            problems.append(f"{rel} is missing")
        elif have != want:
            problems.append(f"{rel} has {have:,} bytes, the manifest says {want:,}")
    return problems


def parents_by_fingerprint(queryset, fingerprints: Iterable[str], *, what: str) -> dict[str, Any]:
    """The ready catalog row of each fingerprint (the newest, when the same content was
    built twice); a fingerprint the catalog lacks is refused, naming it."""
    wanted = list(dict.fromkeys(str(f) for f in fingerprints))
    rows: dict[str, Any] = {}
    for row in queryset.filter(fingerprint__in=wanted, status=ArtifactStatus.READY).order_by(
        "-created_at"
    ):
        rows.setdefault(row.fingerprint, row)
    missing = [f for f in wanted if f not in rows]
    if missing:
        raise CatalogError(
            f"the catalog has no ready {what} with fingerprint {', '.join(missing)}: record "
            f"the {what}s this artifact was built from first"
        )
    return rows

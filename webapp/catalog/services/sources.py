"""Writes for sources: where files may come from (the allowed roots or s3://), registering
them, and the scan that counts documents, bytes and bad lines per file."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from shardcore import readers
from shardcore.manifest import fingerprint
from shardcore.storage import s3fs_defaults
from webapp.catalog import guards
from webapp.catalog.errors import CatalogError, SourcePathError, boundary
from webapp.catalog.models import (
    Source,
    SourceFile,
)
from webapp.catalog.services.common import (
    checked_name,
)


def source_location_check(*, uri: str) -> str:
    """The canonical location of a source, or SourcePathError. Every location goes through
    ``guards.uri_normalize`` (one parser: ``S3://`` is ``s3://``). Local paths must lie
    below one of the local ``settings.SOURCE_ROOTS`` after resolving symlinks; ``..`` is
    refused outright (even when it would resolve inside a root), and so is any scheme but
    s3://. An s3:// location must lie below one of the s3:// roots (none by default): the
    service's credentials may read buckets that editors must not register."""
    try:
        scheme, location = guards.uri_normalize(uri)
    except guards.GuardError as exc:
        msg = str(exc)
        if "is not supported" in msg:
            msg += f"; use a local path or an s3:// location under {_roots_text()}"
        raise SourcePathError(msg) from None
    if scheme != "file":
        s3_roots = _s3_roots()
        if not any(location == r or location.startswith(r + "/") for r in s3_roots):
            allowed = ", ".join(s3_roots) or "none configured"
            raise SourcePathError(
                f"uri: {location} is outside the s3:// source roots ({allowed}); an operator "
                "adds s3://bucket/prefix to SHARDYARD_SOURCE_ROOTS"
            )
        return location
    path = Path(location)
    if not path.is_absolute():
        raise SourcePathError(f"{uri}: give an absolute path (under {_roots_text()})")
    if ".." in path.parts:
        raise SourcePathError(f"{uri}: '..' is not allowed in a source location")
    if not path.exists():
        raise SourcePathError(f"{uri}: no such file or directory")
    resolved = path.resolve()
    if not _under_roots(resolved):
        via = f" (a symlink to {resolved})" if resolved != path else ""
        raise SourcePathError(f"{uri}{via} is outside the source roots {_roots_text()}")
    return str(resolved)


def _roots() -> list[Path]:
    """The local source roots."""
    return [Path(r).resolve() for r in settings.SOURCE_ROOTS if not _is_s3_root(r)]


def _s3_roots() -> list[str]:
    """The s3:// source roots, canonical (``guards.uri_normalize``), no trailing slash."""
    return [guards.uri_normalize(str(r))[1] for r in settings.SOURCE_ROOTS if _is_s3_root(r)]


def _is_s3_root(root) -> bool:
    return isinstance(root, str) and root.lower().startswith("s3://")


def _roots_text() -> str:
    roots = [str(r) for r in _roots()] + _s3_roots()
    return ", ".join(roots) or "(none configured: SHARDYARD_SOURCE_ROOTS)"


def _under_roots(path: Path) -> bool:
    return any(path == root or path.is_relative_to(root) for root in _roots())


@boundary
def source_register(
    *,
    name: str,
    uri: str,
    text_field: str = "text",
    metadata_fields: Iterable[str] = (),
    description: str = "",
    created_by=None,
    scan: bool = True,
) -> Source:
    """Register files as a source and (by default) scan them. A location that cannot be
    listed (missing credentials, a symlink out of the roots) is refused before any row is
    written."""
    name = checked_name(name, "source name")
    location = source_location_check(uri=uri)
    if Source.objects.filter(name=name).exists():
        raise CatalogError(f"a source named {name!r} already exists")
    if scan:
        _list_files(location)  # refuse unreadable locations before writing anything
    try:
        with transaction.atomic():
            source = Source.objects.create(
                name=name,
                uri=location,
                text_field=text_field,
                metadata_fields=list(metadata_fields),
                description=description,
                created_by=created_by,
            )
    except IntegrityError:
        raise CatalogError(f"a source named {name!r} already exists") from None
    if scan:
        source = source_scan(source_id=source.pk)
    return source


def source_file_urls(*, source: Source) -> list[tuple[str, str, int]]:
    """(relative path, absolute url, size) of every readable file of a source, sorted by
    relative path: the order of its documents. A symlink inside the source that leads out
    of the roots is refused (SourcePathError), never followed."""
    return _list_files(source.uri)


def _list_files(uri: str) -> list[tuple[str, str, int]]:

    if guards.uri_is_remote(uri):
        import fsspec

        scheme, uri = guards.uri_normalize(uri)
        s3fs_defaults()  # a store that stops answering is an error, not a hang
        try:
            fs, root = fsspec.core.url_to_fs(uri)
            if fs.isfile(root):
                return [(root.rsplit("/", 1)[-1], uri, int(fs.size(root)))]
            found = sorted(fs.find(root, detail=True).items())
        except Exception as exc:  # noqa: BLE001 - botocore/s3fs raise many kinds
            # Missing credentials, an unknown bucket, a refused connection: the location
            # cannot be read, which is the user's to fix, never a server error.
            raise SourcePathError(
                f"{uri}: cannot list files: {type(exc).__name__}: {exc}"
            ) from None
        out = []
        for key, info in found:
            if readers.is_supported(key):
                rel = key[len(root) :].lstrip("/")
                out.append((rel, f"{scheme}://{key}", int(info.get("size") or 0)))
        return out
    base = Path(uri)
    if base.is_file():
        return [(base.name, str(base), base.stat().st_size)]
    out = []
    for dirpath, _dirs, files in os.walk(base, followlinks=False):
        for fname in files:
            path = Path(dirpath) / fname
            if not readers.is_supported(fname):
                continue
            resolved = path.resolve()
            if not _under_roots(resolved):
                raise SourcePathError(
                    f"{path} is a symlink to {resolved}, outside the source roots {_roots_text()}"
                )
            out.append((str(path.relative_to(base)), str(path), resolved.stat().st_size))
    return sorted(out)


def source_scan(*, source_id: int) -> Source:
    """List the source's files and count their documents, bytes and bad lines (with
    samples per reason), reading each file once through ``shardcore.readers``."""

    source = Source.objects.get(pk=source_id)
    try:
        files = source_file_urls(source=source)
    except (SourcePathError, OSError) as exc:
        Source.objects.filter(pk=source.pk).update(status=Source.Status.FAILED, scan_error=str(exc))
        raise SourcePathError(str(exc)) from exc
    if not files:
        msg = f"{source.uri}: no readable files (.jsonl, .jsonl.gz, .jsonl.zst, .parquet, .txt)"
        Source.objects.filter(pk=source.pk).update(status=Source.Status.FAILED, scan_error=msg)
        raise CatalogError(msg)
    rows = []
    for rel, url, size in files:
        docs = bad = 0
        report: dict[str, dict[str, Any]] = {}
        try:
            for item in readers.read_segment(url, text_field=source.text_field):
                if isinstance(item, readers.BadInput):
                    bad += 1
                    slot = report.setdefault(item.reason, {"count": 0, "samples": []})
                    slot["count"] += 1
                    if len(slot["samples"]) < 5:
                        slot["samples"].append(item.describe(rel))
                else:
                    docs += 1
        except Exception as exc:  # noqa: BLE001 - a file that cannot be opened at all
            msg = f"{rel}: cannot read: {type(exc).__name__}: {exc}"
            Source.objects.filter(pk=source.pk).update(status=Source.Status.FAILED, scan_error=msg)
            raise SourcePathError(msg) from None
        rows.append(
            SourceFile(
                source=source,
                path=rel,
                size=size,
                num_documents=docs,
                bad_lines=bad,
                bad_input=report,
            )
        )

    with transaction.atomic():
        SourceFile.objects.filter(source=source).delete()
        SourceFile.objects.bulk_create(rows, batch_size=2000)
        source.num_files = len(rows)
        source.num_bytes = sum(r.size for r in rows)
        source.num_documents = sum(r.num_documents for r in rows)
        source.bad_lines = sum(r.bad_lines for r in rows)
        source.fingerprint = fingerprint(
            "source",
            params={
                "uri": source.uri,
                "text_field": source.text_field,
                "files": [(r.path, r.size) for r in rows],
            },
        )
        source.status = Source.Status.SCANNED
        source.scan_error = ""
        source.scanned_at = timezone.now()
        source.save()
    return source

"""Writes for what is made from a built mixture version: trainer configs (exports) and the
materialized copy (a job and its recorder)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import xxhash
from django.utils import timezone

from shardcore import atomic, storage
from shardcore.export import FORMATS, accepted_names, by_catalog_name, export
from shardcore.manifest import MANIFEST_NAME, file_checksum, total_bytes
from shardcore.materialize import plan_materialize
from shardcore.units import Plan
from webapp.catalog.errors import CatalogError, boundary, refused
from webapp.catalog.models import (
    ArtifactStatus,
    Export,
    MixtureVersion,
)
from webapp.catalog.selectors.mixtures import version_built
from webapp.catalog.services.common import (
    artifact_unbuilt,
    refuse_corrupt,
    shards_record,
)
from webapp.catalog.services.flags import taint_refresh
from webapp.catalog.services.launch import launch
from webapp.catalog.services.mixtures import version_source_ids
from webapp.jobs import recorders

if TYPE_CHECKING:
    from webapp.jobs.models import Job


def built_version(version_id: int) -> MixtureVersion:
    version = MixtureVersion.objects.select_related("mixture").filter(pk=version_id).first()
    if version is None:
        raise CatalogError(f"no mixture version {version_id}")
    if version.status == ArtifactStatus.RETIRED:
        raise CatalogError(
            f"mixture version {version} is retired: its schedule and files were removed, "
            "so it has no exports"
        )
    if version.status != ArtifactStatus.READY or not version_built(version):
        raise CatalogError(f"mixture version {version} has no built schedule")
    return version


EXPORT_FORMATS = {
    # catalog format -> (shardcore.export format, file name under <version>/exports/)
    f.catalog: (f.name, f.file_name)
    for f in FORMATS.values()
}


@boundary
def mixture_version_export(
    *, version_id: int, fmt: str, global_batch_size: int | None = None
) -> Export:
    """Write the version as a trainer config (megatron, olmo / olmo-core, nanotron, json)
    under ``<version>/exports/`` and record it. An export is a function of the built
    schedule, so asking again for the same file returns its ready row. A version on object
    storage gets its JSON description there; trainer configs, which name local shard
    files, are refused (``_export_target``)."""

    fmt, version, where, existing = mixture_version_export_find(
        version_id=version_id, fmt=fmt, global_batch_size=global_batch_size
    )
    if existing is not None:
        return existing
    text = mixture_version_export_render(
        version_id=version_id, fmt=fmt, global_batch_size=global_batch_size
    )
    if storage.is_remote(where):
        data = text.encode()
        folder, _, name = where.rpartition("/")
        storage.open_store(folder).put_bytes(name, data)
        size, checksum = len(data), xxhash.xxh3_64(data).hexdigest()
    else:
        path = Path(where)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, text)
        size, checksum = path.stat().st_size, file_checksum(path)
    return Export.objects.create(
        version=version,
        format=fmt,
        path=where,
        status=ArtifactStatus.READY,
        fingerprint=version.fingerprint,
        num_records=version.num_samples,
        num_tokens=version.num_tokens,
        num_bytes=size,
        checksum=checksum,
        finished_at=timezone.now(),
    )


def _export_target(
    version_id: int, fmt: str, global_batch_size: int | None
) -> tuple[str, MixtureVersion, str, str, dict[str, Any]]:
    """(catalog format, version, shardcore format, where its file is written: a path, or
    an s3:// URL beside a version on object storage, export options)."""
    spec = by_catalog_name(fmt)
    if spec is None:
        known = ", ".join(sorted(accepted_names()))
        raise CatalogError(f"unknown export format {fmt!r}; known: {known}")
    fmt = spec.catalog
    version = built_version(version_id)
    if storage.is_remote(version.path) and spec.local_only:
        # Trainer configs name local shard files that the trainer memory-maps.
        raise CatalogError(
            f"mixture version {version} is on object storage ({version.path}): the {fmt} "
            "config names local shard files; materialize the version and stream it with "
            "shardcore.loader, or export from a local copy"
        )
    core_fmt = spec.name
    options: dict[str, Any] = {}
    if spec.beside:
        options["out"] = Path(version.path) / "exports" / spec.beside
    if spec.batch_sized and global_batch_size:
        options["global_batch_size"] = int(global_batch_size)
    if spec.reads_copy:
        copy = (
            Export.objects.filter(
                version=version, format=Export.Format.MATERIALIZED, status=ArtifactStatus.READY
            )
            .order_by("-created_at")
            .first()
        )
        if copy is not None:
            options["materialized"] = copy.path
    name = spec.output_name(options)
    if storage.is_remote(version.path):
        where = storage.join(version.path, "exports", name)
    else:
        where = str(Path(version.path) / "exports" / name)
    return fmt, version, core_fmt, where, options


# Formats whose export writes files beside the config (Megatron: data-args files and the
# index cache; nanotron: the pools' view folders): only written by an editor, never
# computed for a reader's GET.
EXPORT_WRITES_FILES = {f.catalog for f in FORMATS.values() if f.writes_beside}


def mixture_version_export_find(
    *, version_id: int, fmt: str, global_batch_size: int | None = None
) -> tuple[str, MixtureVersion, str, Export | None]:
    """(catalog format, version, where its file is (a path or an s3:// URL), its ready
    Export row or None). Reads only."""
    fmt, version, _core, where, _options = _export_target(version_id, fmt, global_batch_size)
    existing = Export.objects.filter(
        version=version, format=fmt, path=where, status=ArtifactStatus.READY
    ).first()
    if existing is not None and not _stored_file(where):
        existing = None
    return fmt, version, where, existing


def _stored_file(where: str) -> bool:
    if not storage.is_remote(where):
        return Path(where).is_file()
    folder, _, name = storage.resolve(where).rpartition("/")
    return storage.open_store(folder).exists(name)


def mixture_version_export_render(
    *, version_id: int, fmt: str, global_batch_size: int | None = None
) -> str:
    """The text of a trainer config, computed from the built schedule without writing
    anything (what a reader's GET serves when the export was never recorded)."""

    fmt, version, core_fmt, _path, options = _export_target(version_id, fmt, global_batch_size)
    with refused(f"cannot export {version} as {fmt}"):
        return export(version.path, core_fmt, **options)


@boundary
def mixture_version_materialize(
    *, version_id: int, shard_bytes: int = 64 << 20, created_by=None
) -> Job:
    """Start a job writing the version's samples as IndexedDataset shards in schedule order
    (shardcore stage "materialize", one unit per output shard); its recorder fills the
    "materialized" Export row. While one materialization is building, asking again returns
    its job; a ready one is not rebuilt."""

    version = built_version(version_id)
    refuse_corrupt([version])
    out = storage.join(version.path, "materialized", uuid.uuid4().hex[:10])

    def running() -> Job | None:
        current = (
            Export.objects.filter(version=version, format=Export.Format.MATERIALIZED)
            .exclude(
                status__in=[ArtifactStatus.FAILED, ArtifactStatus.CANCELLED, ArtifactStatus.RETIRED]
            )
            .select_related("job")
            .order_by("-created_at")
            .first()
        )
        if current is not None and current.status == ArtifactStatus.READY:
            raise CatalogError(
                f"{version} is materialized already (export {current.pk} at {current.path})"
            )
        return current.job if current is not None else None

    def plan() -> Plan:
        with refused(f"cannot materialize {version}"):
            return plan_materialize(version.path, out, shard_bytes=shard_bytes)

    def create(job: Job, _plan: Plan) -> Job:
        Export.objects.create(version=version, format=Export.Format.MATERIALIZED, path=out, job=job)
        return job

    return launch(
        lock=lambda: MixtureVersion.objects.select_for_update().filter(pk=version.pk).first(),
        running=running,
        plan=plan,
        create=create,
        title=f"materialize {version}",
        recorder="mixture.materialized",
        created_by=created_by,
        plan_first=False,
    )


@recorders.register("mixture.materialized")
def mixture_materialized_record(*, job, manifest: dict | None) -> None:
    """Recorder of materialize jobs: the manifest becomes the Export row and its shards;
    a flag on data inside the version taints the copy too."""

    export = Export.objects.select_for_update().get(job=job, format=Export.Format.MATERIALIZED)
    if manifest is None:
        artifact_unbuilt(export, job=job)
        return
    out = export.path
    # A materialized copy counts samples, not documents.
    shards_record(
        owner={"export": export},
        out=out,
        manifest=manifest,
        shards=(
            {**sh, "index": i, "documents": 0, "tokens": sh["records"] * manifest["record_tokens"]}
            for i, sh in enumerate(manifest["shards"])
        ),
    )
    export.fingerprint = manifest["fingerprint"]
    export.manifest_path = storage.join(out, MANIFEST_NAME)
    export.num_records = manifest["num_records"]
    export.num_tokens = manifest["num_tokens"]
    export.num_bytes = total_bytes(manifest)
    export.status = ArtifactStatus.READY
    export.finished_at = timezone.now()
    export.save()
    taint_refresh(source_ids=version_source_ids(export.version))

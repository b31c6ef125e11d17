"""What the catalog services share: name checks, the limited child process that plans
from user input, fresh artifact directories, the corrupt-input refusal, and the recording
of an artifact's shards and of a build that did not finish."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from shardcore import storage
from shardcore.manifest import files_by_path
from shardcore.sandbox import LimitError, run_limited
from webapp.catalog import guards
from webapp.catalog.errors import CatalogError
from webapp.catalog.models import (
    ArtifactStatus,
    Corruption,
    MixtureVersion,
    Pool,
    Shard,
    TokenizedSource,
)
from webapp.jobs.models import JobState

if TYPE_CHECKING:
    from webapp.jobs.models import Job


def checked_name(name: str, field: str, max_length: int = guards.NAME_MAX) -> str:
    try:
        return guards.name_check(name, field=field, max_length=max_length)
    except guards.GuardError as exc:
        raise CatalogError(str(exc)) from None


def limited(fn, /, *args, what: str, **kwargs):
    """``fn(*args, **kwargs)`` in a child process with the planning limits
    (``settings.PLAN_SECONDS``, ``PLAN_MEMORY_MB``): user input never runs in the web
    process itself. A limit exceeded is a CatalogError."""

    try:
        return run_limited(
            fn,
            args,
            kwargs,
            seconds=settings.PLAN_SECONDS,
            memory=settings.PLAN_MEMORY_MB << 20,
            what=what,
        )
    except LimitError as exc:
        raise CatalogError(f"{exc} (SHARDYARD_PLAN_SECONDS / SHARDYARD_PLAN_MEMORY_MB)") from None


def artifact_dir(kind: str, name: str) -> str:
    # A fresh directory per build: a rebuild never writes into a finished artifact. The
    # name was validated (guards.name_check); data_path checks it stays under the root,
    # a local directory or an s3:// prefix.
    try:
        return guards.data_path(
            kind, f"{checked_name(name, f'{kind} name')}-{uuid.uuid4().hex[:10]}"
        )
    except guards.GuardError as exc:
        raise CatalogError(str(exc)) from None


def refuse_corrupt(artifacts) -> None:
    """Build nothing on an artifact the scrub marked corrupt (or built from corrupt data):
    the error names it and its first problem."""

    for artifact in artifacts:
        field = {
            TokenizedSource: "tokenized_source",
            Pool: "pool",
            MixtureVersion: "mixture_version",
        }[type(artifact)]
        found = Corruption.objects.filter(**{field: artifact}).first()
        if found is not None:
            raise CatalogError(
                f"{artifact} is marked corrupt ({found.problem}); restore its files and let "
                "the next scrub clear the mark (manage.py catalog scrub) before building on it"
            )


def jsonable(value: Any) -> Any:
    """``value`` as it reads back from a JSONField (tuples become lists, and so on)."""

    return json.loads(json.dumps(value))


def artifact_unbuilt(artifact, *, job: Job) -> None:
    """The row of an artifact whose job ended without a manifest: cancelled when the job
    was, failed otherwise."""
    cancelled = job.state == JobState.CANCELLED
    artifact.status = ArtifactStatus.CANCELLED if cancelled else ArtifactStatus.FAILED
    artifact.finished_at = timezone.now()
    artifact.save()


def shards_record(*, owner: dict[str, Any], out: str, manifest: dict[str, Any], shards) -> None:
    """The Shard rows of a built artifact. ``owner`` names it (``{"pool": pool}``);
    ``shards`` give each shard's ``index``, ``prefix`` (relative to ``out``), ``records``,
    ``documents`` and ``tokens``; size and checksum are its .bin's manifest entry."""

    files = files_by_path(manifest)
    Shard.objects.bulk_create(
        [
            Shard(
                **owner,
                index=sh["index"],
                prefix=storage.join(out, sh["prefix"]),
                num_records=sh["records"],
                num_documents=sh["documents"],
                num_tokens=sh["tokens"],
                num_bytes=files.get(sh["prefix"] + ".bin", {}).get("size", 0),
                checksum=files.get(sh["prefix"] + ".bin", {}).get("xxh3", ""),
            )
            for sh in shards
        ],
        batch_size=2000,
    )

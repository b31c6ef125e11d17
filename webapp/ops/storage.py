"""Storage you can see and reclaim: bytes held per source, tokenized source, annotation,
pool, mixture version, materialized copy, owner and team, measured by a worker's task
(``storage_measure``; the pages show the stored result and its age, never measuring on a
request: listing a store takes minutes on object storage, or hangs while it is down);
retiring an artifact (its files removed, its
row, lineage and audit rows kept); and a garbage collector for files under the data root
that no row owns. The same code serves a local data root and an ``s3://`` one (fsspec).

What the collector may touch: only the catalog's own directories under the data root
(``ARTIFACT_DIRS``: where builds write). The rest of the data root (the cache, the
filesystem broker, the SQLite file, default source roots) is never listed, let alone
removed. A file is owned when it lies under the path of an artifact row that is not
retired, of a materialized copy or config file, or of a job's output directory (a build
writes there only after its rows are committed). Files younger than ``min_age`` seconds are
left alone too, and the listing is taken before the rows are read, so a build that starts
meanwhile is never collected."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from webapp.catalog.models import (
    Annotation,
    ArtifactStatus,
    Export,
    MixtureVersion,
    Pool,
    RunSegment,
    Source,
    TokenizedSource,
    TrainingRun,
)
from webapp.jobs.models import Job
from webapp.ops.models import StorageReport
from webapp.roles import ROLES
from webapp.tasks import task_send_on_commit

log = logging.getLogger(__name__)

ARTIFACT_DIRS = ("tokenized", "annotations", "pools", "mixtures", "scrub")
KINDS = {
    "tokenized": TokenizedSource,
    "annotation": Annotation,
    "pool": Pool,
    "version": MixtureVersion,
    "export": Export,
}
ACTIVE_RUN_STATES = (TrainingRun.State.REGISTERED, TrainingRun.State.RUNNING)


class RetireRefused(Exception):
    """The artifact is read by something live; the message lists what."""


# --- file systems -------------------------------------------------------------------------


def _fs(url):
    import fsspec

    return fsspec.core.url_to_fs(str(url))


def _norm(fs, path) -> str:
    return fs._strip_protocol(str(path)).rstrip("/")


def path_bytes(path: str) -> int:
    """Bytes of every file under ``path`` (a directory or one file); 0 when it is gone."""
    if not path:
        return 0
    fs, p = _fs(path)
    try:
        if not fs.exists(p):
            return 0
        if fs.isfile(p):
            return int(fs.size(p))
        return int(sum(int(info.get("size") or 0) for info in fs.find(p, detail=True).values()))
    except FileNotFoundError:
        return 0


def _remove(path: str) -> int:
    """Remove ``path`` (a directory or one file); returns the bytes it held."""
    held = path_bytes(path)
    fs, p = _fs(path)
    if fs.exists(p):
        fs.rm(p, recursive=True)
    return held


# --- accounting ---------------------------------------------------------------------------


def _label(kind: str, obj) -> str:
    if kind == "version":
        return f"{obj.mixture.name} v{obj.number}"
    if kind == "export":
        return f"{obj.format} copy of {obj.version.mixture.name} v{obj.version.number}"
    if kind == "tokenized":
        return f"{obj.source.name} ({obj.tokenizer.spec})"
    if kind == "annotation":
        ts = obj.tokenized_source
        return f"{obj.annotator} of {ts.source.name} ({ts.tokenizer.spec})"
    return obj.name


def storage_report(*, measured: dict[tuple[str, int], int] | None = None) -> dict:
    """Bytes held per artifact (measured on the store), per source (its registered
    files), and per owner and team (the groups of the user who built it that are not
    roles; an artifact counts in each of its owner's teams).

    With ``measured`` ({(kind, id): bytes}, a stored measurement's), nothing is measured:
    each artifact row of the catalog now gets its stored bytes (None: not measured then,
    e.g. built since; 0 once retired), and the totals add those up."""

    rows = []
    querysets: dict[str, QuerySet[Any]] = {
        "tokenized": TokenizedSource.objects.select_related("source", "tokenizer"),
        "annotation": Annotation.objects.select_related(
            "tokenized_source__source", "tokenized_source__tokenizer"
        ),
        "pool": Pool.objects.all(),
        "version": MixtureVersion.objects.select_related("mixture"),
        "export": Export.objects.select_related("version__mixture"),
    }
    for kind, qs in querysets.items():
        for obj in qs.order_by("pk"):
            owner_id = getattr(obj, "created_by_id", None)
            if kind == "export":
                owner_id = obj.version.created_by_id
            if obj.status == ArtifactStatus.RETIRED:
                size: int | None = 0
            elif measured is not None:
                size = measured.get((kind, obj.pk))
            else:
                size = path_bytes(obj.path)
            rows.append(
                {
                    "kind": kind,
                    "id": obj.pk,
                    "name": _label(kind, obj),
                    "status": obj.status,
                    "version_id": obj.version_id if kind == "export" else None,
                    "path": obj.path,
                    "owner_id": owner_id,
                    "bytes": size,
                }
            )
    if measured is None:
        # A materialized copy lies inside its version's directory: count it once, as the
        # copy (stored measurements are counted so already).
        copies: dict[int, int] = {}
        for r in rows:
            if r["kind"] == "export":
                copies[r["version_id"]] = copies.get(r["version_id"], 0) + r["bytes"]
        for r in rows:
            if r["kind"] == "version":
                r["bytes"] = max(0, r["bytes"] - copies.get(r["id"], 0))

    users = {
        u.pk: u
        for u in get_user_model()
        .objects.filter(pk__in={r["owner_id"] for r in rows if r["owner_id"]})
        .prefetch_related("groups")
    }
    per_owner: dict[str, int] = {}
    per_team: dict[str, int] = {}
    for r in rows:
        user = users.get(r["owner_id"])
        r["owner"] = user.username if user else ""
        held = r["bytes"] or 0
        per_owner[r["owner"] or "(nobody)"] = per_owner.get(r["owner"] or "(nobody)", 0) + held
        teams = [g.name for g in user.groups.all() if g.name not in ROLES] if user else []
        r["teams"] = teams
        for team in teams or ["(no team)"]:
            per_team[team] = per_team.get(team, 0) + held
        del r["owner_id"], r["version_id"]
    sources = [
        {"kind": "source", "id": s.pk, "name": s.name, "path": s.uri, "bytes": s.num_bytes}
        for s in Source.objects.order_by("name")
    ]
    by_kind: dict[str, int] = {}
    for r in rows:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + (r["bytes"] or 0)
    return {
        "data_root": str(settings.DATA_ROOT),
        "sources": sources,
        "artifacts": rows,
        "by_kind": by_kind,
        "by_owner": dict(sorted(per_owner.items())),
        "by_team": dict(sorted(per_team.items())),
        "total": sum(by_kind.values()),
    }


# --- measuring in a task -------------------------------------------------------------------

# A measurement under way for this long is taken for lost (its worker died); the task's own
# time limit is below it.
MEASURE_LIMIT = 3600
# Finished measurements kept (the newest ones); older rows are deleted.
MEASURE_KEEP = 20


def _under_way():
    horizon = timezone.now() - timedelta(seconds=MEASURE_LIMIT)
    return StorageReport.objects.filter(
        Q(state=StorageReport.State.QUEUED, created_at__gte=horizon)
        | Q(state=StorageReport.State.RUNNING, started_at__gte=horizon)
    )


def _send(report_id: int) -> None:
    task_send_on_commit(
        "workers.storage_measure", what=f"storage measurement {report_id}", report_id=report_id
    )


def storage_measure_request(*, requested_by=None) -> StorageReport:
    """Queue a measurement of the data root for a worker (sent when the transaction
    commits); while one is queued or running, that one is the answer."""
    with transaction.atomic():
        pending = _under_way().order_by("-pk").first()
        if pending is not None:
            return pending
        row = StorageReport.objects.create(requested_by=requested_by)
        _send(row.pk)
    return row


def storage_measure_due(*, interval: float) -> StorageReport | None:
    """The sweepers' call: queue a measurement when the newest finished one is older than
    ``interval`` seconds (or there is none) and none is under way; None otherwise."""
    if interval <= 0:
        return None
    newest = (
        StorageReport.objects.filter(
            state__in=(StorageReport.State.DONE, StorageReport.State.FAILED)
        )
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )
    if newest is not None and timezone.now() - newest < timedelta(seconds=interval):
        return None
    if _under_way().exists():
        return None
    return storage_measure_request()


def storage_measure(*, report_id: int) -> str:
    """The task's work: claim the queued row (or one whose worker was lost), measure
    (``storage_report``), store the result or the error. A redelivered message finds the
    row claimed or done and measures nothing."""
    now = timezone.now()
    stale = now - timedelta(seconds=MEASURE_LIMIT)
    claimed = (
        StorageReport.objects.filter(pk=report_id)
        .filter(
            Q(state=StorageReport.State.QUEUED)
            | Q(state=StorageReport.State.RUNNING, started_at__lt=stale)
        )
        .update(state=StorageReport.State.RUNNING, started_at=now)
    )
    if not claimed:
        return f"storage report {report_id}: not queued"
    try:
        report = storage_report()
    except Exception as exc:  # the store is down or refuses: the row says why
        StorageReport.objects.filter(pk=report_id).update(
            state=StorageReport.State.FAILED,
            finished_at=timezone.now(),
            error=f"{type(exc).__name__}: {exc}"[:2000],
        )
        log.warning("storage report %s failed: %s", report_id, exc)
        return f"storage report {report_id}: failed"
    StorageReport.objects.filter(pk=report_id).update(
        state=StorageReport.State.DONE, finished_at=timezone.now(), report=report
    )
    finished = StorageReport.objects.filter(
        state__in=(StorageReport.State.DONE, StorageReport.State.FAILED)
    ).order_by("-finished_at", "-pk")
    old = list(finished.values_list("pk", flat=True)[MEASURE_KEEP:])
    if old:
        StorageReport.objects.filter(pk__in=old).delete()
    return f"storage report {report_id}: {report['total']} bytes"


def storage_latest() -> dict:
    """What the page and the API show, from rows only (nothing is measured here): the
    catalog's artifacts with the bytes of the newest finished measurement (``report``;
    None for an artifact not measured yet), when it was measured and its age in seconds, whether a measurement is under way, and the error of the newest
    measurement when it failed after that report."""
    now = timezone.now()
    done = (
        StorageReport.objects.filter(state=StorageReport.State.DONE)
        .order_by("-finished_at", "-pk")
        .first()
    )
    failed = (
        StorageReport.objects.filter(state=StorageReport.State.FAILED)
        .order_by("-finished_at", "-pk")
        .first()
    )
    # A DONE or FAILED report has its finished_at set.
    finished = done.finished_at if done is not None else None
    if failed is not None and finished is not None and (failed.finished_at or now) <= finished:
        failed = None
    pending = _under_way().order_by("-pk").first()
    stored = done.report.get("artifacts", []) if done is not None else []
    return {
        "report": storage_report(measured={(r["kind"], r["id"]): r["bytes"] for r in stored}),
        "measured_at": finished,
        "age_seconds": (now - finished).total_seconds() if finished is not None else None,
        "took_seconds": (
            (finished - done.started_at).total_seconds()
            if done is not None and finished is not None and done.started_at
            else None
        ),
        "measuring": pending.state if pending is not None else None,
        "measuring_since": pending.created_at if pending is not None else None,
        "last_error": failed.error if failed is not None else "",
        "last_error_at": failed.finished_at if failed is not None else None,
    }


# --- retiring -----------------------------------------------------------------------------


def _active_runs(version) -> list[str]:
    """The registered or running training runs that read ``version`` (as their current
    version or as a segment before a switch), each named."""
    runs = {
        (r.pk, r.name)
        for r in TrainingRun.objects.filter(state__in=ACTIVE_RUN_STATES, mixture_version=version)
    }
    runs |= {
        (s.run_id, s.run.name)
        for s in RunSegment.objects.filter(
            mixture_version=version, run__state__in=ACTIVE_RUN_STATES
        ).select_related("run")
    }
    return [f"training run {name} (id {pk})" for pk, name in sorted(runs, key=lambda r: r[1])]


def _readers(kind: str, obj) -> list[str]:
    """What live reads ``obj``: each one named."""
    live = [ArtifactStatus.READY, ArtifactStatus.BUILDING]
    out = []
    if kind == "tokenized":
        for pool in obj.pools.filter(status__in=live).order_by("pk"):
            out.append(f"pool {pool.name} (id {pool.pk})")
        # An annotation being built reads the source's text (its units, until the end).
        for a in obj.annotations.filter(status=ArtifactStatus.BUILDING).order_by("pk"):
            out.append(f"annotation {a.annotator} (id {a.pk}), being built by job {a.job_id}")
    elif kind == "annotation":
        for pool in obj.pools.filter(status__in=live).order_by("pk"):
            out.append(f"pool {pool.name} (id {pool.pk})")
    elif kind == "export":
        # A materialized copy is what a run that streams its version reads.
        if obj.format == Export.Format.MATERIALIZED:
            out += _active_runs(obj.version)
    elif kind == "pool":
        for v in (
            MixtureVersion.objects.filter(components__pool=obj, status__in=live)
            .select_related("mixture")
            .distinct()
            .order_by("pk")
        ):
            out.append(f"mixture version {v.mixture.name} v{v.number} (id {v.pk})")
        for p in Pool.objects.filter(train_pool=obj, status__in=live):
            out.append(f"validation pool {p.name} (id {p.pk})")
    elif kind == "version":
        out += _active_runs(obj)
        for e in obj.exports.filter(status__in=live, format=Export.Format.MATERIALIZED):
            out.append(f"materialized copy (export {e.pk})")
    return out


def _refusal(kind: str, obj) -> str | None:
    """Why ``obj`` may not be retired now (being built, or read by something live, each
    reader named); None when it may."""
    if obj.status == ArtifactStatus.BUILDING:
        return f"{kind} {obj.pk} is still being built; cancel its job first"
    readers = _readers(kind, obj)
    if readers:
        return (
            f"{kind} {_label(kind, obj)} (id {obj.pk}) is read by {len(readers)} live "
            f"item(s): {'; '.join(readers)}; retire those first"
        )
    return None


def artifact_retire_preview(*, kind: str, pk: int) -> dict:
    """What retiring would do, for the confirmation page: ``{"kind", "id", "name",
    "status", "path", "bytes", "refusal"}`` (``refusal``: why it may not go now, naming
    what reads it; None when it may). Reads only."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: choose from {', '.join(KINDS)}")
    model = KINDS[kind]
    obj = model.objects.filter(pk=pk).first()  # type: ignore[attr-defined]
    if obj is None:
        raise model.DoesNotExist(f"{kind} {pk} does not exist")  # type: ignore[attr-defined]
    retired = obj.status == ArtifactStatus.RETIRED
    return {
        "kind": kind,
        "id": pk,
        "name": _label(kind, obj),
        "status": obj.status,
        "path": obj.path,
        "bytes": 0 if retired else path_bytes(obj.path),
        "refusal": None if retired else _refusal(kind, obj),
    }


def artifact_retire(*, kind: str, pk: int) -> dict:
    """Remove the files of a built artifact and mark its row retired; refused (naming
    them) while a live artifact or an active training run reads it. Rows, lineage,
    shards and audit answers stay. Returns {"kind", "id", "path", "bytes_freed"}."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: choose from {', '.join(KINDS)}")
    model = KINDS[kind]
    with transaction.atomic():
        obj = model.objects.select_for_update().filter(pk=pk).first()  # type: ignore[attr-defined]
        if obj is None:
            raise model.DoesNotExist(f"{kind} {pk} does not exist")  # type: ignore[attr-defined]
        if obj.status == ArtifactStatus.RETIRED:
            return {"kind": kind, "id": pk, "path": obj.path, "bytes_freed": 0}
        refusal = _refusal(kind, obj)
        if refusal:
            raise RetireRefused(refusal)
        # Marked first: from now on nothing builds on it, and no scrub checks it.
        model.objects.filter(pk=pk).update(status=ArtifactStatus.RETIRED)  # type: ignore[attr-defined]
    freed = _remove(obj.path)
    return {"kind": kind, "id": pk, "path": obj.path, "bytes_freed": freed}


# --- garbage collector ----------------------------------------------------------------------


@dataclass
class GcReport:
    data_root: str
    orphans: list[tuple[str, int]] = field(default_factory=list)  # (path, bytes)
    kept_young: int = 0
    owned_files: int = 0
    removed: bool = False

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.orphans)

    def lines(self) -> list[str]:
        verb = "removed" if self.removed else "would remove"
        out = [
            f"{verb} {len(self.orphans)} file(s), {self.bytes} bytes, under {self.data_root}"
            f" ({self.owned_files} owned file(s) kept, {self.kept_young} too young)"
        ]
        out += [f"  {path}  {size}" for path, size in self.orphans]
        return out


# Every row that owns a directory (or a file) under ARTIFACT_DIRS.
ARTIFACT_MODELS = (TokenizedSource, Annotation, Pool, MixtureVersion, Export)


def _owned_paths() -> list[str]:
    paths: list[str] = []
    for model in ARTIFACT_MODELS:
        paths += model.objects.exclude(status=ArtifactStatus.RETIRED).values_list("path", flat=True)

    # A job's output directory is its artifact's (retired: files gone on purpose, and the
    # artifact's row no longer owns them) or a scrub's report.
    retired = set()
    for model in ARTIFACT_MODELS:
        retired |= set(
            model.objects.filter(status=ArtifactStatus.RETIRED).values_list("path", flat=True)
        )
    paths += [p for p in Job.objects.values_list("output_dir", flat=True) if p not in retired]
    return [p for p in paths if p]


def collect_garbage(*, delete: bool = False, min_age: float = 3600.0) -> GcReport:
    """Find (``delete=False``, the dry run) or remove the files under the catalog's
    directories of the data root that no row owns."""
    root = str(settings.DATA_ROOT)
    fs, base = _fs(root)
    base = _norm(fs, base)
    report = GcReport(data_root=root)
    listing: dict[str, dict] = {}
    for sub in ARTIFACT_DIRS:
        top = f"{base}/{sub}"
        try:
            if fs.exists(top):
                listing.update(fs.find(top, detail=True))
        except FileNotFoundError:
            continue
    owned: set[str] = set()
    for p in _owned_paths():
        try:
            owned.add(_norm(fs, _fs(p)[1]))
        except Exception:  # a path on another store: never under this root
            continue

    def is_owned(path: str) -> bool:
        # The path itself or one of its directories up to the root is an owned path.
        while len(path) > len(base):
            if path in owned:
                return True
            path = path.rsplit("/", 1)[0]
        return False

    now = time.time()
    for path, info in sorted(listing.items()):
        path = _norm(fs, path)
        if is_owned(path):
            report.owned_files += 1
            continue
        mtime = info.get("mtime") or info.get("LastModified") or info.get("created")
        if hasattr(mtime, "timestamp"):
            mtime = mtime.timestamp()  # type: ignore[union-attr]
        if min_age > 0 and mtime is not None and now - float(mtime) < min_age:
            report.kept_young += 1
            continue
        report.orphans.append((path, int(info.get("size") or 0)))
    if delete:
        for path, _size in report.orphans:
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(path)
        if "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
            _prune_empty_dirs(fs, base, owned)
        report.removed = True
    return report


def _prune_empty_dirs(fs, base: str, owned: set[str]) -> None:
    """Local roots: remove directories the collection left empty (never an owned one)."""

    for sub in ARTIFACT_DIRS:
        top = Path(base) / sub
        if not top.is_dir():
            continue
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            if str(d) in owned or any(o.startswith(str(d) + "/") for o in owned):
                continue
            with contextlib.suppress(OSError):  # not empty
                d.rmdir()

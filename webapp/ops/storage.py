"""Storage you can see and reclaim: bytes held per source, tokenized source, pool, mixture
version, materialized copy, owner and team; retiring an artifact (its files removed, its
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
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from webapp.catalog.models import (
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
from webapp.roles import ROLES

ARTIFACT_DIRS = ("tokenized", "pools", "mixtures", "scrub")
KINDS = {
    "tokenized": TokenizedSource,
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
        return int(sum(int(info.get("size") or 0)
                       for info in fs.find(p, detail=True).values()))  # fmt: skip
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
    return obj.name


def storage_report() -> dict:
    """Bytes held per artifact (measured on the store), per source (its registered
    files), and per owner and team (the groups of the user who built it that are not
    roles; an artifact counts in each of its owner's teams)."""

    rows = []
    querysets = {
        "tokenized": TokenizedSource.objects.select_related("source", "tokenizer"),
        "pool": Pool.objects.all(),
        "version": MixtureVersion.objects.select_related("mixture"),
        "export": Export.objects.select_related("version__mixture"),
    }
    for kind, qs in querysets.items():
        for obj in qs.order_by("pk"):
            owner_id = getattr(obj, "created_by_id", None)
            if kind == "export":
                owner_id = obj.version.created_by_id
            rows.append({
                "kind": kind, "id": obj.pk, "name": _label(kind, obj), "status": obj.status,
                "version_id": obj.version_id if kind == "export" else None,
                "path": obj.path, "owner_id": owner_id,
                "bytes": 0 if obj.status == ArtifactStatus.RETIRED else path_bytes(obj.path),
            })  # fmt: skip
    # A materialized copy lies inside its version's directory: count it once, as the copy.
    copies: dict[int, int] = {}
    for r in rows:
        if r["kind"] == "export":
            copies[r["version_id"]] = copies.get(r["version_id"], 0) + r["bytes"]
    for r in rows:
        if r["kind"] == "version":
            r["bytes"] = max(0, r["bytes"] - copies.get(r["id"], 0))

    users = {u.pk: u for u in get_user_model().objects.filter(
        pk__in={r["owner_id"] for r in rows if r["owner_id"]}).prefetch_related("groups")}  # fmt: skip
    per_owner: dict[str, int] = {}
    per_team: dict[str, int] = {}
    for r in rows:
        user = users.get(r["owner_id"])
        r["owner"] = user.username if user else ""
        per_owner[r["owner"] or "(nobody)"] = (
            per_owner.get(r["owner"] or "(nobody)", 0) + r["bytes"]
        )
        teams = [g.name for g in user.groups.all() if g.name not in ROLES] if user else []
        r["teams"] = teams
        for team in teams or ["(no team)"]:
            per_team[team] = per_team.get(team, 0) + r["bytes"]
        del r["owner_id"], r["version_id"]
    sources = [
        {"kind": "source", "id": s.pk, "name": s.name, "path": s.uri, "bytes": s.num_bytes}
        for s in Source.objects.order_by("name")
    ]
    by_kind: dict[str, int] = {}
    for r in rows:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + r["bytes"]
    return {
        "data_root": str(settings.DATA_ROOT),
        "sources": sources,
        "artifacts": rows,
        "by_kind": by_kind,
        "by_owner": dict(sorted(per_owner.items())),
        "by_team": dict(sorted(per_team.items())),
        "total": sum(by_kind.values()),
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
        out = [f"{verb} {len(self.orphans)} file(s), {self.bytes} bytes, under {self.data_root}"
               f" ({self.owned_files} owned file(s) kept, {self.kept_young} too young)"]  # fmt: skip
        out += [f"  {path}  {size}" for path, size in self.orphans]
        return out


def _owned_paths() -> list[str]:
    paths = []
    for model in (TokenizedSource, Pool, MixtureVersion, Export):
        paths += model.objects.exclude(status=ArtifactStatus.RETIRED).values_list("path", flat=True)

    # A job's output directory is its artifact's (retired: files gone on purpose, and the
    # artifact's row no longer owns them) or a scrub's report.
    retired = set()
    for model in (TokenizedSource, Pool, MixtureVersion, Export):
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

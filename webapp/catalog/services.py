"""Writes for the catalog, named ``<entity>_<action>`` with keyword-only arguments.

These services are the only Django code that calls shardcore. Long stages (tokenize, pool,
materialize) become jobs (``webapp.jobs.services.job_create``) whose recorder, a function
here, turns the finished manifest into artifact rows in the same transaction that marks the
job succeeded. User mistakes raise ``CatalogError`` with a message fit for a page.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from webapp.catalog import builder, guards
from webapp.catalog.models import (
    ArtifactStatus,
    Export,
    Flag,
    Mixture,
    MixtureComponent,
    MixtureVersion,
    Pool,
    RunLoss,
    RunProgress,
    RunSegment,
    Shard,
    Source,
    SourceFile,
    Taint,
    TokenizedSource,
    Tokenizer,
    TrainingRun,
)

if TYPE_CHECKING:
    from webapp.jobs.models import Job


class CatalogError(Exception):
    """A request the catalog refuses, with a message that says why."""


class RunSwitchedError(CatalogError):
    """A progress report read a version the run no longer reads at those samples: it
    switched version earlier (HTTP 409); the trainer resumes from its checkpoint at the
    switch and reads the run's segments."""


class RunPermissionError(CatalogError):
    """The user may not write this run: it belongs to someone else (a 403)."""


class SourcePathError(CatalogError):
    """A source location outside the allowed roots, or one Shardyard cannot read."""


# --- sources ----------------------------------------------------------------------------


def source_location_check(*, uri: str) -> str:
    """The canonical location of a source, or SourcePathError. Every location goes through
    ``guards.uri_normalize`` (one parser: ``S3://`` is ``s3://``). Local paths must lie
    below one of ``settings.SOURCE_ROOTS`` after resolving symlinks; ``..`` is refused
    outright (even when it would resolve inside a root), and so is any scheme but s3://."""
    try:
        scheme, location = guards.uri_normalize(uri)
    except guards.GuardError as exc:
        msg = str(exc)
        if "is not supported" in msg:
            msg += f"; use a local path under {_roots_text()} or an s3:// URI"
        raise SourcePathError(msg) from None
    if scheme != "file":
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
    return [Path(r).resolve() for r in settings.SOURCE_ROOTS]


def _roots_text() -> str:
    return ", ".join(str(r) for r in _roots()) or "(none configured: SHARDYARD_SOURCE_ROOTS)"


def _under_roots(path: Path) -> bool:
    return any(path == root or path.is_relative_to(root) for root in _roots())


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
    name = _name(name, "source name")
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


def _name(name: str, field: str, max_length: int = guards.NAME_MAX) -> str:
    try:
        return guards.name_check(name, field=field, max_length=max_length)
    except guards.GuardError as exc:
        raise CatalogError(str(exc)) from None


def source_file_urls(*, source: Source) -> list[tuple[str, str, int]]:
    """(relative path, absolute url, size) of every readable file of a source, sorted by
    relative path: the order of its documents. A symlink inside the source that leads out
    of the roots is refused (SourcePathError), never followed."""
    return _list_files(source.uri)


def _list_files(uri: str) -> list[tuple[str, str, int]]:
    from shardcore import readers

    if guards.uri_is_remote(uri):
        import fsspec

        scheme, uri = guards.uri_normalize(uri)
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
    from shardcore import readers

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
                source=source, path=rel, size=size, num_documents=docs, bad_lines=bad,
                bad_input=report,
            )
        )  # fmt: skip
    from shardcore.manifest import fingerprint

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


# --- tokenizers and tokenized sources ---------------------------------------------------


def limited(fn, /, *args, what: str, **kwargs):
    """``fn(*args, **kwargs)`` in a child process with the planning limits
    (``settings.PLAN_SECONDS``, ``PLAN_MEMORY_MB``): user input never runs in the web
    process itself. A limit exceeded is a CatalogError."""
    from shardcore.sandbox import LimitError, run_limited

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


def _tokenizer_facts(spec: str) -> dict[str, Any]:
    from shardcore.tokenizers import load_tokenizer

    tok = load_tokenizer(spec, "reference")  # the facts only: the fast engine is not needed
    return {"fingerprint": tok.fingerprint, "vocab_size": tok.vocab_size, "eos_id": tok.eos_id}


def tokenizer_spec_check(*, spec: str) -> str:
    try:
        return guards.tokenizer_spec_check(spec)
    except guards.GuardError as exc:
        raise CatalogError(str(exc)) from None


def tokenizer_ensure(*, spec: str) -> Tokenizer:
    """The catalog row of a tokenizer spec, loading it once (in a limited child process)
    to learn its fingerprint. hf: paths only from ``settings.TOKENIZER_ROOTS``."""
    from shardcore.errors import InputError

    spec = tokenizer_spec_check(spec=spec)
    existing = Tokenizer.objects.filter(spec=spec).first()
    if existing is not None:
        return existing
    try:
        facts = limited(_tokenizer_facts, spec, what=f"loading tokenizer {spec!r}")
    except (InputError, ValueError, OSError) as exc:
        raise CatalogError(f"tokenizer {spec!r}: {exc}") from exc
    row, _ = Tokenizer.objects.get_or_create(spec=spec, defaults=facts)
    return row


def _artifact_dir(kind: str, name: str) -> Path:
    # A fresh directory per build: a rebuild never writes into a finished artifact. The
    # name was validated (guards.name_check); data_path checks it stays under the root.
    try:
        return guards.data_path(kind, f"{_name(name, f'{kind} name')}-{uuid.uuid4().hex[:10]}")
    except guards.GuardError as exc:
        raise CatalogError(str(exc)) from None


def tokenized_source_build(
    *,
    source_id: int,
    tokenizer: str | None = None,
    engine: str = "auto",
    shard_size: int = 256 << 20,
    unit_bytes: int = 64 << 20,
    created_by=None,
) -> TokenizedSource:
    """Start a tokenize job over the source's files; returns the BUILDING artifact row
    (its ``job`` shows progress). The job's recorder fills it in when the manifest exists."""
    from shardcore.errors import InputError
    from shardcore.tokenize import plan_tokenize
    from shardcore.tokenizers import DEFAULT_TOKENIZER
    from webapp.jobs.services import job_create

    source = Source.objects.get(pk=source_id)
    tok = tokenizer_ensure(spec=tokenizer or DEFAULT_TOKENIZER)
    running = _tokenizing(source, tok)
    if running is not None:
        return running  # a launch while the same one runs answers the running one
    files = source_file_urls(source=source)  # checks the roots again: files may have moved
    if not files:
        raise CatalogError(f"source {source.name} has no readable files")
    out = _artifact_dir("tokenized", source.name)
    try:
        plan = limited(
            plan_tokenize,
            [url for _rel, url, _size in files],
            str(out),
            tokenizer=tok.spec,
            engine=engine,
            text_field=source.text_field,
            shard_size=shard_size,
            unit_bytes=unit_bytes,
            what=f"planning the tokenization of {source.name}",
        )
    except (InputError, ValueError) as exc:
        raise CatalogError(f"cannot tokenize {source.name}: {exc}") from exc
    with transaction.atomic():
        # Launches of one source are serialized: the second of two concurrent ones sees
        # the first's row and answers it.
        Source.objects.select_for_update().get(pk=source.pk)
        running = _tokenizing(source, tok)
        if running is not None:
            return running
        job = job_create(
            plan=plan,
            title=f"tokenize {source.name} with {tok.spec}",
            recorder="webapp.catalog.services.tokenized_source_record",
            created_by=created_by,
        )
        return TokenizedSource.objects.create(
            source=source,
            tokenizer=tok,
            params=plan.params,
            path=str(out),
            job=job,
            created_by=created_by,
        )


def _tokenizing(source: Source, tok: Tokenizer) -> TokenizedSource | None:
    """The source's tokenization with ``tok`` whose job is still queued or running."""
    from webapp.jobs.models import ACTIVE_JOB_STATES

    return (
        TokenizedSource.objects.filter(
            source=source,
            tokenizer=tok,
            status=ArtifactStatus.BUILDING,
            job__state__in=ACTIVE_JOB_STATES,
        )
        .order_by("-pk")
        .first()
    )


def tokenized_source_record(*, job, manifest: dict | None) -> None:
    """Recorder of tokenize jobs: the manifest becomes the artifact row, its shards, and the
    per-file bad-input counts of the source. Runs inside the job's final transaction."""
    ts = TokenizedSource.objects.select_for_update().select_related("source").get(job=job)
    if manifest is None:
        ts.status = ArtifactStatus.CANCELLED if job.state == "cancelled" else ArtifactStatus.FAILED
        ts.finished_at = timezone.now()
        ts.save()
        return
    source = ts.source
    files = source_file_urls(source=source)
    rel_of = {url: rel for rel, url, _size in files}
    file_ranges: dict[str, list[int]] = {}
    first = 0
    for entry in manifest["inputs"]:  # in source order: document ids are consecutive
        rel = rel_of.get(entry["file"], entry["file"])
        file_ranges[rel] = [first, first + entry["documents"]]
        first += entry["documents"]
    from shardcore.manifest import files_by_path

    sizes = files_by_path(manifest)
    out = Path(ts.path)
    Shard.objects.bulk_create(
        [
            Shard(
                tokenized_source=ts,
                index=sh["index"],
                prefix=str(out / sh["prefix"]),
                num_records=sh["documents"],
                num_documents=sh["documents"],
                num_tokens=sh["tokens"],
                num_bytes=sizes.get(sh["prefix"] + ".bin", {}).get("size", 0),
                checksum=sizes.get(sh["prefix"] + ".bin", {}).get("xxh3", ""),
            )
            for sh in manifest["shards"]
        ],
        batch_size=2000,
    )
    bad = manifest.get("bad_input") or {}
    per_file = {e["file"]: e for e in manifest["inputs"]}
    for sf in SourceFile.objects.filter(source=source):
        url = next((u for u, r in rel_of.items() if r == sf.path), None)
        if url is None or url not in per_file:
            continue
        report = bad.get(url, {})
        sf.num_documents = per_file[url]["documents"]
        sf.bad_lines = sum(r["count"] for r in report.values())
        sf.bad_input = {
            reason: {
                "count": r["count"],
                "samples": [
                    f"{sf.path}:{s.get('line')}: {reason}: {s.get('message')}"
                    for s in r.get("samples", [])
                ],
            }
            for reason, r in report.items()
        }
        sf.save(update_fields=["num_documents", "bad_lines", "bad_input"])
    totals = manifest["totals"]
    ts.fingerprint = manifest["fingerprint"]
    ts.params = {**ts.params, "file_ranges": file_ranges, "dtype": manifest.get("dtype")}
    ts.num_documents = totals["documents"]
    ts.num_tokens = totals["tokens"]
    ts.num_bytes = sum(s.num_bytes for s in ts.shards.all())
    ts.manifest_path = str(out / "manifest.json")
    ts.supersedes = (
        TokenizedSource.objects.filter(
            source=source, tokenizer=ts.tokenizer, status=ArtifactStatus.READY
        )
        .order_by("-created_at")
        .first()
    )
    ts.status = ArtifactStatus.READY
    ts.finished_at = timezone.now()
    ts.save()
    taint_refresh(source_ids=[source.pk])


# --- pools ------------------------------------------------------------------------------


def pool_build(
    *,
    name: str,
    tokenized_ids: Iterable[int],
    seq_len: int,
    filter: str | None = None,
    shuffle: str = "exact",
    seed: int = 0,
    val_fraction: float = 0.0,
    memory: int = 1 << 30,
    shard_size: int = 64 << 20,
    created_by=None,
) -> Pool:
    """Start a pool job over ready tokenized sources; returns the BUILDING train pool (its
    validation pool is recorded beside it when the job succeeds)."""
    from shardcore.errors import InputError
    from shardcore.pool import plan_pool
    from shardcore.select import filter_parse
    from webapp.jobs.services import job_create

    name = _name(name, "pool name")
    filter = (filter or "").strip() or None
    if filter is not None:
        try:
            filter_parse(filter)  # the web request validates; evaluating is the child's
        except InputError as exc:
            raise CatalogError(f"filter: {exc}") from None
    parents = list(TokenizedSource.objects.filter(pk__in=list(tokenized_ids)).order_by("pk"))
    if not parents:
        raise CatalogError("a pool needs at least one tokenized source")
    not_ready = [str(t.pk) for t in parents if t.status != ArtifactStatus.READY]
    if not_ready:
        raise CatalogError(f"tokenized source(s) {', '.join(not_ready)} are not built")
    _refuse_corrupt(parents)
    same = {"name": name, "filter": filter or "", "seq_len": seq_len, "shuffle": shuffle,
            "seed": seed, "val_fraction": val_fraction}  # fmt: skip
    running = _pool_building(parents, same)
    if running is not None:
        return running  # a launch while the same one runs answers the running one
    out = _artifact_dir("pools", name)
    try:
        # Reading every sidecar through the filter: in a child process with time and
        # memory limits (DuckDB's own memory limit applies inside it as well).
        plan = limited(
            plan_pool,
            [t.path for t in parents],
            str(out),
            seq_len=seq_len,
            filter=filter,
            shuffle=shuffle,
            seed=seed,
            memory=memory,
            val_fraction=val_fraction,
            shard_size=shard_size,
            what=f"planning pool {name!r}",
        )
    except (InputError, ValueError) as exc:
        raise CatalogError(f"cannot build pool {name!r}: {exc}") from exc
    with transaction.atomic():
        # Launches over the same inputs are serialized: the second of two concurrent
        # identical ones sees the first's row and answers it.
        list(TokenizedSource.objects.select_for_update().filter(pk__in=[t.pk for t in parents]))
        running = _pool_building(parents, same)
        if running is not None:
            return running
        job = job_create(
            plan=plan,
            title=f"pool {name}",
            recorder="webapp.catalog.services.pool_record",
            created_by=created_by,
        )
        pool = Pool.objects.create(
            name=name,
            filter=filter or "",
            seq_len=seq_len,
            params=plan.params,
            path=str(out),
            job=job,
            created_by=created_by,
        )
        pool.parents.set(parents)
    return pool


def _pool_building(parents: list[TokenizedSource], same: dict[str, Any]) -> Pool | None:
    """A train pool over exactly ``parents`` with the same name and parameters whose job
    is still queued or running."""
    from webapp.jobs.models import ACTIVE_JOB_STATES

    want = sorted(t.pk for t in parents)
    candidates = Pool.objects.filter(
        name=same["name"],
        split=Pool.Split.TRAIN,
        status=ArtifactStatus.BUILDING,
        filter=same["filter"],
        seq_len=same["seq_len"],
        job__state__in=ACTIVE_JOB_STATES,
    ).prefetch_related("parents")
    for pool in candidates.order_by("-pk"):
        params = pool.params or {}
        if (
            sorted(p.pk for p in pool.parents.all()) == want
            and params.get("shuffle") == same["shuffle"]
            and params.get("seed") == same["seed"]
            and params.get("val_fraction") == same["val_fraction"]
        ):
            return pool
    return None


def _pool_fill(pool: Pool, manifest: dict) -> None:
    pool.fingerprint = manifest["fingerprint"]
    pool.num_records = manifest["num_records"]
    pool.num_tokens = manifest["num_tokens"]
    pool.num_documents = manifest["documents"]
    pool.manifest_path = str(Path(pool.path) / "manifest.json")
    from shardcore.manifest import files_by_path

    sizes = files_by_path(manifest)
    pool.num_bytes = sum(f["size"] for f in sizes.values())
    pool.status = ArtifactStatus.READY
    pool.finished_at = timezone.now()
    pool.save()
    Shard.objects.bulk_create(
        [
            Shard(
                pool=pool,
                index=i,
                prefix=str(Path(pool.path) / sh["prefix"]),
                num_records=sh["records"],
                num_documents=sh["documents"],
                num_tokens=sh["tokens"],
                num_bytes=sizes.get(sh["prefix"] + ".bin", {}).get("size", 0),
                checksum=sizes.get(sh["prefix"] + ".bin", {}).get("xxh3", ""),
            )
            for i, sh in enumerate(manifest["shards"])
        ],
        batch_size=2000,
    )


def pool_record(*, job, manifest: dict | None) -> None:
    """Recorder of pool jobs: the train pool, its shards, and the validation pool."""
    from shardcore.manifest import read_manifest

    pool = Pool.objects.select_for_update().get(job=job, split=Pool.Split.TRAIN)
    if manifest is None:
        pool.status = (
            ArtifactStatus.CANCELLED if job.state == "cancelled" else ArtifactStatus.FAILED
        )
        pool.finished_at = timezone.now()
        pool.save()
        return
    _pool_fill(pool, manifest)
    if manifest.get("val"):
        val_path = Path(pool.path) / manifest["val"]["path"]
        val = Pool(
            name=f"{pool.name}-val",
            split=Pool.Split.VAL,
            train_pool=pool,
            filter=pool.filter,
            seq_len=pool.seq_len,
            params=pool.params,
            path=str(val_path),
            job=job,
            created_by=pool.created_by,
        )
        val.save()
        val.parents.set(pool.parents.all())
        _pool_fill(val, read_manifest(val_path))
    taint_refresh(source_ids=pool.parents.values_list("source_id", flat=True))


# --- mixtures -------------------------------------------------------------------------


def mixture_create(*, name: str, description: str = "", created_by=None) -> Mixture:
    name = _name(name, "mixture name")
    if Mixture.objects.filter(name=name).exists():
        raise CatalogError(f"a mixture named {name!r} already exists")
    try:
        with transaction.atomic():
            return Mixture.objects.create(name=name, description=description, created_by=created_by)
    except IntegrityError:
        raise CatalogError(f"a mixture named {name!r} already exists") from None


def mixture_get_or_create(*, name: str, description: str = "", created_by=None) -> Mixture:
    """The mixture named ``name``, created when new. Two first saves of one name at the same
    time both get the one row (the unique name decides; no IntegrityError escapes)."""
    name = _name(name, "mixture name")
    existing = Mixture.objects.filter(name=name).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            return Mixture.objects.create(name=name, description=description, created_by=created_by)
    except IntegrityError:
        return Mixture.objects.get(name=name)


def mixture_version_save(*, name: str, description: str, spec: dict, created_by=None):
    """Save a builder spec (``builder.spec_from_rows``) as the next immutable version of
    mixture ``name`` (created when new): every stage with its token count, the ordering and
    its options, and the repetition cap go into the version's schedule."""
    with transaction.atomic():
        mixture = mixture_get_or_create(name=name, description=description, created_by=created_by)
        return mixture_version_create(
            mixture_id=mixture.pk,
            components=builder.version_components(spec),
            token_budget=int(spec["tokens"]),
            seed=int(spec.get("seed", 0)),
            stages=[
                {"name": st["name"], "tokens": int(st["tokens"])} for st in spec.get("stages") or []
            ],
            order=str(spec.get("order", "blend")),
            order_options=dict(spec.get("order_options") or {}),
            max_repetitions=float(spec.get("max_repetitions", 4.0)),
            note=description,
            created_by=created_by,
        )


def mixture_version_create(
    *,
    mixture_id: int,
    components: list[dict[str, Any]],
    token_budget: int,
    seed: int = 0,
    stages: list[dict[str, Any]] | None = None,
    order: str = "blend",
    max_repetitions: float = 4.0,
    order_options: dict[str, Any] | None = None,
    note: str = "",
    continues: dict[str, Any] | None = None,
    created_by=None,
) -> MixtureVersion:
    """A new immutable version, its schedule built by ``shardcore.mixture.build_mixture``
    into the version's directory and recorded (fingerprint, samples, tokens, epochs per
    pool). ``components`` are {"pool": id, "weight": w, "stage": s}: weights are token
    shares within their stage (normalized); stage "" or "main" is the main stage, any other
    stage needs its token count in ``stages`` ([{"name", "tokens"}], in training order).
    Versions are never edited: changing a weight means creating the next version.
    ``continues`` (``shardcore.mixture.continuation``) builds a version that a run switches
    to mid-training (``run_switch``)."""
    from shardcore.errors import ShardcoreError
    from shardcore.manifest import file_entries
    from shardcore.mixture import MixtureSpec, build_mixture

    if token_budget <= 0:
        raise CatalogError("the token budget must be positive")
    if not components:
        raise CatalogError("a mixture version needs at least one component")
    pools = {p.pk: p for p in Pool.objects.filter(pk__in=[c["pool"] for c in components])}
    _refuse_corrupt(pools.values())
    by_stage: dict[str, list[dict[str, Any]]] = {}
    for c in components:
        pool = pools.get(c["pool"])
        if pool is None:
            raise CatalogError(f"no pool {c['pool']}")
        if pool.status != ArtifactStatus.READY:
            raise CatalogError(f"pool {pool.name} is {pool.status}, not ready")
        if not float(c["weight"]) > 0:
            raise CatalogError(f"pool {pool.name}: weight must be positive")
        by_stage.setdefault(_stage_name(c.get("stage")), []).append(c)
    seq_lens = {p.seq_len for p in pools.values()}
    if len(seq_lens) != 1:
        raise CatalogError(f"pools of one mixture share a seq_len; got {sorted(seq_lens)}")
    stage_tokens = {str(st["name"]): st.get("tokens") for st in stages or []}
    unknown = set(by_stage) - {"main"} - set(stage_tokens)
    if unknown:
        raise CatalogError(
            f"stage(s) {sorted(unknown)} need a token count: pass stages=[{{'name', 'tokens'}}]"
        )
    if "main" not in by_stage:
        raise CatalogError("the main stage (stage '' or 'main') needs at least one component")

    def leaves(comps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"pool": pools[c["pool"]].path, "weight": float(c["weight"])} for c in comps]

    spec_dict = {
        "tokens": int(token_budget),
        "seed": int(seed),
        "order": order,
        "max_repetitions": float(max_repetitions),
        "order_options": dict(order_options or {}),
        "components": leaves(by_stage["main"]),
        "stages": [
            {"name": name, "tokens": tokens, "components": leaves(by_stage[name])}
            for name, tokens in stage_tokens.items()
            if name in by_stage
        ],
    }
    if continues is not None:
        spec_dict["continues"] = continues
    try:
        spec = MixtureSpec.from_dict(spec_dict)
    except ShardcoreError as exc:
        raise CatalogError(f"mixture spec: {exc}") from exc
    with transaction.atomic():
        mixture = Mixture.objects.select_for_update().get(pk=mixture_id)
        latest = mixture.versions.order_by("-number").first()
        if (
            latest is not None
            and latest.status == ArtifactStatus.READY
            and (latest.params or {}).get("spec") == _jsonable(spec.to_dict())
        ):
            # The same content saved again (a double click, a retried request): the version
            # that holds it already is the answer, not an identical copy.
            latest.existed = True
            return latest
        number = (latest.number if latest is not None else 0) + 1
        try:
            out = guards.data_path("mixtures", _name(mixture.name, "mixture name"), f"v{number}")
        except guards.GuardError as exc:
            raise CatalogError(f"mixture {mixture.pk}: {exc}") from None
        if out.exists():
            # A version's files are immutable: never build over a directory that exists
            # (a leftover of a save that failed after writing, or someone else's files).
            raise CatalogError(
                f"cannot build {mixture.name} v{number}: {out} exists already; "
                "remove it if it is a leftover of a failed save"
            )
        try:
            manifest = build_mixture(spec, out)
        except (ShardcoreError, OSError) as exc:
            raise CatalogError(f"cannot build {mixture.name} v{number}: {exc}") from exc
        quality = schedule_quality(path=str(out))
        epochs = {os.path.abspath(p["path"]): p for p in manifest["pools"]}
        version = MixtureVersion.objects.create(
            mixture=mixture,
            number=number,
            token_budget=token_budget,
            seed=seed,
            num_samples=manifest["num_samples"],
            note=note,
            params={
                "spec": manifest["spec"],
                "seq_len": manifest["seq_len"],
                "stages": [
                    {k: st[k] for k in ("name", "first_sample", "num_samples", "num_tokens")}
                    for st in manifest["stages"]
                ],
                "pools": [
                    {
                        "pool": pk,
                        **{
                            k: epochs[os.path.abspath(pools[pk].path)][k]
                            for k in ("samples", "tokens", "epochs")
                        },
                    }
                    for pk in dict.fromkeys(c["pool"] for c in components)
                ],
                "quality": quality,
            },  # fmt: skip
            fingerprint=manifest["fingerprint"],
            path=str(out),
            manifest_path=str(out / "manifest.json"),
            num_tokens=manifest["num_tokens"],
            num_bytes=sum(f["size"] for f in file_entries(manifest)),
            created_by=created_by,
        )
        MixtureComponent.objects.bulk_create(
            [
                MixtureComponent(
                    version=version,
                    pool=pools[c["pool"]],
                    weight=float(c["weight"])
                    / sum(float(x["weight"]) for x in by_stage[_stage_name(c.get("stage"))]),
                    stage=c.get("stage") or "",
                    epochs=epochs[os.path.abspath(pools[c["pool"]].path)]["epochs"],
                )
                for c in components
            ]
        )
        # The schedule and its manifest exist: the version is built.
        version.status = ArtifactStatus.READY
        version.finished_at = timezone.now()
        version.save()
        taint_refresh(source_ids=_version_source_ids(version))
    return version


def schedule_quality(*, path: str) -> dict[str, Any]:
    """A built schedule's quality by pool (``shardcore.quality.mixture_quality``): per
    stage, window deviation against random permutations of the same samples and a verdict;
    ``{"error": ...}`` when it cannot be measured (the schedule itself is still good)."""
    from shardcore import quality
    from shardcore.errors import ShardcoreError

    try:
        return quality.mixture_quality(path, by="pool")
    except (ShardcoreError, OSError, ValueError) as exc:
        return {"error": f"no quality measured: {exc}"}


def _jsonable(value: Any) -> Any:
    """``value`` as it reads back from a JSONField (tuples become lists, and so on)."""
    import json

    return json.loads(json.dumps(value))


def _stage_name(stage: str | None) -> str:
    return stage or "main"


def _version_built(version: MixtureVersion) -> bool:
    """Whether the version has a schedule on disk (versions recorded before schedules were
    built, or rows made by hand, have none)."""
    return bool(version.manifest_path) and Path(version.manifest_path).exists()


def _refuse_corrupt(artifacts) -> None:
    """Build nothing on an artifact the scrub marked corrupt (or built from corrupt data):
    the error names it and its first problem."""
    from webapp.catalog.models import Corruption

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


def _built_version(version_id: int) -> MixtureVersion:
    version = MixtureVersion.objects.select_related("mixture").filter(pk=version_id).first()
    if version is None:
        raise CatalogError(f"no mixture version {version_id}")
    if version.status != ArtifactStatus.READY or not _version_built(version):
        raise CatalogError(f"mixture version {version} has no built schedule")
    return version


EXPORT_FORMATS = {
    # catalog format -> (shardcore.export format, file name under <version>/exports/)
    Export.Format.MEGATRON: ("megatron", "megatron.txt"),
    Export.Format.OLMO_CORE: ("olmo", "olmo-core.yaml"),
    Export.Format.NANOTRON: ("nanotron", "nanotron.yaml"),
    Export.Format.JSON: ("json", "mixture.json"),
}


def mixture_version_export(
    *, version_id: int, fmt: str, global_batch_size: int | None = None
) -> Export:
    """Write the version as a trainer config (megatron, olmo / olmo-core, nanotron, json)
    under ``<version>/exports/`` and record it. An export is a function of the built
    schedule, so asking again for the same file returns its ready row."""
    from shardcore.manifest import file_checksum

    fmt, version, path, existing = mixture_version_export_find(
        version_id=version_id, fmt=fmt, global_batch_size=global_batch_size
    )
    if existing is not None:
        return existing
    text = mixture_version_export_render(
        version_id=version_id, fmt=fmt, global_batch_size=global_batch_size
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return Export.objects.create(
        version=version,
        format=fmt,
        path=str(path),
        status=ArtifactStatus.READY,
        fingerprint=version.fingerprint,
        num_records=version.num_samples,
        num_tokens=version.num_tokens,
        num_bytes=path.stat().st_size,
        checksum=file_checksum(path),
        finished_at=timezone.now(),
    )


def _export_target(
    version_id: int, fmt: str, global_batch_size: int | None
) -> tuple[str, MixtureVersion, str, Path, dict[str, Any]]:
    """(catalog format, version, shardcore format, file path, export options)."""
    fmt = {"olmo": Export.Format.OLMO_CORE}.get(fmt, fmt)
    if fmt not in EXPORT_FORMATS:
        known = ", ".join(sorted({*EXPORT_FORMATS, "olmo"}))
        raise CatalogError(f"unknown export format {fmt!r}; known: {known}")
    version = _built_version(version_id)
    core_fmt, name = EXPORT_FORMATS[fmt]
    options: dict[str, Any] = {}
    if fmt == Export.Format.MEGATRON:
        # Beside megatron.txt: the stage data-args files and megatron-core's index cache
        # (keyed for Megatron-LM's default seed and --split 100,0,0), so that the order holds.
        options["out"] = Path(version.path) / "exports" / "megatron"
    if fmt == Export.Format.NANOTRON and global_batch_size:
        options["global_batch_size"] = int(global_batch_size)
        name = f"nanotron-gbs{int(global_batch_size)}.yaml"
    if fmt == Export.Format.OLMO_CORE:
        # With a ready materialized copy, OLMo-core reads Shardyard's exact order from it.
        copy = (
            Export.objects.filter(
                version=version, format=Export.Format.MATERIALIZED, status=ArtifactStatus.READY
            )
            .order_by("-created_at")
            .first()
        )
        if global_batch_size:
            options["global_batch_size"] = int(global_batch_size)
        if copy is not None:
            options["materialized"] = copy.path
            name = "olmo-core-materialized.yaml"
        if global_batch_size:
            name = name.replace(".yaml", f"-gbs{int(global_batch_size)}.yaml")
    return fmt, version, core_fmt, Path(version.path) / "exports" / name, options


# Formats whose export writes files beside the config (Megatron: data-args files and the
# index cache; nanotron: the pools' view folders): only written by an editor, never
# computed for a reader's GET.
EXPORT_WRITES_FILES = {Export.Format.MEGATRON, Export.Format.NANOTRON}


def mixture_version_export_find(
    *, version_id: int, fmt: str, global_batch_size: int | None = None
) -> tuple[str, MixtureVersion, Path, Export | None]:
    """(catalog format, version, file path, its ready Export row or None). Reads only."""
    fmt, version, _core, path, _options = _export_target(version_id, fmt, global_batch_size)
    existing = Export.objects.filter(
        version=version, format=fmt, path=str(path), status=ArtifactStatus.READY
    ).first()
    if existing is not None and not path.is_file():
        existing = None
    return fmt, version, path, existing


def mixture_version_export_render(
    *, version_id: int, fmt: str, global_batch_size: int | None = None
) -> str:
    """The text of a trainer config, computed from the built schedule without writing
    anything (what a reader's GET serves when the export was never recorded)."""
    from shardcore.errors import ShardcoreError
    from shardcore.export import export

    fmt, version, core_fmt, _path, options = _export_target(version_id, fmt, global_batch_size)
    try:
        return export(version.path, core_fmt, **options)
    except (ShardcoreError, OSError) as exc:
        raise CatalogError(f"cannot export {version} as {fmt}: {exc}") from exc


def mixture_version_materialize(
    *, version_id: int, shard_bytes: int = 64 << 20, created_by=None
) -> Job:
    """Start a job writing the version's samples as IndexedDataset shards in schedule order
    (shardcore stage "materialize", one unit per output shard); its recorder fills the
    "materialized" Export row. While one materialization is building, asking again returns
    its job; a ready one is not rebuilt."""
    from shardcore.errors import ShardcoreError
    from shardcore.materialize import plan_materialize
    from webapp.jobs.services import job_create

    version = _built_version(version_id)
    _refuse_corrupt([version])
    with transaction.atomic():
        MixtureVersion.objects.select_for_update().filter(pk=version.pk).first()
        current = (
            Export.objects.filter(version=version, format=Export.Format.MATERIALIZED)
            .exclude(status__in=[ArtifactStatus.FAILED, ArtifactStatus.CANCELLED])
            .select_related("job")
            .order_by("-created_at")
            .first()
        )
        if current is not None and current.status == ArtifactStatus.READY:
            raise CatalogError(f"{version} is materialized already (export {current.pk} at "
                               f"{current.path})")  # fmt: skip
        if current is not None and current.job is not None:
            return current.job
        out = Path(version.path) / "materialized" / uuid.uuid4().hex[:10]
        try:
            plan = plan_materialize(version.path, out, shard_bytes=shard_bytes)
        except (ShardcoreError, OSError) as exc:
            raise CatalogError(f"cannot materialize {version}: {exc}") from exc
        job = job_create(
            plan=plan,
            title=f"materialize {version}",
            recorder="webapp.catalog.services.mixture_materialized_record",
            created_by=created_by,
        )
        Export.objects.create(
            version=version, format=Export.Format.MATERIALIZED, path=str(out), job=job
        )
    return job


def mixture_materialized_record(*, job, manifest: dict | None) -> None:
    """Recorder of materialize jobs: the manifest becomes the Export row and its shards;
    a flag on data inside the version taints the copy too."""
    export = Export.objects.select_for_update().get(job=job, format=Export.Format.MATERIALIZED)
    export.finished_at = timezone.now()
    if manifest is None:
        export.status = (
            ArtifactStatus.CANCELLED if job.state == "cancelled" else ArtifactStatus.FAILED
        )
        export.save()
        return
    out = Path(export.path)
    from shardcore.manifest import files_by_path

    files = files_by_path(manifest)
    Shard.objects.bulk_create(
        [
            Shard(
                export=export,
                index=i,
                prefix=str(out / sh["prefix"]),
                num_records=sh["records"],
                num_tokens=sh["records"] * manifest["record_tokens"],
                num_bytes=files.get(sh["prefix"] + ".bin", {}).get("size", 0),
                checksum=files.get(sh["prefix"] + ".bin", {}).get("xxh3", ""),
            )
            for i, sh in enumerate(manifest["shards"])
        ],
        batch_size=2000,
    )
    export.fingerprint = manifest["fingerprint"]
    export.manifest_path = str(out / "manifest.json")
    export.num_records = manifest["num_records"]
    export.num_tokens = manifest["num_tokens"]
    export.num_bytes = sum(f["size"] for f in files.values())
    export.status = ArtifactStatus.READY
    export.save()
    taint_refresh(source_ids=_version_source_ids(export.version))


def _version_source_ids(version: MixtureVersion) -> list[int]:
    return list(
        TokenizedSource.objects.filter(pools__components__version=version)
        .values_list("source_id", flat=True)
        .distinct()
    )


# --- training runs ----------------------------------------------------------------------


def run_register(
    *,
    name: str,
    mixture_version_id: int,
    external_id: str = "",
    team: str | None = None,
    created_by=None,
) -> TrainingRun:
    """Register a run against a ready mixture version; ``created_by`` owns it and, with
    ``team`` (a group ``created_by`` belongs to), so does the team. Idempotent by name for
    whoever may write the run (a trainer that retries after a lost answer gets the same
    run); anyone else's registration of a taken name is refused. A run on tainted data is
    tainted. ``created_by=None`` is an operator's command: no owner, no checks."""
    from django.contrib.auth.models import Group

    from webapp.roles import ROLES, may_write_run, user_role

    name = _name(name, "run name", max_length=200)
    version = MixtureVersion.objects.filter(pk=mixture_version_id).first()
    if version is None:
        raise CatalogError(f"no mixture version {mixture_version_id}")
    if version.status != ArtifactStatus.READY:
        raise CatalogError(f"mixture version {version} is {version.status}; train on a ready one")
    group = None
    if team:
        group = Group.objects.filter(name=team).exclude(name__in=ROLES).first()
        if group is None:
            raise CatalogError(f"team: no team {team!r} (a group other than the roles)")
        if (
            created_by is not None
            and user_role(created_by) != "admin"
            and not created_by.groups.filter(pk=group.pk).exists()
        ):
            raise RunPermissionError(f"team: you are not a member of {team!r}")
    with transaction.atomic():
        run, created = TrainingRun.objects.get_or_create(
            name=name,
            defaults={
                "mixture_version": version,
                "external_id": external_id,
                "created_by": created_by,
                "team": group,
            },
        )
        if not created and created_by is not None and not may_write_run(created_by, run):
            raise RunPermissionError(f"run {name!r} exists already and belongs to another user")
        if (
            not created
            and run.mixture_version_id != version.pk
            and not run.segments.filter(mixture_version=version).exists()
        ):
            raise CatalogError(
                f"run {name!r} exists already, on mixture version {run.mixture_version_id}"
            )
        if created:
            Taint.objects.bulk_create(
                [
                    Taint(flag_id=f, run=run, documents=n)
                    for f, n in Taint.objects.filter(mixture_version=version).values_list(
                        "flag_id", "documents"
                    )
                ]
            )
            if version.corruptions.exists():
                from webapp.catalog.scrub import corruption_refresh

                corruption_refresh()
    return run


def run_progress_record(
    *,
    run_id: int,
    step: int,
    consumed_samples: int | None = None,
    consumed_tokens: int | None = None,
    mixture_version: int | None = None,
    actor=None,
) -> TrainingRun:
    """Record the run's position at ``step`` (``POST /api/runs/{id}/progress/``, called by
    every training step): one row per step, a retried step records nothing, the run never
    moves backwards, a registered run becomes running. Samples, or only tokens: a sample is
    one record of ``seq_len`` trained tokens. Raises TrainingRun.DoesNotExist.

    A report is bounded by the run's mixture version (no step, sample or token beyond its
    schedule: a step reads at least one sample) and monotonic (a later step never reports
    fewer samples than an earlier one, an earlier step never more); anything else is a
    CatalogError naming the field, never recorded. ``actor`` (the API's user) must own the
    run, belong to its team or be an admin (RunPermissionError); None is an operator.
    After a switch of version the run's samples go on counting from where it switched: a
    report is bounded by the current segment's first sample plus its version's size.
    ``mixture_version``, the version the trainer read up to this report, is checked
    against the run's segments: a report that read the old version past the switch is
    refused with RunSwitchedError.

    On Postgres this is two statements (lock the run; insert-unless-recorded and move the
    run forward in one); elsewhere (SQLite, which serializes writers) the ORM does it."""
    from django.db import connection

    if consumed_samples is None and consumed_tokens is None:
        raise CatalogError("give consumed_samples or consumed_tokens")
    if step < 0 or min(consumed_samples or 0, consumed_tokens or 0) < 0:
        raise CatalogError("step and consumed samples must be >= 0")
    record = (
        _run_progress_record_sql if connection.vendor == "postgresql" else _run_progress_record_orm
    )
    return record(
        run_id=run_id,
        step=step,
        consumed_samples=consumed_samples,
        consumed_tokens=consumed_tokens,
        mixture_version=mixture_version,
        actor=actor,
    )


BIGINT_MAX = 2**63 - 1


def _progress_check(
    run: TrainingRun,
    *,
    step: int,
    samples: int | None,
    tokens: int | None,
    seq_len: int,
    num_samples: int,
    token_budget: int,
    first_sample: int = 0,
) -> tuple[int, int]:
    """(consumed samples, consumed tokens) of a report, or CatalogError naming the field."""
    # The version's size bounds every count: its schedule's samples, else its budget,
    # after the samples the run read before it switched to this version.
    limit = num_samples or (-(-token_budget // seq_len) if seq_len and token_budget else 0)
    known = bool(limit)
    limit += first_sample if known else 0
    if not known:
        limit = BIGINT_MAX // max(seq_len, 1)
    what = f"mixture version {run.mixture_version_id} ({limit} samples)" if known else "a bigint"
    if known and first_sample:
        what = (
            f"the run's {limit} samples ({first_sample} before it switched to mixture "
            f"version {run.mixture_version_id}, then its {limit - first_sample})"
        )
    if step > limit:
        raise CatalogError(
            f"step: {step} is beyond {what}; a step reads at least one sample of the version"
        )
    if samples is not None and samples > limit:
        raise CatalogError(f"consumed_samples: {samples} is beyond {what}")
    if tokens is not None and tokens > limit * max(seq_len, 1):
        raise CatalogError(
            f"consumed_tokens: {tokens} is beyond {what} of {max(seq_len, 1)} tokens each"
        )
    samples, tokens = _progress_counts(samples, tokens, seq_len)
    if step > run.last_step and samples < run.consumed_samples:
        raise CatalogError(
            f"consumed_samples: step {step} reports {samples}, fewer than the "
            f"{run.consumed_samples} of the earlier step {run.last_step}"
        )
    if step < run.last_step and samples > run.consumed_samples:
        raise CatalogError(
            f"consumed_samples: step {step} reports {samples}, more than the "
            f"{run.consumed_samples} of the later step {run.last_step}"
        )
    return samples, tokens


def _may_write(run: TrainingRun, actor, *, in_team: bool) -> None:
    from webapp.roles import has_role, user_role

    if actor is None or user_role(actor) == "admin":
        return
    if has_role(actor, "trainer") and (
        (run.created_by_id is not None and run.created_by_id == actor.pk) or in_team
    ):
        return
    raise RunPermissionError(f"run {run.pk} belongs to another user; report to your own runs")


def _progress_counts(samples: int | None, tokens: int | None, seq_len: int) -> tuple[int, int]:
    if samples is None:
        if not seq_len:
            raise CatalogError("the run's mixture has no seq_len: report consumed_samples")
        return tokens // seq_len, tokens
    return samples, samples * seq_len if tokens is None else tokens


def _read_version_check(run: TrainingRun, version_id: int, samples: int) -> None:
    """Refuse a report whose trainer read ``version_id`` up to ``samples`` where the run's
    segments say another version (it switched before)."""
    from webapp.catalog.selectors import run_segments

    segments = run_segments(run=run)
    last = max(samples - 1, 0)
    here = next(g for g in reversed(segments) if g.first_sample <= last or g is segments[0])
    starts_here = any(
        g.first_sample == samples and g.mixture_version_id == version_id for g in segments
    )
    if here.mixture_version_id == version_id or starts_here:
        return
    if not any(g.mixture_version_id == version_id for g in segments):
        raise CatalogError(
            f"mixture_version: run {run.name} never read mixture version {version_id}; "
            f"it reads {', '.join(str(g.mixture_version_id) for g in segments)}"
        )
    raise RunSwitchedError(
        f"mixture_version: run {run.name} switched to mixture version "
        f"{here.mixture_version_id} at sample {here.first_sample} (after step "
        f"{here.first_step - 1}); this report read version {version_id} up to sample "
        f"{samples}. Resume from the checkpoint at step {here.first_step - 1} and read the "
        f"run's segments (GET /api/runs/{run.pk}/)"
    )


def _segment_start(run_id: int) -> int:
    """The run's sample where its current version starts (0 unless it switched)."""
    return (
        RunSegment.objects.filter(run_id=run_id, end_sample__isnull=True)
        .values_list("first_sample", flat=True)
        .first()
        or 0
    )


def _run_progress_record_orm(
    *,
    run_id: int,
    step: int,
    consumed_samples: int | None,
    consumed_tokens: int | None,
    mixture_version: int | None = None,
    actor=None,
) -> TrainingRun:
    with transaction.atomic():
        run = TrainingRun.objects.select_for_update().get(pk=run_id)
        in_team = bool(
            actor is not None and run.team_id and actor.groups.filter(pk=run.team_id).exists()
        )
        _may_write(run, actor, in_team=in_team)
        version = MixtureVersion.objects.only("num_samples", "token_budget").get(
            pk=run.mixture_version_id
        )
        consumed_samples, consumed_tokens = _progress_check(
            run,
            step=step,
            samples=consumed_samples,
            tokens=consumed_tokens,
            seq_len=_version_seq_len(run.mixture_version_id),
            num_samples=version.num_samples,
            token_budget=version.token_budget,
            first_sample=_segment_start(run.pk),
        )
        if mixture_version is not None:
            _read_version_check(run, mixture_version, consumed_samples)
        _, created = RunProgress.objects.get_or_create(
            run=run,
            step=step,
            defaults={"consumed_samples": consumed_samples, "consumed_tokens": consumed_tokens},
        )
        if created and step >= run.last_step:
            run.last_step = step
            run.consumed_samples = consumed_samples
            run.consumed_tokens = consumed_tokens
            run.last_reported_at = timezone.now()
            if run.state == TrainingRun.State.REGISTERED:
                run.state = TrainingRun.State.RUNNING
            run.save()
    return run


def _run_progress_record_sql(
    *,
    run_id: int,
    step: int,
    consumed_samples: int | None,
    consumed_tokens: int | None,
    mixture_version: int | None = None,
    actor=None,
) -> TrainingRun:
    from django.db import connection

    run_t, prog_t = TrainingRun._meta.db_table, RunProgress._meta.db_table
    seg_t = RunSegment._meta.db_table
    comp_t, pool_t = MixtureComponent._meta.db_table, Pool._meta.db_table
    version_t = MixtureVersion._meta.db_table
    from django.contrib.auth import get_user_model

    member_t = get_user_model().groups.through._meta.db_table
    fields = [f.attname for f in TrainingRun._meta.concrete_fields]
    cols = ", ".join(f"r.{connection.ops.quote_name(f)}" for f in fields)
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cur:
        # 1. Lock the run: reports of one run are serialized, so the "step recorded?" test
        #    below sees every committed report. The same round trip reads what the checks
        #    need: the version's seq_len and size, and whether the actor is in the run's team.
        cur.execute(
            f"SELECT {cols}, (SELECT max(p.seq_len) FROM {comp_t} c JOIN {pool_t} p"
            f" ON p.id = c.pool_id WHERE c.version_id = r.mixture_version_id),"
            f" v.num_samples, v.token_budget,"
            f" (SELECT s.first_sample FROM {seg_t} s WHERE s.run_id = r.id"
            f" AND s.end_sample IS NULL),"
            f" EXISTS (SELECT 1 FROM {member_t} m WHERE m.user_id = %s AND m.group_id = r.team_id)"
            f" FROM {run_t} r JOIN {version_t} v ON v.id = r.mixture_version_id"
            f" WHERE r.id = %s FOR UPDATE OF r",
            [actor.pk if actor is not None else None, run_id],
        )
        row = cur.fetchone()
        if row is None:
            raise TrainingRun.DoesNotExist(f"no run {run_id}")
        run = TrainingRun.from_db(connection.alias, fields, row[:-5])
        seq_len, num_samples, token_budget, first_sample, in_team = row[-5:]
        _may_write(run, actor, in_team=bool(in_team))
        consumed_samples, consumed_tokens = _progress_check(
            run,
            step=step,
            samples=consumed_samples,
            tokens=consumed_tokens,
            seq_len=seq_len or 0,
            num_samples=num_samples or 0,
            token_budget=token_budget or 0,
            first_sample=first_sample or 0,
        )
        if mixture_version is not None:
            _read_version_check(run, mixture_version, consumed_samples)
        # 2. Insert the report unless its step is recorded; move the run forward only for a
        #    new report at or after its last step. One round trip.
        insert = (
            f"INSERT INTO {prog_t} (run_id, step, consumed_samples, consumed_tokens,"
            f" reported_at) SELECT %s, %s, %s, %s, %s WHERE NOT EXISTS"
            f" (SELECT 1 FROM {prog_t} WHERE run_id = %s AND step = %s) RETURNING 1"
        )
        params = [run_id, step, consumed_samples, consumed_tokens, now, run_id, step]
        forward = step >= run.last_step
        state = TrainingRun.State.RUNNING if run.state == "registered" else run.state
        if forward:
            cur.execute(
                f"WITH ins AS ({insert}) UPDATE {run_t} SET last_step = %s,"
                f" consumed_samples = %s, consumed_tokens = %s, last_reported_at = %s,"
                f" state = %s WHERE id = %s AND EXISTS (SELECT 1 FROM ins)",
                [*params, step, consumed_samples, consumed_tokens, now, state, run_id],
            )
        else:
            cur.execute(insert, params)
        if forward and cur.rowcount == 1:
            run.last_step, run.last_reported_at, run.state = step, now, state
            run.consumed_samples, run.consumed_tokens = consumed_samples, consumed_tokens
    return run


def _version_seq_len(version_id: int) -> int:
    return max(
        MixtureComponent.objects.filter(version_id=version_id).values_list(
            "pool__seq_len", flat=True
        ),
        default=0,
    )


MAX_LOSS_ROWS = 10_000


def run_losses_record(
    *,
    run_id: int,
    step: int | None = None,
    val: list[dict] | None = None,
    train: list[dict] | None = None,
    actor=None,
) -> dict[str, int]:
    """Record a run's losses (``POST /api/runs/{id}/losses/``): ``val``, at checkpoint
    ``step``, is ``[{"pool": id, "source": name or "", "loss": x}]``, the validation loss
    of each pool the run's version reads (its training pool's id or its validation pool's,
    and a source's name to report one source of a pool built from several); ``train`` is
    ``[{"step": s, "loss": x}]``, training loss per step. Whoever may report the run's
    progress may report its losses (RunPermissionError otherwise). Every entry is checked
    before anything is written; a refusal is a CatalogError naming the entry and field.
    A retried report records nothing twice (first report wins). Returns the number of
    rows recorded and of rows already there."""
    val = list(val or [])
    train = list(train or [])
    if not val and not train:
        raise CatalogError("give val (validation losses at a step) or train (losses per step)")
    if len(val) + len(train) > MAX_LOSS_ROWS:
        raise CatalogError(f"at most {MAX_LOSS_ROWS} losses per report")
    if val and step is None:
        raise CatalogError("step: validation losses are reported at a step")
    run = TrainingRun.objects.select_related("mixture_version").filter(pk=run_id).first()
    if run is None:
        raise TrainingRun.DoesNotExist(f"no run {run_id}")
    in_team = bool(
        actor is not None and run.team_id and actor.groups.filter(pk=run.team_id).exists()
    )
    _may_write(run, actor, in_team=in_team)
    version = run.mixture_version
    seq_len = _version_seq_len(version.pk)
    limit = version.num_samples or (
        -(-version.token_budget // seq_len) if seq_len and version.token_budget else 0
    )
    if limit:
        limit += _segment_start(run.pk)  # after a switch, the samples read before it

    def check_step(value: int, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CatalogError(f"{where}: {value!r} is not a step (an integer >= 0)")
        if limit and value > limit:
            raise CatalogError(
                f"{where}: {value} is beyond mixture version {version.pk} ({limit} samples);"
                " a step reads at least one sample of the version"
            )
        return value

    def check_loss(value, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CatalogError(f"{where}: {value!r} is not a number")
        value = float(value)
        if not np.isfinite(value) or value < 0:
            raise CatalogError(f"{where}: {value} is not a finite loss >= 0")
        return value

    # The pools a validation loss may name: the pools of the versions the run read (its
    # current one, and before a switch the earlier ones) and their held-out slices.
    read = {version.pk} | set(
        RunSegment.objects.filter(run=run).values_list("mixture_version", flat=True)
    )
    comps = list(
        MixtureComponent.objects.filter(version__in=read)
        .select_related("pool__val_pool")
        .order_by("version_id", "id")
    )
    by_id: dict[int, Pool] = {}
    for c in comps:
        by_id[c.pool.pk] = c.pool
        held_out = getattr(c.pool, "val_pool", None)
        if held_out is not None:
            by_id[held_out.pk] = c.pool
    sources: dict[int, set[str]] = {}
    rows: list[RunLoss] = []
    seen: set[tuple[str, str, int]] = set()
    if val:
        step = check_step(step, "step")
    for i, entry in enumerate(val):
        where = f"val[{i}]"
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: give an object with pool and loss")
        pool_id = entry.get("pool")
        if isinstance(pool_id, bool) or not isinstance(pool_id, int) or pool_id not in by_id:
            names = ", ".join(dict.fromkeys(f"{c.pool.name} ({c.pool.pk})" for c in comps))
            raise CatalogError(
                f"{where}.pool: {pool_id!r} is not read by mixture version {version.pk}; "
                f"its pools: {names}"
            )
        pool = by_id[pool_id]
        source = entry.get("source") or ""
        if not isinstance(source, str):
            raise CatalogError(f"{where}.source: {source!r} is not a source name")
        if source:
            if pool.pk not in sources:
                sources[pool.pk] = set(
                    Source.objects.filter(tokenized__pools=pool).values_list("name", flat=True)
                )
            if source not in sources[pool.pk]:
                raise CatalogError(
                    f"{where}.source: {source!r} is not a source of pool {pool.name}; "
                    f"its sources: {', '.join(sorted(sources[pool.pk])) or 'none'}"
                )
        loss = check_loss(entry.get("loss"), f"{where}.loss")
        series = f"pool:{pool.pk}" + (f"/source:{source}" if source else "")
        if ("val", series, step) in seen:
            what = f"pool {pool.name}" + (f" source {source}" if source else "")
            raise CatalogError(f"{where}: {what} is given twice at step {step}")
        seen.add(("val", series, step))
        rows.append(
            RunLoss(run=run, split="val", step=step, pool=pool, source=source, series=series,
                    loss=loss)
        )  # fmt: skip
    for i, entry in enumerate(train):
        where = f"train[{i}]"
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: give an object with step and loss")
        s = check_step(entry.get("step"), f"{where}.step")
        loss = check_loss(entry.get("loss"), f"{where}.loss")
        if ("train", "", s) in seen:
            raise CatalogError(f"{where}.step: step {s} is given twice")
        seen.add(("train", "", s))
        rows.append(RunLoss(run=run, split="train", step=s, series="", loss=loss))
    # The token axis: the run's consumed tokens at each step it reported progress for.
    tokens = dict(
        RunProgress.objects.filter(run=run, step__in={r.step for r in rows}).values_list(
            "step", "consumed_tokens"
        )
    )
    for r in rows:
        r.consumed_tokens = tokens.get(r.step)
    with transaction.atomic():
        before = RunLoss.objects.filter(run=run).count()
        RunLoss.objects.bulk_create(rows, ignore_conflicts=True)
        recorded = RunLoss.objects.filter(run=run).count() - before
    return {"recorded": recorded, "already_recorded": len(rows) - recorded}


def run_mixture_proposal(
    *, run_id: int, reference_run_id: int, eta: float = 1.0, smoothing: float = 1e-3
) -> dict[str, Any]:
    """The next stage's weights for the run's pools by ``shardcore.adapt.propose_weights``
    (DoReMi's exponentiated excess loss): the run's latest validation loss per pool (its
    latest step with a whole-pool loss for every pool of its version) against the
    reference run's at the same step, or else its latest step before it. The reference
    must have reported those pools. CatalogError says what is missing."""
    from shardcore.adapt import RULE, propose_weights
    from shardcore.errors import InputError

    run = TrainingRun.objects.select_related("mixture_version").get(pk=run_id)
    ref = TrainingRun.objects.filter(pk=reference_run_id).first()
    if ref is None:
        raise CatalogError(f"reference: no run {reference_run_id}")
    comps = list(
        MixtureComponent.objects.filter(version=run.mixture_version).select_related("pool")
    )
    weights: dict[int, float] = {}
    for c in comps:
        weights[c.pool_id] = weights.get(c.pool_id, 0.0) + c.weight
    names = {c.pool_id: c.pool.name for c in comps}

    def by_step(r: TrainingRun) -> dict[int, dict[int, float]]:
        out: dict[int, dict[int, float]] = {}
        rows = RunLoss.objects.filter(run=r, split="val", source="", pool_id__in=weights)
        for step, pool, loss in rows.values_list("step", "pool_id", "loss"):
            out.setdefault(step, {})[pool] = loss
        return {s: v for s, v in out.items() if set(v) == set(weights)}

    mine = by_step(run)
    if not mine:
        raise CatalogError(
            f"run {run.name} has no step with a validation loss for each of its pools "
            f"({', '.join(names.values())})"
        )
    step = max(mine)
    theirs = by_step(ref)
    ref_steps = [s for s in theirs if s <= step]
    if not ref_steps:
        raise CatalogError(
            f"reference: run {ref.name} has no validation loss for each of the pools "
            f"{', '.join(names.values())} at or before step {step}"
        )
    ref_step = max(ref_steps)
    try:
        proposal = propose_weights(
            weights, mine[step], theirs[ref_step], eta=eta, smoothing=smoothing
        )
    except InputError as e:
        raise CatalogError(str(e)) from e
    return {
        "rule": RULE,
        "eta": eta,
        "smoothing": smoothing,
        "run": run.pk,
        "reference": ref.pk,
        "step": step,
        "reference_step": ref_step,
        "pools": [{"pool": p, "name": names[p], **v} for p, v in proposal.items()],
    }


def _switch_weights(weights) -> dict[int, float]:
    """``{pool id: weight}`` or ``[{"pool", "weight"}]`` -> {pool id: weight > 0}."""
    pairs = (
        list(weights.items())
        if isinstance(weights, dict)
        else [(w.get("pool"), w.get("weight")) for w in weights or [] if isinstance(w, dict)]
    )
    if not pairs:
        raise CatalogError("weights: give the new weight of each pool")
    out: dict[int, float] = {}
    for i, (pool, weight) in enumerate(pairs):
        try:
            pool, weight = int(pool), float(weight)
        except (TypeError, ValueError):
            raise CatalogError(
                f"weights[{i}]: {pool!r}: {weight!r} is not a pool id and a weight"
            ) from None
        if not (np.isfinite(weight) and weight > 0):
            raise CatalogError(f"weights[{i}].weight: {weight} is not positive")
        if pool in out:
            raise CatalogError(f"weights[{i}].pool: pool {pool} is given twice")
        out[pool] = weight
    return out


def run_switch(*, run_id: int, weights, note: str = "", actor=None) -> dict[str, Any]:
    """Save new weights (say, the proposal) as a new version of the run's mixture that
    continues from the run's resume position, and switch the run to it there.

    The switch sample is the run's resume position (its last report's consumed samples).
    The new version continues the version the run read up to it
    (``shardcore.mixture.continuation``: each shared pool reads on from where the run left
    it): its main stage is the rest of the stage the run is in, with ``weights``, then the
    later stages of the old version unchanged; its budget is what the old version had left.
    Its sample 0 is the run's switch sample. The run's segments record the switch (the old
    version closed at that sample, the new one open from it, from the next step on), the
    run reads the new version from then on, and the taint of both versions is refreshed.
    A second switch before the run read anything of the first replaces it. Built through
    ``mixture_version_create``. Saving a version needs the editor role."""
    from shardcore.errors import ShardcoreError
    from shardcore.manifest import read_manifest
    from shardcore.mixture import continuation
    from webapp.catalog.selectors import run_segments
    from webapp.roles import has_role

    if actor is not None and not has_role(actor, "editor"):
        raise RunPermissionError("saving a version a run switches to needs the editor role")
    weights = _switch_weights(weights)
    with transaction.atomic():
        run = TrainingRun.objects.select_for_update().get(pk=run_id)
        segments = run_segments(run=run)
        at = int(run.consumed_samples)
        kept = [g for g in segments if g.first_sample < at]
        base = kept[-1] if kept else segments[0]
        local = at - base.first_sample if kept else 0
        version = base.mixture_version
        if not _version_built(version):
            raise CatalogError(f"{version} has no built schedule to continue from")
        if local >= version.num_samples:
            raise CatalogError(
                f"run {run.name} has read all {version.num_samples} samples of {version}: "
                "nothing left to switch"
            )
        manifest = read_manifest(version.path)
        seq_len = int(manifest["seq_len"])
        stages = manifest["stages"]
        k = max(i for i, st in enumerate(stages) if st["first_sample"] <= local)
        later = stages[k + 1 :]
        comps = MixtureComponent.objects.filter(version=version)
        components = [{"pool": p, "weight": w, "stage": ""} for p, w in weights.items()]
        for st in later:
            components += [
                {"pool": c.pool_id, "weight": c.weight, "stage": st["name"]}
                for c in comps
                if _stage_name(c.stage) == st["name"]
            ]
        spec = (version.params or {}).get("spec") or manifest["spec"]
        try:
            cont = continuation(version.path, local)
        except ShardcoreError as exc:
            raise CatalogError(f"run {run.name}: {exc}") from exc
        new = mixture_version_create(
            mixture_id=version.mixture_id,
            components=components,
            token_budget=(version.num_samples - local) * seq_len,
            seed=version.seed,
            stages=[{"name": st["name"], "tokens": st["num_samples"] * seq_len} for st in later],
            order=spec.get("order", "blend"),
            max_repetitions=float(spec.get("max_repetitions", 4.0)),
            order_options=spec.get("order_options") or {},
            note=note
            or f"continues {version} for run {run.name} at its sample {at} (step {run.last_step})",
            continues=cont,
            created_by=actor,
        )
        RunSegment.objects.filter(run=run, first_sample__gte=at).delete()
        if kept and kept[-1].pk is not None:
            RunSegment.objects.filter(pk=kept[-1].pk).update(end_sample=at)
        elif kept:
            RunSegment.objects.create(
                run=run, index=0, mixture_version=version, first_sample=0, end_sample=at,
                first_step=1,
            )  # fmt: skip
        segment = RunSegment.objects.create(
            run=run,
            index=len(kept),
            mixture_version=new,
            first_sample=at,
            first_step=run.last_step + 1,
            created_by=actor,
        )
        run.mixture_version = new
        run.save(update_fields=["mixture_version"])
        taint_refresh(source_ids=set(_version_source_ids(version)) | set(_version_source_ids(new)))
    return {
        "run": run,
        "version": new,
        "segment": segment,
        "continues": {"version": version.pk, "sample": local},
    }


def run_resume_position(*, run_id: int, sample: int | None = None) -> dict[str, Any]:
    """Where the run continues: ``shardcore.mixlocate.locate_mixture`` on the version's
    schedule (stage, pool, shard, record, token offset; the same answer as ``shardyard
    locate``), plus the pool's catalog row and the epoch of the pool being read. Nothing is
    scanned for pools read at most once. ``sample`` defaults to the run's consumed
    position: its consumed tokens when they agree with its consumed samples (then the
    token offset into the next sample is exact), else its consumed samples."""
    from shardcore.errors import ShardcoreError
    from webapp.catalog.selectors import run_segments

    run = TrainingRun.objects.select_related("mixture_version").get(pk=run_id)
    segments = run_segments(run=run)
    at = run.consumed_samples if sample is None else int(sample)
    # The segment the next sample belongs to (a run switched at its position reads the
    # new version next); its version's own sample numbering.
    segment = next(g for g in reversed(segments) if g.first_sample <= at or g is segments[0])
    version, first = segment.mixture_version, segment.first_sample
    if len(segments) == 1 and not _version_built(version):
        return _resume_by_blend(run, sample)
    from shardcore.mixlocate import locate_mixture
    from shardcore.mixture import Mixture

    try:
        mix = Mixture(version.path)
        seq_len = mix.seq_len
        if sample is None and run.consumed_tokens // seq_len == run.consumed_samples:
            where = locate_mixture(version.path, tokens=run.consumed_tokens - first * seq_len)
        else:
            where = locate_mixture(version.path, sample=at - first)
    except ShardcoreError as exc:
        raise CatalogError(f"run {run.name}: {exc}") from exc
    pool_info = mix.pools[where["pool"]]
    pools = {
        os.path.abspath(c.pool.path): c.pool
        for c in MixtureComponent.objects.filter(version=version).select_related("pool")
    }
    pool = pools.get(os.path.abspath(where["pool_path"]))
    epoch = 0
    if pool_info["epochs"] > 1 or pool_info.get("first_read"):
        # Repeated pools: the epoch is how often this pool was read before the sample.
        # One vectorized pass over the int16 schedule prefix (2 bytes per sample).
        before = int(np.count_nonzero(mix.pool_index[: where["sample"]] == where["pool"]))
        epoch = (int(pool_info.get("first_read", 0)) + before) // int(pool_info["num_records"])
    return {
        **where,
        "sample": first + where["sample"],
        "mixture_version": version.pk,
        "version_sample": where["sample"],
        "segment": segment.index,
        "segments": [
            {
                "version": g.mixture_version_id,
                "path": g.mixture_version.path,
                "first_sample": g.first_sample,
                "end_sample": g.end_sample,
            }
            for g in segments
        ],  # fmt: skip
        "run": run.pk,
        "pool": pool.name if pool else where["pool_key"],
        "pool_index": where["pool"],
        "pool_id": pool.pk if pool else None,
        "epoch": epoch,
        "shard_path": str(Path(where["pool_path"]) / where["shard_prefix"]),
    }


def _resume_by_blend(run: TrainingRun, sample: int | None) -> dict[str, Any]:
    """Resume in a version without a schedule on disk: Megatron's blend over the
    components' weights, then ``locate_pool`` in the pool read."""
    from shardcore.blend import build_blending_indices
    from shardcore.manifest import read_manifest
    from shardcore.resume import locate_pool

    sample = int(run.consumed_samples if sample is None else sample)
    comps = list(
        MixtureComponent.objects.filter(version_id=run.mixture_version_id)
        .select_related("pool")
        .order_by("id")
    )
    if not comps:
        raise CatalogError("the mixture version has no components")
    if len(comps) == 1:
        comp, pool_sample = comps[0], sample
    else:
        index, sample_index = build_blending_indices([c.weight for c in comps], sample + 1)
        comp, pool_sample = comps[int(index[sample])], int(sample_index[sample])
    manifest = read_manifest(comp.pool.path)
    total = int(manifest["num_records"])
    if total == 0:
        raise CatalogError(f"pool {comp.pool.name} has no records")
    epoch, record = divmod(pool_sample, total)
    where = locate_pool(manifest, sample=record)
    return {
        "run": run.pk,
        "sample": sample,
        "pool_id": comp.pool_id,
        "pool": comp.pool.name,
        "pool_path": comp.pool.path,
        "stage": comp.stage,
        "epoch": epoch,
        "record": record,
        **{k: v for k, v in where.items() if k not in ("sample",)},
    }


# --- immutability -----------------------------------------------------------------------


def artifact_refuse_edit(*, artifact) -> None:
    """Services call this before changing an artifact row: a built one never changes."""
    if artifact.status == ArtifactStatus.READY:
        raise CatalogError(
            f"{type(artifact).__name__} {artifact.pk} is built and immutable; "
            "create a new version instead"
        )


# --- flags and taint --------------------------------------------------------------------


def flag_create(
    *,
    reason: str,
    source_id: int,
    file_path: str | None = None,
    document_ids: Iterable[int] | None = None,
    created_by=None,
) -> Flag:
    """Flag a whole source, one of its files, or a set of its document indices, and taint
    everything downstream that contains the flagged documents."""
    if not reason.strip():
        raise CatalogError("a flag needs a reason")
    source = Source.objects.get(pk=source_id)
    source_file = None
    ids: list[int] = []
    if file_path is not None and document_ids is not None:
        raise CatalogError("flag a file or a set of documents, not both")
    if file_path is not None:
        source_file = SourceFile.objects.filter(source=source, path=file_path).first()
        if source_file is None:
            raise CatalogError(f"source {source.name} has no file {file_path!r}")
        target = Flag.Target.FILE
    elif document_ids is not None:
        ids = sorted({int(i) for i in document_ids})
        if not ids:
            raise CatalogError("no document ids given")
        if ids[0] < 0:
            raise CatalogError(f"document ids are indices from 0, got {ids[0]}")
        target = Flag.Target.DOCUMENTS
    else:
        target = Flag.Target.SOURCE
    with transaction.atomic():
        flag = Flag.objects.create(
            target=target,
            source=source,
            source_file=source_file,
            document_ids=ids,
            reason=reason,
            created_by=created_by,
        )
        flag_propagate(flag_id=flag.pk)
    return flag


def flag_propagate(*, flag_id: int) -> int:
    """(Re)compute the taint of one flag through lineage; returns the number of taints.
    Idempotent: called on flag creation and whenever a new artifact or run is recorded."""
    flag = Flag.objects.select_related("source", "source_file").get(pk=flag_id)
    taints: list[Taint] = []
    tokenized = list(TokenizedSource.objects.filter(source=flag.source))
    hit_tokenized: dict[int, int] = {}
    for ts in tokenized:
        n = _flagged_docs_in_tokenized(flag, ts)
        if n:
            hit_tokenized[ts.pk] = n
            taints.append(Taint(flag=flag, tokenized_source=ts, documents=n))
    hit_pools: dict[int, int] = {}
    if hit_tokenized:
        pools = Pool.objects.filter(parents__in=list(hit_tokenized)).distinct()
        for pool in pools:
            n = _flagged_docs_in_pool(flag, pool, hit_tokenized)
            if n:
                hit_pools[pool.pk] = n
                taints.append(Taint(flag=flag, pool=pool, documents=n))
    hit_versions: dict[int, int] = {}
    if hit_pools:
        versions = MixtureVersion.objects.filter(components__pool__in=list(hit_pools)).distinct()
        for version in versions:
            n = _flagged_docs_in_version(flag, version, hit_pools)
            if n:
                hit_versions[version.pk] = n
                taints.append(Taint(flag=flag, mixture_version=version, documents=n))
    if hit_versions:
        taints += _run_taints(flag, hit_versions)
        # A materialized copy holds the tokens itself (configs only name the pools' files).
        for export in Export.objects.filter(
            version__in=list(hit_versions),
            format=Export.Format.MATERIALIZED,
            status=ArtifactStatus.READY,
        ):
            taints.append(
                Taint(flag=flag, export=export, documents=hit_versions[export.version_id])
            )
    with transaction.atomic():
        Taint.objects.filter(flag=flag).delete()
        Taint.objects.bulk_create(taints)
    return len(taints)


def _run_taints(flag: Flag, hit_versions: dict[int, int]) -> list[Taint]:
    """The runs that read a flagged document of a tainted version. A run that never
    switched reads its whole version (tainted as its version is); a run that switched
    read only a stretch of each earlier version, tainted when a flagged sample lies in
    it (``shardcore.lineage`` over the schedule), and its current version from the switch
    to the end. ``documents``: the most a tainted version of the run holds."""
    from webapp.catalog.selectors import segment_flagged

    hit = list(hit_versions)
    out: dict[int, Taint] = {}
    switched = set(
        RunSegment.objects.filter(mixture_version__in=hit).values_list("run_id", flat=True)
    ) | set(
        RunSegment.objects.filter(run__mixture_version__in=hit).values_list("run_id", flat=True)
    )
    for run in TrainingRun.objects.filter(mixture_version__in=hit).exclude(pk__in=switched):
        out[run.pk] = Taint(flag=flag, run=run, documents=hit_versions[run.mixture_version_id])
    segments = RunSegment.objects.filter(run_id__in=switched, mixture_version__in=hit)
    for g in segments.select_related("mixture_version", "run"):
        if (
            g.end_sample is not None
            and segment_flagged(flag=flag, segment=g)["first_sample"] is None
        ):
            continue  # the run stopped reading this version before its first flagged sample
        n = hit_versions[g.mixture_version_id]
        if g.run_id in out:
            out[g.run_id].documents = max(out[g.run_id].documents, n)
        else:
            out[g.run_id] = Taint(flag=flag, run=g.run, documents=n)
    return list(out.values())


def taint_refresh(*, source_ids: Iterable[int] | None = None) -> int:
    """Recompute the taint of every flag (of the given sources): new artifacts and runs
    built from flagged data are tainted as soon as they are recorded."""
    from webapp.catalog.scrub import corruption_refresh

    flags = Flag.objects.all()
    if source_ids is not None:
        flags = flags.filter(source_id__in=list(source_ids))
    corruption_refresh()  # corrupt inputs mark what is built from them the same way
    return sum(flag_propagate(flag_id=pk) for pk in flags.values_list("pk", flat=True))


def _flagged_docs_in_tokenized(flag: Flag, ts: TokenizedSource) -> int:
    """How many flagged documents the tokenized source holds."""
    if ts.status != ArtifactStatus.READY:
        return 0
    if flag.target == Flag.Target.SOURCE:
        return max(ts.num_documents, 1)
    ranges = _tokenized_file_ranges(ts)
    if flag.target == Flag.Target.FILE:
        start, stop = ranges.get(flag.source_file.path, (0, 0))
        return stop - start
    return sum(1 for i in flag.document_ids if i < ts.num_documents)


def _tokenized_file_ranges(ts: TokenizedSource) -> dict[str, tuple[int, int]]:
    """{relative file path: [first document index, end)} from the tokenized manifest."""
    ranges = (ts.params or {}).get("file_ranges") or {}
    return {path: (int(v[0]), int(v[1])) for path, v in ranges.items()}


def _flagged_document_ids(flag: Flag, ts: TokenizedSource) -> set[int] | None:
    """The flagged document indices within ``ts``; None means all of them."""
    if flag.target == Flag.Target.SOURCE:
        return None
    if flag.target == Flag.Target.FILE:
        start, stop = _tokenized_file_ranges(ts).get(flag.source_file.path, (0, 0))
        return set(range(start, stop))
    return set(flag.document_ids)


def _flagged_docs_in_pool(flag: Flag, pool: Pool, hit_tokenized: dict[int, int]) -> int:
    """How many flagged documents made it into the pool (its filter and train/val split
    decide), from the pool's per-document Parquet listing."""
    from webapp.catalog import lineage

    if pool.status != ArtifactStatus.READY:
        return 0
    total = 0
    for ts in pool.parents.filter(pk__in=list(hit_tokenized)):
        total += lineage.pool_documents_hit(
            pool=pool, tokenized=ts, doc_ids=_flagged_document_ids(flag, ts)
        )
    return total


def _flagged_docs_in_version(flag: Flag, version: MixtureVersion, hit_pools: dict[int, int]) -> int:
    if version.status not in (ArtifactStatus.READY, ArtifactStatus.BUILDING):
        return 0
    # A pool in two stages holds its documents once.
    return sum(hit_pools.get(p, 0) for p in {c.pool_id for c in version.components.all()})

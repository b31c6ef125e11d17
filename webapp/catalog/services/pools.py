"""Writes for pools: the pool job (filter, shuffle, pack) and its recorder, which records
the train pool and its held-out validation pool."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from shardcore import limits, storage
from shardcore.errors import EmptySelectionError, InputError
from shardcore.filters import filter_parse
from shardcore.manifest import MANIFEST_NAME, read_manifest, total_bytes
from shardcore.pool import plan_pool
from shardcore.pool import select as pool_select
from shardcore.units import Plan, load_plan
from webapp.catalog.errors import CatalogError, boundary, refused
from webapp.catalog.measures import pool_quality_measure
from webapp.catalog.models import (
    ArtifactStatus,
    Pool,
    TokenizedSource,
)
from webapp.catalog.services.annotations import pool_annotations
from webapp.catalog.services.common import (
    artifact_dir,
    artifact_unbuilt,
    checked_name,
    limited,
    refuse_corrupt,
    shards_record,
)
from webapp.catalog.services.facts import artifact_facts_request
from webapp.catalog.services.flags import taint_refresh
from webapp.catalog.services.launch import launch
from webapp.catalog.services.recipe import recipe_measure
from webapp.catalog.services.register import parents_by_fingerprint, registered_artifact
from webapp.jobs import recorders
from webapp.jobs.models import ACTIVE_JOB_STATES, Job
from webapp.jobs.services import job_create


@boundary
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
    annotation_ids: Iterable[int] = (),
    created_by=None,
) -> Pool:
    """Start a pool job over ready tokenized sources; returns the BUILDING train pool (its
    validation pool is recorded beside it when the job succeeds). ``annotation_ids``: the
    annotations of those sources the pool joins (their columns read as
    ``<annotator>.<column>``)."""

    name = checked_name(name, "pool name")
    try:  # the library's ranges, before anything is planned (a large input plans in a job)
        seq_len = limits.seq_len(seq_len)
        seed = limits.seed(seed)
        val_fraction = limits.val_fraction(val_fraction)
    except InputError as exc:
        raise CatalogError(str(exc)) from None
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
    refuse_corrupt(parents)
    joined = pool_annotations(annotation_ids=annotation_ids, parents=parents)
    same = {
        "name": name,
        "filter": filter or "",
        "seq_len": seq_len,
        "shuffle": shuffle,
        "seed": seed,
        "val_fraction": val_fraction,
        "annotations": [a.pk for a in joined],
    }
    out = ""

    # Planning reads every input document's metadata (through the filter, if any): up to
    # SHARDYARD_PLAN_INLINE_DOCUMENTS documents in the request (a filter selecting nothing
    # is refused at once, at the field), beyond that as the first job's work in a worker
    # (``shardcore.planning``; ``pool_planned`` then starts the pool's own job).
    inline = sum(t.num_documents for t in parents) <= settings.PLAN_INLINE_DOCUMENTS
    arguments = {
        "tokenized": [t.path for t in parents],
        "seq_len": seq_len,
        "filter": filter,
        "shuffle": shuffle,
        "seed": seed,
        "memory": memory,
        "val_fraction": val_fraction,
        "shard_size": shard_size,
        "annotations": [a.path for a in joined],
    }

    def plan() -> Plan:
        nonlocal out
        _name_free(name)
        out = artifact_dir("pools", name)
        what = f"planning pool {name!r}"
        if not inline:
            # The sidecars are read by the planning job's units, a group of inputs each
            # (``shardcore.pool.select``); its last unit plans from what they found.
            return pool_select.deferred(kwargs={**arguments, "out": out}, out=out, what=what)
        # Reading every sidecar through the filter: in a child process with time and
        # memory limits (DuckDB's own memory limit applies inside it as well).
        with refused(f"cannot build pool {name!r}"):
            try:
                return limited(plan_pool, out=out, what=what, **arguments)
            except EmptySelectionError as exc:
                raise CatalogError(_empty_selection(exc)) from exc

    def lock() -> None:
        # Launches over the same inputs are serialized: the second of two concurrent
        # identical ones sees the first's row and answers it.
        list(TokenizedSource.objects.select_for_update().filter(pk__in=[t.pk for t in parents]))

    def create(job: Job, plan: Plan) -> Pool:
        _name_free(name)
        try:
            with transaction.atomic():
                pool = Pool.objects.create(
                    name=name,
                    filter=filter or "",
                    seq_len=seq_len,
                    # A deferred plan's parameters are the pool's once it is planned.
                    params=plan.params if inline else {k: same[k] for k in _ASKED},
                    path=str(out),
                    job=job,
                    created_by=created_by,
                )
        except IntegrityError:  # a concurrent build of another pool took the name
            raise CatalogError(_name_taken(name)) from None
        pool.parents.set(parents)
        pool.annotations.set(joined)
        return pool

    return launch(
        lock=lock,
        running=lambda: _pool_building(parents, same),
        plan=plan,
        create=create,
        title=f"pool {name}" if inline else f"plan pool {name}",
        recorder="pool" if inline else "pool.planned",
        created_by=created_by,
    )


# What ``_pool_building`` compares of a pool still being planned.
_ASKED = ("shuffle", "seed", "val_fraction")


def _empty_selection(exc: EmptySelectionError) -> str:
    return (
        f"filter: {exc}: change the filter so that it selects some documents, "
        "or leave it empty to take them all"
    )


@recorders.register("pool.planned")
def pool_planned(*, job, manifest: dict | None) -> None:
    """Recorder of a pool's planning job (a launch over more documents than a request
    plans): start the pool's own job from the plan the worker saved, or fail the pool
    (cancelled with its planning)."""

    pool = Pool.objects.select_for_update().get(job=job, split=Pool.Split.TRAIN)
    if manifest is None:
        artifact_unbuilt(pool, job=job)
        return
    made = load_plan(pool.path)
    built = job_create(
        plan=made,
        title=f"pool {pool.name}",
        recorder="pool",
        created_by=job.created_by,
    )
    pool.job = built
    pool.params = made.params
    pool.status = ArtifactStatus.BUILDING  # (a retried planning's pool had failed)
    pool.finished_at = None
    pool.save()


def _name_taken(name: str, pool: Pool | None = None) -> str:
    which = f" (pool {pool.pk}, {pool.status})" if pool is not None else ""
    return f"pool name: a pool named {name!r} exists already{which}; choose another name"


def _name_free(name: str) -> None:
    """Refuse a train pool name that another train pool holds (unless its build failed or
    was cancelled); the constraint ``pool_unique_name`` backs it."""
    dead = [ArtifactStatus.FAILED, ArtifactStatus.CANCELLED]
    taken = Pool.objects.filter(name=name, split=Pool.Split.TRAIN).exclude(status__in=dead).first()
    if taken is not None:
        raise CatalogError(_name_taken(name, taken))


def _pool_building(parents: list[TokenizedSource], same: dict[str, Any]) -> Pool | None:
    """A train pool over exactly ``parents`` with the same name and parameters whose job
    is still queued or running."""

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
            and sorted(a.pk for a in pool.annotations.all()) == same["annotations"]
        ):
            return pool
    return None


def _pool_fill(pool: Pool, manifest: dict) -> None:

    pool.fingerprint = manifest["fingerprint"]
    pool.num_records = manifest["num_records"]
    pool.num_tokens = manifest["num_tokens"]
    pool.num_documents = manifest["documents"]
    pool.manifest_path = storage.join(pool.path, MANIFEST_NAME)
    pool.num_bytes = total_bytes(manifest)
    pool.num_shards = len(manifest["shards"])
    pool.status = ArtifactStatus.READY
    pool.finished_at = timezone.now()
    pool.save()
    artifact_facts_request(pool)  # its properties, measured by a task, not by its page
    shards_record(
        owner={"pool": pool},
        out=pool.path,
        manifest=manifest,
        shards=({**sh, "index": i} for i, sh in enumerate(manifest["shards"])),
    )


@recorders.register("pool")
def pool_record(*, job, manifest: dict | None) -> None:
    """Recorder of pool jobs: the train pool, its shards, and the validation pool."""

    pool = Pool.objects.select_for_update().get(job=job, split=Pool.Split.TRAIN)
    if manifest is None:
        artifact_unbuilt(pool, job=job)
        return
    dead = [ArtifactStatus.FAILED, ArtifactStatus.CANCELLED]
    if (
        Pool.objects.filter(name=pool.name, split=Pool.Split.TRAIN)
        .exclude(pk=pool.pk)
        .exclude(status__in=dead)
        .exists()
    ):
        # A failed build's name was taken by another pool before this build was retried
        # and succeeded: this one keeps a name of its own (pool_unique_name).
        pool.name = f"{pool.name}-{pool.pk}"
    # Part of the build, for every pool (on its first records, a bounded cost): the page's
    # default report, before the row is frozen READY.
    pool.params = {
        **(pool.params or {}),
        "quality": pool_quality_measure(pool=pool),
        "recipe": recipe_measure(path=pool.path),
    }
    _pool_fill(pool, manifest)
    _val_pool_record(pool, manifest, job)
    taint_refresh(source_ids=pool.parents.values_list("source_id", flat=True))


def _val_pool_record(pool: Pool, manifest: dict, job) -> None:
    """The validation pool held out of ``pool``, when its manifest names one."""
    if not manifest.get("val"):
        return
    val_path = storage.join(pool.path, manifest["val"]["path"])
    val = Pool(
        name=f"{pool.name}-val",
        split=Pool.Split.VAL,
        train_pool=pool,
        filter=pool.filter,
        seq_len=pool.seq_len,
        params={k: v for k, v in (pool.params or {}).items() if k not in ("quality", "recipe")},
        path=val_path,
        job=job,
        created_by=pool.created_by,
    )
    val.save()
    val.parents.set(pool.parents.all())
    val.annotations.set(pool.annotations.all())
    _pool_fill(val, read_manifest(val_path))


def pool_register(*, path: str, name: str = "", created_by=None) -> Pool:
    """Record a pool built outside the service (``shardyard pool`` on a cluster: Slurm job
    arrays, Ray tasks, local processes) as if the service had built it: its parents are
    the ready tokenized sources its manifest names by fingerprint, its shards, quality
    report and recipe are recorded as a build's are, and the flags of its sources taint it.
    ``name`` defaults to the directory's name. The same pool registered again answers its
    row (``existed``); another pool at that location is refused."""

    location, manifest = registered_artifact(path, kind="pool")
    dead = [ArtifactStatus.FAILED, ArtifactStatus.CANCELLED]
    there = Pool.objects.filter(path=location).exclude(status__in=dead).first()
    if there is not None:
        if there.fingerprint != manifest["fingerprint"]:
            raise CatalogError(f"{location} is pool {there.name} already, of other content")
        there.existed = True  # type: ignore[attr-defined]  # the launch says it was there
        return there
    by_fp = parents_by_fingerprint(
        TokenizedSource.objects.all(), manifest.get("parents") or [], what="tokenized source"
    )
    name = checked_name(name or location.rstrip("/").rsplit("/", 1)[-1], "pool name")
    _name_free(name)
    params = dict(manifest.get("params") or {})
    try:
        with transaction.atomic():
            pool = Pool.objects.create(
                name=name,
                filter=params.get("filter") or "",
                seq_len=int(manifest["seq_len"]),
                params={**params, "registered": True},
                path=location,
                created_by=created_by,
            )
            pool.parents.set(list(by_fp.values()))
            pool.params = {
                **pool.params,
                "quality": pool_quality_measure(pool=pool),
                "recipe": recipe_measure(path=pool.path),
            }
            _pool_fill(pool, manifest)
            _val_pool_record(pool, manifest, None)
    except IntegrityError:  # a concurrent build of another pool took the name
        raise CatalogError(_name_taken(name)) from None
    taint_refresh(source_ids=pool.parents.values_list("source_id", flat=True))
    return pool

"""Writes for mixtures and their immutable versions."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from shardcore import quality, storage
from shardcore.errors import ShardcoreError
from shardcore.manifest import MANIFEST_NAME, total_bytes
from shardcore.mixture import (
    Component,
    MixtureSpec,
    PoolInfo,
    Stage,
    flatten,
    plan_epochs,
    plan_mixture,
)
from shardcore.units import Plan
from webapp.catalog import builder, guards
from webapp.catalog.errors import CatalogError, refused
from webapp.catalog.models import (
    ArtifactStatus,
    Mixture,
    MixtureComponent,
    MixtureVersion,
    Pool,
    TokenizedSource,
)
from webapp.catalog.services.common import (
    artifact_unbuilt,
    checked_name,
    jsonable,
    refuse_corrupt,
)
from webapp.catalog.services.facts import artifact_facts_request
from webapp.catalog.services.flags import taint_refresh
from webapp.catalog.services.launch import launch
from webapp.catalog.services.recipe import recipe_measure
from webapp.catalog.services.register import parents_by_fingerprint, registered_artifact
from webapp.jobs import recorders
from webapp.jobs.models import Job
from webapp.jobs.services import job_retry


def mixture_get_or_create(*, name: str, description: str = "", created_by=None) -> Mixture:
    """The mixture named ``name``, created when new. Two first saves of one name at the same
    time both get the one row (the unique name decides; no IntegrityError escapes)."""
    name = checked_name(name, "mixture name")
    existing = Mixture.objects.filter(name=name).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            return Mixture.objects.create(name=name, description=description, created_by=created_by)
    except IntegrityError:
        return Mixture.objects.get(name=name)


def mixture_version_save(
    *, name: str, draft: Mapping[str, Any], description: str = "", created_by=None
) -> MixtureVersion:
    """Save the builder's draft (its rows of pools and weights, later stages, budget, seed,
    ordering and its options, repetition cap: ``builder.spec_from_draft``) as the next
    version of mixture ``name`` (created when new), built by a job (``mixture_version_build``).
    The draft is parsed once, here; a draft that cannot be built is a CatalogError that
    says why."""
    try:
        spec = MixtureSpec.from_dict(builder.spec_from_draft(draft))
    except (builder.BuilderError, ShardcoreError) as exc:
        raise CatalogError(str(exc)) from None
    with transaction.atomic():
        mixture = mixture_get_or_create(name=name, description=description, created_by=created_by)
        return mixture_version_build(
            mixture_id=mixture.pk, spec=spec, note=description, created_by=created_by
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
    first_stage: str = "",
    created_by=None,
) -> MixtureVersion:
    """``mixture_version_build`` from a list of components: {"pool": id, "weight": w,
    "stage": s}, weights being token shares within their stage (normalized); stage "" or
    ``first_stage`` (default "main") is the first stage, any other stage needs its token
    count in ``stages`` ([{"name", "tokens"}], in training order). ``continues``
    (``shardcore.mixture.continuation``) makes a version that a run switches to
    mid-training (``runs.run_switch``), whose first stage is named after the stage the run
    was in (``first_stage``, e.g. "anneal")."""
    if not components:
        raise CatalogError("a mixture version needs at least one component")
    first = str(first_stage or MAIN)
    by_stage: dict[str, list[dict[str, Any]]] = {}
    for c in components:
        by_stage.setdefault(c.get("stage") or first, []).append(
            {"pool": str(c["pool"]), "weight": c["weight"]}
        )
    stage_tokens = {str(st["name"]): st.get("tokens") for st in stages or []}
    unknown = set(by_stage) - {first} - set(stage_tokens)
    if unknown:
        raise CatalogError(
            f"stage(s) {sorted(unknown)} need a token count: pass stages=[{{'name', 'tokens'}}]"
        )
    if first not in by_stage:
        raise CatalogError(f"the first stage (stage '' or {first!r}) needs at least one component")
    with refused("mixture spec"):
        spec = MixtureSpec.from_dict(
            {
                "tokens": token_budget,
                "seed": seed,
                "order": order,
                "max_repetitions": max_repetitions,
                "order_options": dict(order_options or {}),
                "components": by_stage[first],
                "first_stage": first,
                "stages": [
                    {"name": name, "tokens": tokens, "components": by_stage[name]}
                    for name, tokens in stage_tokens.items()
                    if name in by_stage
                ],
                **({} if continues is None else {"continues": continues}),
            }
        )
    return mixture_version_build(mixture_id=mixture_id, spec=spec, note=note, created_by=created_by)


def mixture_version_build(
    *, mixture_id: int, spec: MixtureSpec, note: str = "", created_by=None
) -> MixtureVersion:
    """Queue the build of the mixture's next immutable version and return its row, which
    is "building" until its job (stage "mixture": ``shardcore.mixture.plan_mixture``)
    writes the schedule and ``mixture_version_record`` records it; a failed build's error
    is the job's. ``spec`` names pools by catalog id; each stage's pools get their shares
    (nested groups multiplied out).

    The request checks what it can without reading a pool's files or allocating a schedule:
    the pools are ready, not corrupt and share a seq_len; the budget fits a schedule
    (``SHARDYARD_MAX_SCHEDULE_SAMPLES``), gives every pool a sample, and repeats none
    beyond ``max_repetitions`` (from the catalog's record counts). The same content saved
    again answers the version that holds it (``existed``), or reruns its build when that
    failed. Versions are never edited: changing a weight means creating the next version."""

    leaves, keys = _spec_shares(spec)
    pools = _ready_pools(list(dict.fromkeys(keys.values())))
    _refuse_repetitions(spec, keys, pools)

    # What shardcore builds: each stage's pools by path, with their shares.
    def by_path(shares: dict[int, float]) -> list[Component]:
        return [Component(weight=share, pool=pools[pk].path) for pk, share in shares.items()]

    schedule = replace(
        spec,
        components=by_path(leaves[spec.first_stage]),
        stages=[Stage(st.name, st.tokens, by_path(leaves[st.name])) for st in spec.stages],
        base_dir=None,
    )
    content = jsonable(schedule.to_dict())
    mixture = Mixture.objects.get(pk=mixture_id)
    number, out = 0, ""

    def running() -> MixtureVersion | None:
        nonlocal mixture, number
        mixture = Mixture.objects.get(pk=mixture_id)
        latest = mixture.versions.select_related("job").order_by("-number").first()
        number = (latest.number if latest is not None else 0) + 1
        return _version_holding(latest, content)

    def plan() -> Plan:
        nonlocal out
        out = _version_dir(mixture, number)
        with refused(f"cannot build {mixture.name} v{number}"):
            return plan_mixture(schedule, out)

    def create(job: Job, _plan: Plan) -> MixtureVersion:
        version = MixtureVersion.objects.create(
            mixture=mixture,
            number=number,
            token_budget=spec.tokens,
            seed=spec.seed,
            note=note,
            params={"spec": content},
            path=str(out),
            job=job,
            created_by=created_by,
        )
        MixtureComponent.objects.bulk_create(
            [
                MixtureComponent(version=version, pool=pools[pk], weight=share, stage=name)
                for name, shares in leaves.items()
                for pk, share in shares.items()
            ]
        )
        return version

    return launch(
        # Versions of one mixture are numbered under its lock: two concurrent saves get
        # consecutive numbers, or the second answers the first's identical content.
        lock=lambda: Mixture.objects.select_for_update().get(pk=mixture_id),
        running=running,
        plan=plan,
        create=create,
        title=lambda: f"build {mixture.name} v{number}",
        recorder="mixture.version",
        created_by=created_by,
        plan_first=False,
    )


def _spec_shares(spec: MixtureSpec) -> tuple[dict[str, dict[int, float]], dict[str, int]]:
    """Each stage's pools by catalog id with their shares (nested groups multiplied out),
    and the spec's pool keys -> pool ids."""
    leaves: dict[str, dict[int, float]] = {}  # stage -> {pool id: share}
    keys: dict[str, int] = {}  # the spec's pool keys -> pool ids
    with refused("mixture spec"):
        for name, comps in spec.stage_components():
            shares = leaves.setdefault(name, {})
            for key, share in flatten(comps, where=spec.field_of(name)):
                keys[key] = _pool_id(key)
                shares[keys[key]] = shares.get(keys[key], 0.0) + share
    return leaves, keys


def _ready_pools(ids: list[int]) -> dict[int, Pool]:
    """The pools ``ids`` by id, each ready, not empty and not corrupt, sharing a seq_len."""
    pools = {p.pk: p for p in Pool.objects.filter(pk__in=ids)}
    for pk in ids:
        pool = pools.get(pk)
        if pool is None:
            raise CatalogError(f"no pool {pk}")
        if pool.status != ArtifactStatus.READY:
            raise CatalogError(f"pool {pool.name} is {pool.status}, not ready")
        if pool.num_records <= 0:
            raise CatalogError(f"pool {pool.name}: empty pool (0 records)")
    refuse_corrupt(pools.values())
    seq_lens = {p.seq_len for p in pools.values()}
    if len(seq_lens) != 1:
        raise CatalogError(f"pools of one mixture share a seq_len; got {sorted(seq_lens)}")
    return pools


def _refuse_repetitions(spec: MixtureSpec, keys: dict[str, int], pools: dict[int, Pool]) -> None:
    """Refuse a budget that no schedule fits, or that repeats a pool beyond
    ``max_repetitions`` (planned from the catalog's record counts, no file read)."""
    facts = [
        PoolInfo(
            key,
            pools[pk].path,
            {"num_records": pools[pk].num_records, "seq_len": pools[pk].seq_len},
        )
        for key, pk in keys.items()
    ]
    try:
        # Planned without the cap, so that a refusal names every pool beyond it.
        planned = plan_epochs(replace(spec, max_repetitions=math.inf), facts)
    except ShardcoreError as exc:
        raise CatalogError(_pool_names(str(exc), pools)) from None
    over = [pools[keys[p["pool"]]].name for p in planned if p["epochs"] > spec.max_repetitions]
    if over:
        raise CatalogError(
            f"{', '.join(over)} above max_repetitions={spec.max_repetitions:g}: add data, "
            "lower its weight or the budget, or raise max_repetitions"
        )


def _version_holding(latest: MixtureVersion | None, content: Any) -> MixtureVersion | None:
    """The version that holds this content already (a double click, a retried request):
    the answer, not an identical copy; a failed build of it runs again."""
    if latest is None or (latest.params or {}).get("spec") != content:
        return None
    if latest.status in (ArtifactStatus.FAILED, ArtifactStatus.CANCELLED) and latest.job_id:
        job_retry(job_id=latest.job_id)
        MixtureVersion.objects.filter(pk=latest.pk).update(
            status=ArtifactStatus.BUILDING, finished_at=None
        )
        latest.refresh_from_db()
        return latest
    if latest.status in (ArtifactStatus.READY, ArtifactStatus.BUILDING):
        latest.existed = True  # type: ignore[attr-defined]  # the launch says it was there
        return latest
    return None


def _version_dir(mixture: Mixture, number: int) -> str:
    """Where version ``number`` of ``mixture`` is built: a directory that does not exist."""
    try:
        out = guards.data_path("mixtures", checked_name(mixture.name, "mixture name"), f"v{number}")
    except guards.GuardError as exc:
        raise CatalogError(f"mixture {mixture.pk}: {exc}") from None
    if storage.exists(out):
        # A version's files are immutable: never build over a directory that exists
        # (a leftover of a save that failed after writing, or someone else's files).
        raise CatalogError(
            f"cannot build {mixture.name} v{number}: {out} exists already; "
            "remove it if it is a leftover of a failed save"
        )
    return out


MAIN = "main"


def _stage_name(stage: str | None) -> str:
    return stage or MAIN


def _pool_id(key: str) -> int:
    try:
        return int(key)
    except ValueError:
        raise CatalogError(f"components: pool {key!r} is not a pool id") from None


def _pool_names(message: str, pools: dict[int, Pool]) -> str:
    """A planner's message with the pools it quotes by id named instead."""
    for pk, pool in pools.items():
        message = message.replace(f"pool '{pk}'", f"pool {pool.name}")
    return message


@recorders.register("mixture.version")
def mixture_version_record(*, job, manifest: dict | None) -> None:
    """Recorder of mixture jobs: the built schedule's facts become the version's (samples,
    tokens, epochs per pool, stages, fingerprint), with the schedule's mixing quality;
    data flagged in its pools taints it."""

    version = MixtureVersion.objects.select_for_update().get(job=job)
    if manifest is None:
        artifact_unbuilt(version, job=job)
        return
    comps = list(version.components.select_related("pool"))
    built = {storage.resolve(p["path"]): p for p in manifest["pools"]}
    _version_fill(
        version, manifest, {c.pool_id: built[storage.resolve(c.pool.path)] for c in comps}
    )


def _version_fill(
    version: MixtureVersion, manifest: dict[str, Any], built: dict[int, dict[str, Any]]
) -> None:
    """A version's facts from its built schedule (``built``: the manifest's entry of each
    component's pool, by pool id), then READY; its pools' flags taint it."""
    comps = list(version.components.select_related("pool"))
    for c in comps:
        c.epochs = built[c.pool_id]["epochs"]
    MixtureComponent.objects.bulk_update(comps, ["epochs"])
    version.num_samples = manifest["num_samples"]
    version.params = {
        "spec": manifest["spec"],
        "seq_len": manifest["seq_len"],
        "stages": [
            {k: st[k] for k in ("name", "first_sample", "num_samples", "num_tokens")}
            for st in manifest["stages"]
        ],
        "pools": [
            {"pool": pool.pk, **{k: built[pool.pk][k] for k in ("samples", "tokens", "epochs")}}
            for pool in dict.fromkeys(c.pool for c in comps)
        ],
        "quality": schedule_quality(path=version.path),
        "recipe": recipe_measure(path=version.path),
    }
    version.fingerprint = manifest["fingerprint"]
    version.manifest_path = storage.join(version.path, MANIFEST_NAME)
    version.num_tokens = manifest["num_tokens"]
    version.num_bytes = total_bytes(manifest)
    version.status = ArtifactStatus.READY
    version.finished_at = timezone.now()
    version.save()
    artifact_facts_request(version)  # its epoch starts, measured by a task
    taint_refresh(source_ids=version_source_ids(version))


def mixture_version_register(
    *, path: str, mixture: str = "", note: str = "", created_by=None
) -> MixtureVersion:
    """Record a mixture schedule built outside the service (``shardyard mix`` on a cluster)
    as the next version of ``mixture`` (default: the directory's name; created when new):
    its components are the ready catalog pools its manifest names by fingerprint, with the
    spec's weights per stage, and its facts are a build's. The same schedule registered
    again answers its version (``existed``)."""

    location, manifest = registered_artifact(path, kind="mixture")
    there = MixtureVersion.objects.filter(path=location).exclude(
        status__in=[ArtifactStatus.FAILED, ArtifactStatus.CANCELLED]
    )
    found = there.first()
    if found is not None:
        if found.fingerprint != manifest["fingerprint"]:
            raise CatalogError(f"{location} is {found} already, of other content")
        found.existed = True  # type: ignore[attr-defined]  # the launch says it was there
        return found
    by_fp = parents_by_fingerprint(
        Pool.objects.all(), [p["fingerprint"] for p in manifest["pools"]], what="pool"
    )
    pool_of = {str(p["key"]): by_fp[p["fingerprint"]] for p in manifest["pools"]}
    with refused(f"{location}: its spec"):
        spec = MixtureSpec.from_dict(manifest["spec"])
    shares: dict[tuple[int, str], float] = {}
    with refused(f"{location}: its spec"):
        for name, comps in spec.stage_components():
            for key, share in flatten(comps, where=spec.field_of(name)):
                pool = pool_of.get(key)
                if pool is None:
                    raise CatalogError(f"{location}: its manifest lists no pool {key!r}")
                slot = (pool.pk, name)
                shares[slot] = shares.get(slot, 0.0) + share
    name = mixture or location.rstrip("/").rsplit("/", 1)[-1]
    owner = mixture_get_or_create(name=name, created_by=created_by)
    with transaction.atomic():
        owner = Mixture.objects.select_for_update().get(pk=owner.pk)
        latest = owner.versions.order_by("-number").first()
        version = MixtureVersion.objects.create(
            mixture=owner,
            number=(latest.number if latest is not None else 0) + 1,
            token_budget=spec.tokens,
            seed=spec.seed,
            note=note,
            params={"spec": manifest["spec"], "registered": True},
            path=location,
            created_by=created_by,
        )
        MixtureComponent.objects.bulk_create(
            [
                MixtureComponent(version=version, pool_id=pk, weight=share, stage=stage)
                for (pk, stage), share in shares.items()
            ]
        )
        entry = {p["fingerprint"]: p for p in manifest["pools"]}
        _version_fill(version, manifest, {pool.pk: entry[fp] for fp, pool in by_fp.items()})
    return version


def schedule_quality(*, path: str) -> dict[str, Any]:
    """A built schedule's quality by pool (``shardcore.quality.mixture_quality``): per
    stage, window deviation against random permutations of the same samples and a verdict;
    ``{"error": ...}`` when it cannot be measured (the schedule itself is still good)."""

    try:
        return quality.mixture_quality(path, by="pool")
    except (ShardcoreError, OSError, ValueError) as exc:
        return {"error": f"no quality measured: {exc}"}


def version_source_ids(version: MixtureVersion) -> list[int]:
    return list(
        TokenizedSource.objects.filter(pools__components__version=version)
        .values_list("source_id", flat=True)
        .distinct()
    )

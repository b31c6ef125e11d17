"""Writes for mixtures and their immutable versions."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from webapp.catalog import builder, guards
from webapp.catalog.errors import CatalogError
from webapp.catalog.models import (
    ArtifactStatus,
    Mixture,
    MixtureComponent,
    MixtureVersion,
    Pool,
    TokenizedSource,
)
from webapp.catalog.services.common import (
    checked_name,
    jsonable,
    refuse_corrupt,
)
from webapp.catalog.services.flags import taint_refresh


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
    to mid-training (``runs.run_switch``)."""
    from shardcore.errors import ShardcoreError
    from shardcore.manifest import file_entries
    from shardcore.mixture import MixtureSpec, build_mixture

    if token_budget <= 0:
        raise CatalogError("the token budget must be positive")
    if not components:
        raise CatalogError("a mixture version needs at least one component")
    pools = {p.pk: p for p in Pool.objects.filter(pk__in=[c["pool"] for c in components])}
    refuse_corrupt(pools.values())
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
            and (latest.params or {}).get("spec") == jsonable(spec.to_dict())
        ):
            # The same content saved again (a double click, a retried request): the version
            # that holds it already is the answer, not an identical copy.
            latest.existed = True
            return latest
        number = (latest.number if latest is not None else 0) + 1
        try:
            out = guards.data_path(
                "mixtures", checked_name(mixture.name, "mixture name"), f"v{number}"
            )
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
        taint_refresh(source_ids=version_source_ids(version))
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


def _stage_name(stage: str | None) -> str:
    return stage or "main"


def version_built(version: MixtureVersion) -> bool:
    """Whether the version has a schedule on disk (versions recorded before schedules were
    built, or rows made by hand, have none)."""
    return bool(version.manifest_path) and Path(version.manifest_path).exists()


def version_source_ids(version: MixtureVersion) -> list[int]:
    return list(
        TokenizedSource.objects.filter(pools__components__version=version)
        .values_list("source_id", flat=True)
        .distinct()
    )

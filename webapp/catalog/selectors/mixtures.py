"""Mixtures and their versions: a page of mixtures, a mixture's versions, a version with
its components, built schedule, runs and exports, two versions side by side, a version as
a JSON document, an export's file; the builder's pools and its prediction for a draft."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from django.db.models import Count, Max, Prefetch, Q, QuerySet

from shardcore import storage
from shardcore.errors import ManifestError
from shardcore.manifest import read_manifest
from webapp.catalog import builder
from webapp.catalog.models import (
    ArtifactStatus,
    Export,
    Mixture,
    MixtureVersion,
    Pool,
    RunSegment,
    TrainingRun,
)
from webapp.catalog.selectors import facts
from webapp.catalog.selectors.common import NotFound, get_or_not_found, runs_with_taint
from webapp.catalog.selectors.lineage import stage_names, version_lineage
from webapp.catalog.selectors.pools import pools_properties
from webapp.paging import page_of

BUILDER_POOLS = 500


def mixture_list(*, page=1) -> dict:
    """A page of mixtures by name, each with ``num_versions`` and its ``latest`` number."""
    qs = Mixture.objects.annotate(
        num_versions=Count("versions"), latest=Max("versions__number")
    ).order_by("name")
    return page_of(qs, page)


def mixture_rows() -> QuerySet[Mixture]:
    """Mixtures by name with their versions' ids (not their params, the quality reports):
    the API pages this query."""
    return Mixture.objects.prefetch_related(
        Prefetch("versions", queryset=MixtureVersion.objects.only("id", "mixture_id"))
    ).order_by("name")


def mixture_version_rows() -> QuerySet[MixtureVersion]:
    """Mixture versions newest first with their mixture and components' pools: the API
    pages this query."""
    return (
        MixtureVersion.objects.select_related("mixture")
        .prefetch_related("components__pool")
        .order_by("-created_at")
    )


def mixture_version_row(*, version_id: int, only: Sequence[str] = ()) -> MixtureVersion:
    """The mixture version (only its ``only`` fields when given), or NotFound."""
    rows = MixtureVersion.objects.only(*only) if only else MixtureVersion.objects.all()
    return get_or_not_found(rows, "mixture version", pk=version_id)


def mixture_detail(*, mixture_id: int) -> dict:
    """A mixture and its newest 50 versions, each with ``num_runs``: the runs that read it,
    now or before a switch to another version (a run is counted by every version it read);
    and ``num_runs``, the runs that read any version of the mixture."""
    mixture = get_or_not_found(Mixture.objects.all(), "mixture", pk=mixture_id)
    versions = list(mixture.versions.defer("params").order_by("-number")[:50])
    readers: dict[int, set[int]] = {v.pk: set() for v in versions}
    current = TrainingRun.objects.filter(mixture_version__in=versions)
    for run_id, version_id in current.values_list("pk", "mixture_version_id"):
        readers[version_id].add(run_id)
    earlier = RunSegment.objects.filter(mixture_version__in=versions)
    for run_id, version_id in earlier.values_list("run_id", "mixture_version_id"):
        readers[version_id].add(run_id)
    for v in versions:
        v.num_runs = len(readers[v.pk])  # type: ignore[attr-defined]  # shown beside it
    num_runs = (
        TrainingRun.objects.filter(
            Q(mixture_version__mixture=mixture) | Q(segments__mixture_version__mixture=mixture)
        )
        .distinct()
        .count()
    )
    return {"mixture": mixture, "versions": versions, "num_runs": num_runs}


def mixture_version_ids(*, mixture_id: int) -> set[int]:
    """The ids of the mixture's versions (what its page may diff)."""
    return set(MixtureVersion.objects.filter(mixture_id=mixture_id).values_list("pk", flat=True))


def mixture_version_detail(*, version_id: int, by: str = "") -> dict:
    """A version: its ``components`` (by stage and weight), its ``lineage``
    (``lineage.version_lineage``), whether it is ``tainted``, its newest 50 ``runs``
    (marked ``tainted``), its ``exports`` and whether a materialized copy is ready or under
    way, its ``schedule`` (``version_schedule``; None when not built), its ``quality``
    (``version_quality``, samples labelled by pool or by the property ``by``) and the
    ``properties`` every one of its pools has (what ``by`` may be)."""
    version = get_or_not_found(
        MixtureVersion.objects.select_related("mixture", "job", "created_by"),
        "mixture version",
        pk=version_id,
    )
    lineage = version_lineage(version=version)
    exports = list(version.exports.order_by("format", "-created_at"))
    components = lineage["components"]
    properties = version_properties(components=components)
    if by and by != "pool" and by not in properties:
        report = {
            "error": f"not every pool of this version has the property {by!r}; "
            f"choose pool or one of {', '.join(properties) or 'none'}"
        }
    else:
        report = version_quality(version=version, by=by)
    return {
        "version": version,
        "components": components,
        "lineage": lineage,
        "tainted": f"mv:{version.pk}" in lineage["tainted"],
        "runs": runs_with_taint(list(version.runs.order_by("-created_at")[:50])),
        "exports": exports,
        # One materialized copy per version: the Launch button goes once one is under way.
        "materialized": any(
            e.format == "materialized" and e.status in ("ready", "building") for e in exports
        ),
        "schedule": version_schedule(version=version, components=components),
        "quality": report,
        "properties": properties,
    }


def version_properties(*, components) -> list[str]:
    """The document properties every pool of the version has (a sample is labelled by its
    record's main document), in the first pool's order."""
    pools = list({c.pool_id: c.pool for c in components}.values())
    if not pools:
        return []
    known = pools_properties(pools)
    common = set.intersection(*(set(known[p.pk]) for p in pools))
    return [name for name in known[pools[0].pk] if name in common]


def version_schedule(*, version: MixtureVersion, components) -> dict | None:
    """The version's built schedule (its manifest): ``pools``, per pool in the manifest's
    order its catalog ``pool`` name, ``tokens`` and ``epochs``; ``stages`` (place, length
    and samples per pool); ``names``, the schedule's pool keys -> catalog names. None when
    the schedule is not built."""
    if not version.path:
        return None
    try:
        manifest = read_manifest(version.path)
    except (ManifestError, OSError):
        return None
    by_path = {storage.resolve(c.pool.path): c.pool.name for c in components}
    names = {p["key"]: by_path.get(storage.resolve(p["path"]), p["key"]) for p in manifest["pools"]}
    stages = manifest.get("stages") or []
    pools = [
        {
            "pool": names[p["key"]],
            "tokens": int(p["tokens"]),
            "epochs": float(p["epochs"]),
            "samples": int(p.get("samples") or 0),
            # Samples of the pool in each stage (the stage's ``samples_per_pool``).
            "stage_samples": {
                str(st["name"]): int(st["samples_per_pool"][i])
                for st in stages
                if i < len(st.get("samples_per_pool") or [])
            },
        }
        for i, p in enumerate(manifest["pools"])
    ]
    return {
        "pools": pools,
        "stages": stages,
        "names": names,
        "seq_len": int(manifest.get("seq_len") or 0),
    }


def version_quality(*, version: MixtureVersion, by: str = "") -> dict:
    """The version's schedule quality (``shardcore.quality.mixture_quality``), samples
    labelled by pool as its build recorded it (``params["quality"]``), or by the property
    ``by``, measured by a task the first time it is asked for and stored
    (``webapp.catalog.services.facts``): until then ``{"computing": {state, progress, since}}``;
    ``{"error": ...}`` when it cannot be measured; empty for a version not built."""
    by = "" if by == "pool" else by
    report = None if by else (version.params or {}).get("quality")
    if report is not None or not version.path or version.status != ArtifactStatus.READY:
        return report or {}
    stored = facts.fact_read("version_quality", version.pk, by)
    if "value" in stored:
        return stored["value"] or {}
    if "computing" in stored:
        return {"computing": stored["computing"]}
    return {"error": f"no quality measured: {stored.get('error', '')}"}


def mixture_version_diff(*, a_id: int, b_id: int) -> dict:
    """Two versions side by side: ``settings`` (label, a, b) and ``rows``, per (stage,
    pool), the share of its stage, the tokens and epochs each built schedule gives it in
    that stage and the ``change`` (added, removed, changed, same)."""
    a, b = (
        get_or_not_found(MixtureVersion.objects.select_related("mixture"), "mixture version", pk=pk)
        for pk in (a_id, b_id)
    )
    fa, fb = _diff_facts(a), _diff_facts(b)
    # Stages in training order (a's, then any only b has), pools by name within a stage.
    order = list(dict.fromkeys(stage_names(a) + stage_names(b)))
    rows = []
    for key in sorted(
        set(fa) | set(fb),
        key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k),
    ):
        x, y = fa.get(key), fb.get(key)
        change = (
            "added"
            if x is None
            else "removed"
            if y is None
            else (
                "changed"
                if abs(x["share"] - y["share"]) > 1e-9 or x["tokens"] != y["tokens"]
                else "same"
            )
        )
        rows.append(
            {
                "stage": key[0],
                "pool": key[1],
                "a": x,
                "b": y,
                "change": change,
                "pool_id": (x or y)["pool_id"],  # type: ignore[index]
            }
        )
    settings_rows = [
        (label, getattr(a, f), getattr(b, f))
        for label, f in (
            ("token budget", "token_budget"),
            ("samples", "num_samples"),
            ("seed", "seed"),
            ("fingerprint", "fingerprint"),
        )
    ]
    settings_rows.append(
        (
            "order",
            a.params.get("order", "blend") if a.params else "blend",
            b.params.get("order", "blend") if b.params else "blend",
        )
    )
    return {"a": a, "b": b, "rows": rows, "settings": settings_rows}


def _diff_facts(v: MixtureVersion) -> dict:
    comps = list(v.components.select_related("pool").order_by("id"))
    built = version_schedule(version=v, components=comps)
    tokens = {r["pool"]: r for r in built["pools"]} if built else {}
    first = stage_names(v)[0]
    stage_weight: dict[str, float] = {}
    for c in comps:
        stage_weight[c.stage or first] = stage_weight.get(c.stage or first, 0) + c.weight
    out = {}
    for c in comps:
        stage = c.stage or first
        row = tokens.get(c.pool.name)
        n = epochs = None
        if row is not None:
            # What the pool gives this stage, not the whole version: the stage's samples
            # of it, and that part of its epochs.
            samples = int(row["stage_samples"].get(stage, 0))
            n = samples * built["seq_len"]  # type: ignore[index]
            epochs = row["epochs"] * samples / row["samples"] if row["samples"] else 0.0
        out[(stage, c.pool.name)] = {
            "share": c.weight / (stage_weight[stage] or 1),
            "tokens": n,
            "epochs": epochs,
            "pool_id": c.pool_id,
        }
    return out


def mixture_version_document(*, version_id: int) -> dict:
    """A mixture version as a self-contained JSON document (the "JSON" export)."""
    v = get_or_not_found(
        MixtureVersion.objects.select_related("mixture"), "mixture version", pk=version_id
    )
    comps = v.components.select_related("pool").order_by("stage", "id")
    return {
        "mixture": v.mixture.name,
        "number": v.number,
        "fingerprint": v.fingerprint,
        "token_budget": v.token_budget,
        "seed": v.seed,
        "num_samples": v.num_samples,
        "status": v.status,
        "params": v.params,
        "components": [
            {
                "pool": c.pool.name,
                "pool_id": c.pool_id,
                "pool_fingerprint": c.pool.fingerprint,
                "pool_path": c.pool.path,
                "weight": c.weight,
                "stage": c.stage,
                "epochs": c.epochs,
            }
            for c in comps
        ],
    }


def export_file(*, export_id: int) -> str:
    """Where the file of a ready export is stored: a local path, or an ``s3://`` URL when
    the data root is on object storage; NotFound for anything else (a materialized copy is
    a directory of shards and is read in place, not downloaded)."""
    export = get_or_not_found(
        Export.objects.filter(status=ArtifactStatus.READY), "ready export", pk=export_id
    )
    if not stored_file_exists(export.path):
        raise NotFound(f"export {export.pk} is not a downloadable file")
    return export.path


def stored_file_exists(location: str) -> bool:
    """Whether ``location`` is a file: a local file (not a directory), or an object of its
    own on object storage (a prefix with objects below it is a directory, not a file)."""
    if not location:
        return False
    if not storage.is_remote(location):
        return os.path.isfile(location)
    url = storage.resolve(location)
    if "/" not in url.removeprefix("s3://"):
        return False  # a bucket
    parent, _, name = url.rpartition("/")
    return storage.open_store(parent).exists(name)


def builder_pools() -> list[dict]:
    """Ready training pools the builder offers, newest first, as plain facts, with
    ``epoch_tokens``: the budget that reads the pool once (a sample trains on seq_len of
    its record's seq_len + 1 tokens, so its ``num_tokens`` would be read 1.00x and then
    some, and the builder's default budget would open with a repeat warning)."""
    rows: list[dict[str, Any]] = [
        dict(r)
        for r in Pool.objects.filter(status=ArtifactStatus.READY, split=Pool.Split.TRAIN)
        .order_by("-created_at")
        .values("id", "name", "num_records", "num_tokens", "seq_len", "path")[:BUILDER_POOLS]
    ]
    for r in rows:
        r["epoch_tokens"] = r["num_records"] * r["seq_len"]
    return rows


def mixture_names(*, limit: int = 500) -> list[str]:
    return list(Mixture.objects.order_by("name").values_list("name", flat=True)[:limit])


def mixture_draft_predict(*, payload: dict) -> dict:
    """What a draft (the builder's rows, stages and settings) would build: ``{error,
    spec, rows (per pool: tokens, epochs), warnings, schedule (per stage), save_error}``.
    ``save_error`` says why it cannot be saved (a pool repeated beyond the cap: the build
    would fail); ``error`` alone when the rows do not make a spec or cannot be planned."""
    try:
        spec = builder.spec_from_draft(payload)
    except builder.BuilderError as e:
        return {"error": str(e)}
    ids = {int(r["pool"]) for r in payload.get("rows") or [] if str(r.get("pool", "")).isdigit()}
    pools = {
        p["id"]: p
        for p in Pool.objects.filter(pk__in=ids, status=ArtifactStatus.READY).values(
            "id", "name", "num_records", "seq_len", "path"
        )
    }
    result = builder.predict(spec, pools)
    if result.get("error"):
        return {"error": result["error"], "spec": spec}
    return {
        "error": None,
        "spec": spec,
        "rows": result["rows"],
        "warnings": result["warnings"],
        "schedule": result["schedule"],
        "save_error": (
            f"{', '.join(result['over_cap'])} above max_repetitions={spec['max_repetitions']:g}"
            if result["over_cap"]
            else None
        ),
    }


def version_built(version: MixtureVersion) -> bool:
    """Whether the version has a schedule on disk (versions recorded before schedules were
    built, or rows made by hand, have none)."""
    return bool(version.manifest_path) and storage.exists(version.manifest_path)

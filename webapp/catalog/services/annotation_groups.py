"""Near-duplicates across several tokenized sources: one job (stage ``annotate.neardup``,
``shardcore.annotate.neardup``) whose units sign every shard, bucket the signatures in
partitions sized to the memory budget, cluster and write; its recorder makes one
``Annotation`` per source (``minhash``, each a complete annotation the pool joins), whose
clusters span the sources. The sources' order is the priority: ``dup_rank = 0`` keeps the
copy of the earliest one.

Each per-source annotation is fingerprinted over the whole group (its clusters depend on
the other sources), so the same sources in the same order with the same parameters answer
the rows already built or building, and a group never touches another annotation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.utils import timezone

from shardcore import storage
from shardcore.annotate.artifact import plan as annotation_plan
from shardcore.annotate.neardup import GroupNearDuplicates, plan_group
from shardcore.annotate.stage import summarize
from shardcore.errors import InputError
from shardcore.manifest import MANIFEST_NAME, read_manifest
from shardcore.storage import artifact_cache
from shardcore.units import Plan
from webapp.catalog.errors import CatalogError, boundary
from webapp.catalog.models import Annotation, ArtifactStatus, TokenizedSource
from webapp.catalog.services.annotations import params_parse
from webapp.catalog.services.common import (
    artifact_dir,
    artifact_unbuilt,
    limited,
    refuse_corrupt,
)
from webapp.catalog.services.launch import launch
from webapp.jobs import recorders
from webapp.jobs.models import ACTIVE_JOB_STATES, Job

RECORDER = "annotation.groups"
ANNOTATOR = "minhash"


def _plan(paths: list[str], out: str, params: dict[str, Any]) -> dict[str, Any]:
    """The group's plan and each source's annotation fingerprint (run in the planning
    sandbox: it reads the sources' manifests)."""

    plan = plan_group(paths, out, params)
    group = GroupNearDuplicates([s["fingerprint"] for s in plan.meta["sources"]], **plan.params)
    return {
        "plan": plan,
        "annotator": group.describe(),
        "fingerprints": [
            annotation_plan(s["path"], group)["fingerprint"] for s in plan.meta["sources"]
        ],
    }


@boundary
def annotation_group_build(
    *,
    tokenized_ids: Sequence[int],
    params: dict[str, Any] | str | None = None,
    created_by=None,
) -> list[Annotation]:
    """Start one job clustering near-duplicates across the ready tokenized sources
    ``tokenized_ids`` (in priority order); returns their annotations in that order,
    BUILDING (sharing the job) or, for a group built or building already, those rows."""

    ids = [int(getattr(i, "pk", i)) for i in tokenized_ids or []]
    if len(ids) < 2:
        raise CatalogError(
            "near-duplicates across sources: choose at least two tokenized sources "
            "(one source alone is the minhash annotator)"
        )
    if len(set(ids)) != len(ids):
        raise CatalogError("near-duplicates across sources: a tokenized source is named twice")
    found = TokenizedSource.objects.select_related("source").in_bulk(ids)
    missing = [i for i in ids if i not in found]
    if missing:
        raise CatalogError(f"tokenized_sources: no tokenized source {missing[0]}")
    sources = [found[i] for i in ids]
    for ts in sources:
        if ts.status != ArtifactStatus.READY:
            raise CatalogError(f"tokenized source {ts.pk} is not built ({ts.status})")
    refuse_corrupt(sources)
    typed = params_parse(ANNOTATOR, params)
    names = "_".join(ts.source.name for ts in sources)
    out = artifact_dir("annotations", f"{names[:80]}-neardup")
    made: list[dict[str, Any]] = []

    def plan() -> Plan:
        try:
            made.append(
                limited(
                    _plan,
                    [ts.path for ts in sources],
                    out,
                    typed,
                    what=f"planning near-duplicates across tokenized sources {ids}",
                )
            )
        except (InputError, ValueError) as exc:
            raise CatalogError(f"cannot cluster near-duplicates across {ids}: {exc}") from exc
        return made[-1]["plan"]

    def create(job: Job, plan: Plan) -> list[Annotation]:
        annotator = made[-1]["annotator"]
        return [
            Annotation.objects.create(
                tokenized_source=ts,
                annotator=annotator["name"],
                annotator_version=annotator["version"],
                columns=annotator["fields"],
                params=plan.params,
                fingerprint=fp,
                num_documents=src["documents"],
                path=storage.join(out, f"sources/{i}"),
                job=job,
                created_by=created_by,
            )
            for i, (ts, fp, src) in enumerate(
                zip(sources, made[-1]["fingerprints"], plan.meta["sources"], strict=True)
            )
        ]

    # The same group is known by its annotations' fingerprints, which the plan computes.
    return launch(
        lock=lambda: list(
            TokenizedSource.objects.select_for_update().filter(pk__in=ids).order_by("pk")
        ),
        running=lambda: _same(sources, made[-1]["fingerprints"]) if made else None,
        plan=plan,
        create=create,
        title=f"near-duplicates across {', '.join(f'{t.source.name} (#{t.pk})' for t in sources)}",
        recorder=RECORDER,
        created_by=created_by,
    )


def _same(sources: list[TokenizedSource], fingerprints: list[str]) -> list[Annotation] | None:
    """The group's annotations when every one of them is built, or all come from one job
    still running; None otherwise (the group is built again, into a new directory)."""

    rows = []
    for ts, fp in zip(sources, fingerprints, strict=True):
        candidates = Annotation.objects.filter(tokenized_source=ts, fingerprint=fp)
        ready = candidates.filter(status=ArtifactStatus.READY).order_by("-pk").first()
        rows.append(ready)
    ready_rows = [r for r in rows if r is not None]
    if len(ready_rows) == len(rows):
        return ready_rows
    building = (
        Annotation.objects.filter(
            tokenized_source=sources[0],
            fingerprint=fingerprints[0],
            status=ArtifactStatus.BUILDING,
            job__state__in=ACTIVE_JOB_STATES,
        )
        .order_by("-pk")
        .first()
    )
    if building is None:
        return None
    siblings = {a.tokenized_source_id: a for a in Annotation.objects.filter(job=building.job)}
    return [siblings[ts.pk] for ts in sources] if len(siblings) == len(sources) else None


@recorders.register(RECORDER)
def annotation_group_record(*, job, manifest: dict | None) -> None:
    """Recorder of near-duplicate group jobs: each source's annotation READY with its own
    manifest's counts and its chart summary, or all of them failed/cancelled."""

    rows = list(Annotation.objects.select_for_update().filter(job=job).order_by("pk"))
    if manifest is None:
        for ann in rows:
            artifact_unbuilt(ann, job=job)
        return
    listed = {s["annotation_fingerprint"]: s for s in manifest["sources"]}
    for ann in rows:
        if ann.fingerprint not in listed:
            raise CatalogError(
                f"annotation {ann.pk}: the group's manifest lists no annotation {ann.fingerprint}"
            )
        local = artifact_cache.local_artifact(ann.path) if storage.is_remote(ann.path) else ann.path
        m = read_manifest(local)
        ann.num_documents = m["totals"]["documents"]
        ann.num_bytes = m["totals"]["bytes"]
        ann.manifest_path = storage.join(ann.path, MANIFEST_NAME)
        ann.summary = {
            **summarize(ann.path),
            "group": {
                "fingerprint": manifest["fingerprint"],
                "sources": len(manifest["sources"]),
                "documents": manifest["totals"]["documents"],
                "clustered_documents": manifest["totals"]["clustered_documents"],
                "partitions": manifest["partitions"],
            },
        }
        ann.status = ArtifactStatus.READY
        ann.finished_at = timezone.now()
        ann.save()

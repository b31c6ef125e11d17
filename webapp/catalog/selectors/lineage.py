"""Lineage as a graph: run -> mixture version -> pools -> tokenized sources -> sources,
each node marked when a flag taints it. The version and run pages draw it
(``charts.lineage_graph``); the audit reads it the other way (``audit``)."""

from __future__ import annotations

from django.db.models import Prefetch, Q

from webapp.catalog.models import (
    Flag,
    MixtureComponent,
    MixtureVersion,
    Taint,
    TokenizedSource,
    TrainingRun,
)
from webapp.catalog.selectors.common import get_or_not_found


def stage_names(v: MixtureVersion) -> list[str]:
    """The version's stages in training order, from its spec: the first stage ("main", or
    the stage a run was in when it switched to this version, e.g. "anneal"), then the
    later ones."""
    spec = (v.params or {}).get("spec") or {}
    return [str(spec.get("first_stage") or "main")] + [
        str(st.get("name")) for st in spec.get("stages") or []
    ]


def version_lineage(*, version: MixtureVersion, run: TrainingRun | None = None) -> dict:
    """``{nodes, edges, components, pools, tokenized, sources, tainted}``: each node is
    ``{id, kind, ref, label, tainted}`` where ``ref`` is the id of the entity of that kind
    (``webapp.links.page_url(kind, ref)`` shows it); edges are (from id, to id); ``tainted``
    is the set of tainted node ids; ``components`` are the version's, by stage and weight;
    ``sources`` by name. Five queries however large the graph."""
    comps = list(
        MixtureComponent.objects.filter(version=version)
        .select_related("pool")
        .prefetch_related(
            Prefetch(
                "pool__parents",
                queryset=TokenizedSource.objects.select_related("source", "tokenizer").only(
                    "id", "source__id", "source__name", "tokenizer__spec"
                ),
            )
        )
        .order_by("stage", "-weight")
    )
    # In schedule order: the first stage ("main", or the stage a switched run was in), then
    # the later stages as the version runs them.
    order = stage_names(version)
    comps.sort(
        key=lambda c: (
            0
            if c.stage in ("", order[0])
            else order.index(c.stage)
            if c.stage in order
            else len(order),
            -c.weight,
        )
    )
    pools = {c.pool_id: c.pool for c in comps}
    tokenized = {ts.pk: ts for p in pools.values() for ts in p.parents.all()}
    sources = {ts.source_id: ts.source for ts in tokenized.values()}
    cond = (
        Q(mixture_version=version)
        | Q(pool_id__in=list(pools))
        | Q(tokenized_source_id__in=list(tokenized))
    )
    if run is not None:
        cond |= Q(run=run)
    tainted = set()
    for run_id, mv_id, pool_id, ts_id in Taint.objects.filter(cond).values_list(
        "run_id", "mixture_version_id", "pool_id", "tokenized_source_id"
    ):
        if run_id:
            tainted.add(f"run:{run_id}")
        if mv_id:
            tainted.add(f"mv:{mv_id}")
        if pool_id:
            tainted.add(f"pool:{pool_id}")
        if ts_id:
            tainted.add(f"ts:{ts_id}")
    tainted |= {
        f"src:{sid}"
        for sid in Flag.objects.filter(source_id__in=list(sources))
        .values_list("source_id", flat=True)
        .distinct()
    }
    nodes, edges = [], []
    mv_id = f"mv:{version.pk}"
    if run is not None:
        nodes.append({"id": f"run:{run.pk}", "kind": "run", "ref": run.pk, "label": run.name})
        edges.append((f"run:{run.pk}", mv_id))
    nodes.append({"id": mv_id, "kind": "mixture_version", "ref": version.pk, "label": str(version)})
    edges += [(mv_id, f"pool:{c.pool_id}") for c in comps]
    for p in pools.values():
        nodes.append({"id": f"pool:{p.pk}", "kind": "pool", "ref": p.pk, "label": p.name})
        edges += [(f"pool:{p.pk}", f"ts:{ts.pk}") for ts in p.parents.all()]
    for ts in tokenized.values():
        nodes.append(
            {
                "id": f"ts:{ts.pk}",
                "kind": "tokenized_source",
                "ref": ts.pk,
                "label": f"{ts.source.name} · {ts.tokenizer.spec}",
            }
        )
        edges.append((f"ts:{ts.pk}", f"src:{ts.source_id}"))
    for s in sources.values():
        nodes.append({"id": f"src:{s.pk}", "kind": "source", "ref": s.pk, "label": s.name})
    for n in nodes:
        n["tainted"] = n["id"] in tainted
    return {
        "nodes": nodes,
        "edges": edges,
        "components": comps,
        "pools": list(pools.values()),
        "tokenized": list(tokenized.values()),
        "sources": sorted(sources.values(), key=lambda s: s.name),
        "tainted": tainted,
    }


def run_lineage(*, run_id: int) -> dict:
    """``version_lineage`` of a run (``run`` added): which sources fed it. Six queries."""
    run = get_or_not_found(
        TrainingRun.objects.select_related("mixture_version__mixture"), "run", pk=run_id
    )
    return {"run": run, **version_lineage(version=run.mixture_version, run=run)}

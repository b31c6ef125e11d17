"""The contamination audit: from a benchmark (or one of its items) to the documents that
overlap it (``decon`` annotations), the pools, mixture versions and runs holding them and
each run's first step reading one; from a run to the benchmark items it could have seen.

It runs along the flag machinery: the documents of a decon annotation overlapping a
benchmark become a flag (``services.decon.decon_flag``), whose taint (pools, versions,
copies, runs) and first reads (per run, the first sample holding one and the step that
read it) are computed by the flag's tasks. Which items each pool holds is a fact computed
by a task (``decon_pool_items``: the annotation's overlapping documents the pool's
documents table holds), so that no request reads an annotation or a pool."""

from __future__ import annotations

from typing import Any

from webapp.catalog.measures.decon import benchmarks_of
from webapp.catalog.models import (
    Annotation,
    ArtifactStatus,
    Flag,
    Pool,
    RunEvaluation,
    RunSegment,
    Taint,
    TrainingRun,
)
from webapp.catalog.selectors import facts
from webapp.catalog.selectors.common import NotFound
from webapp.catalog.selectors.flags import (
    flag_documents_page,
    flag_read_text,
    taint_describe,
    taint_read_row,
    taints_with_targets,
)

ANNOTATOR = "decon"


def decon_annotations() -> list[Annotation]:
    """The ready decon annotations, newest first, with their sources."""
    return list(
        Annotation.objects.filter(annotator=ANNOTATOR, status=ArtifactStatus.READY)
        .select_related("tokenized_source__source")
        .order_by("-created_at")
    )


def decon_benchmarks() -> list[dict]:
    """Every benchmark some ready decon annotation checked documents against: ``name``,
    per annotation its source, items, documents overlapping and items hit, and the
    contamination flags of the benchmark (whole, not per item)."""
    out: dict[str, dict] = {}
    for ann in decon_annotations():
        for b in benchmarks_of(ann):
            row = out.setdefault(b["name"], {"name": b["name"], "annotations": [], "documents": 0})
            row["annotations"].append({"annotation": ann, **b})
            row["documents"] += int(b.get("documents", 0))
    flags = Flag.objects.filter(benchmark__in=list(out), benchmark_item="")
    for f in flags.order_by("pk"):
        out[f.benchmark].setdefault("flags", []).append(f)
    return sorted(out.values(), key=lambda r: r["name"])


def decon_benchmark(*, benchmark: str, item: str = "") -> dict:
    """The audit of ``benchmark`` (or its ``item``): per decon annotation that checked
    documents against it, the source, how many documents overlap it (for one item: as the
    annotation's summary lists it, or its flag counts), its contamination flag if any, with
    a page of the documents it names; and over every such flag the pools, mixture versions
    and runs it taints, each run with its first step reading one (``first_read``).
    NotFound when no ready decon annotation knows the benchmark."""
    per_ann = []
    for ann in decon_annotations():
        for b in benchmarks_of(ann):
            if b["name"] != benchmark:
                continue
            flag = (
                Flag.objects.filter(annotation=ann, benchmark=benchmark, benchmark_item=item)
                .order_by("-pk")
                .first()
            )
            documents: int | None = int(b.get("documents", 0))
            if item:
                listed = dict((str(i), int(c)) for i, c in b.get("top_items") or [])
                documents = listed.get(item)
                if documents is None and flag is not None:
                    documents = flag.num_documents
                if documents is None and len(listed) < int(b.get("items_hit", 0)):
                    documents = None  # past the summary's list: the flag counts them
                elif documents is None:
                    documents = 0
            row: dict[str, Any] = {
                "annotation": ann,
                "source": ann.tokenized_source.source,
                "benchmark": b,
                "documents": documents,
                "flag": flag,
            }
            if flag is not None:
                row["document_ids"] = flag_documents_page(flag=flag, limit=50)["document_ids"]
                row["taint"] = facts.flag_taint_read(flag)
            per_ann.append(row)
    if not per_ann:
        raise NotFound(f"no decon annotation checked documents against benchmark {benchmark!r}")
    flags = [r["flag"] for r in per_ann if r["flag"] is not None]
    taints = list(
        Taint.objects.filter(flag__in=flags).select_related("run", "flag").order_by("flag_id", "id")
    )
    taints_with_targets(taints)
    pools: dict[int, dict] = {}
    versions: dict[int, dict] = {}
    runs: dict[int, dict] = {}
    for t in taints:
        d = taint_describe(t)
        if t.pool_id:
            _add(pools, t.pool_id, d)
        elif t.mixture_version_id:
            _add(versions, t.mixture_version_id, d)
        elif t.run_id:
            read = taint_read_row(t, flag=t.flag)
            d.update(read=read, first_read=flag_read_text(read), run=t.run)
            prev = runs.get(t.run_id)
            if prev is None or _earlier(read, prev["read"]):
                runs[t.run_id] = d
    total: int | None = 0
    for r in per_ann:
        total = None if total is None or r["documents"] is None else total + r["documents"]
    return {
        "benchmark": benchmark,
        "item": item,
        "annotations": per_ann,
        "documents": total,
        "flagged": bool(flags),
        "complete": all(f.taint_state == Flag.TaintState.READY for f in flags)
        and all(f.reads_done >= f.reads_total for f in flags),
        "pools": list(pools.values()),
        "versions": list(versions.values()),
        "runs": list(runs.values()),
    }


def _add(into: dict, key: int, d: dict) -> None:
    if key in into:
        into[key]["documents"] += d["documents"]
    else:
        into[key] = dict(d)


def _earlier(a: dict, b: dict) -> bool:
    """Whether first read ``a`` comes before ``b`` (one that never read, or is still
    computed, comes last)."""
    fa, fb = a.get("first_sample"), b.get("first_sample")
    if fa is None:
        return False
    return fb is None or fa < fb


def _pool_decon(pool: Pool, *, request: bool = True) -> list[dict]:
    """Per decon annotation of the pool's inputs: its ``decon_pool_items`` fact as read."""
    anns = Annotation.objects.filter(
        annotator=ANNOTATOR, status=ArtifactStatus.READY, tokenized_source__in=pool.parents.all()
    ).order_by("pk")
    return [
        {
            "annotation": a,
            **facts.fact_read("decon_pool_items", pool.pk, str(a.pk), request=request),
        }
        for a in anns
    ]


def pool_decon(*, pool: Pool) -> dict | None:
    """For a pool whose inputs have decon annotations: per annotation, per benchmark, the
    overlapping documents of its source, those the pool holds and those its filter
    removed (a pool built with ``decon.items = 0`` removed them all); None without any."""
    rows = _pool_decon(pool)
    if not rows:
        return None
    return {"joined": "decon" in (pool.filter or ""), "annotations": rows}


def run_decon(*, run: TrainingRun) -> dict:
    """Which benchmark items ``run`` could have seen, by benchmark: the items of the
    overlapping documents the pools of the versions it read hold (``items``, ``count``),
    the pools holding them, and when it first read one (from the benchmark's contamination
    flags' taint of the run: ``first_read``; ``flagged`` False until one is recorded);
    ``computing`` while a pool's items are measured. Its evaluations, each marked
    ``possibly_contaminated`` when the run could have seen an item of its benchmark."""
    version_ids = {run.mixture_version_id} | set(
        RunSegment.objects.filter(run=run).values_list("mixture_version_id", flat=True)
    )
    pools = list(
        Pool.objects.filter(components__version__in=version_ids)
        .distinct()
        .prefetch_related("parents")
        .order_by("pk")
    )
    by_bench: dict[str, dict[str, Any]] = {}
    computing = False
    for pool in pools:
        for row in _pool_decon(pool):
            value = row.get("value")
            if value is None:
                computing = computing or "computing" in row
                continue
            for b in value["benchmarks"]:
                if not b["held"]:
                    continue
                e = by_bench.setdefault(
                    b["name"],
                    {
                        "benchmark": b["name"],
                        "items": set(),
                        "count": 0,
                        "documents": 0,
                        "pools": [],
                        "truncated": False,
                    },
                )
                e["items"].update(b["items"])
                e["truncated"] = e["truncated"] or b["items_held"] > len(b["items"])
                e["documents"] += b["held"]
                e["pools"].append(pool)
    # Per benchmark, the run's earliest first read over its contamination flags (one per
    # source annotated against it).
    reads: dict[str, tuple[Taint, dict]] = {}
    for t in (
        Taint.objects.filter(run=run, flag__benchmark__in=list(by_bench) or [""])
        .filter(flag__benchmark_item="")
        .select_related("flag", "run")
        .order_by("flag_id")
    ):
        read = taint_read_row(t, flag=t.flag)
        prev = reads.get(t.flag.benchmark)
        if prev is None or _earlier(read, prev[1]):
            reads[t.flag.benchmark] = (t, read)
    out = []
    for name in sorted(by_bench):
        e = by_bench[name]
        items = sorted(e.pop("items"))
        e["count"] = len(items)
        e["items"] = items
        if name in reads:
            t, read = reads[name]
            e.update(flagged=True, flag=t.flag, first_read=flag_read_text(read), read=read)
        else:
            flagged = Flag.objects.filter(benchmark=name, benchmark_item="").exists()
            e.update(
                flagged=flagged,
                flag=None,
                first_read="never: no sample it reads holds one"
                if flagged
                else "not flagged yet: flag the benchmark's documents to find the step",
            )
        out.append(e)
    seen = {e["benchmark"] for e in out}
    evaluations = [
        {
            "benchmark": ev.benchmark,
            "metric": ev.metric,
            "step": ev.step,
            "value": ev.value,
            "possibly_contaminated": ev.benchmark in seen,
        }
        for ev in RunEvaluation.objects.filter(run=run).order_by("benchmark", "metric", "step")
    ]
    return {"run": run, "benchmarks": out, "computing": computing, "evaluations": evaluations}

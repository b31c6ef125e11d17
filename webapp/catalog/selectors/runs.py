"""Training runs: a page of runs, a run with its progress, stage starts and lineage, its
losses beside other runs of the same mixture, and its progress reports."""

from __future__ import annotations

from django.db.models import Count

from shardcore.errors import ShardcoreError
from shardcore.lineage import step_of_sample
from shardcore.manifest import read_manifest
from webapp.catalog.models import RunLoss, RunProgress, TrainingRun
from webapp.catalog.selectors.common import get_or_not_found
from webapp.catalog.selectors.lineage import version_lineage
from webapp.paging import paged

PROGRESS_POINTS = 2000
OVERLAY_RUNS = 4
LOSS_POINTS = 5000


def run_list(*, offset: int = 0, limit: int = 50) -> list[TrainingRun]:
    """A slice of runs, newest first, with their mixture version and how many taints each
    has (``num_taints``): one query."""
    return list(
        TrainingRun.objects.select_related("mixture_version__mixture")
        .annotate(num_taints=Count("taints"))
        .order_by("-created_at")[offset : offset + limit]
    )


def run_page(*, page=1) -> dict:
    """A page of ``run_list`` (``common.paged``), each run marked ``tainted``."""
    out = paged(lambda offset, limit: run_list(offset=offset, limit=limit), page)
    for r in out["rows"]:
        r.tainted = r.num_taints > 0
    return out


def run_detail(*, run_id: int) -> dict:
    """A run: its version, its newest PROGRESS_POINTS reports in step order (``progress``:
    step, consumed samples and tokens, when), where each later stage starts
    (``run_stages``), its lineage (``lineage.version_lineage``) and whether it is tainted."""
    run = get_or_not_found(
        TrainingRun.objects.select_related("mixture_version__mixture", "created_by"),
        "run",
        pk=run_id,
    )
    # The newest reports, in step order; the (run, step) index serves both.
    progress = list(
        RunProgress.objects.filter(run=run)
        .order_by("-step")
        .values("step", "consumed_samples", "consumed_tokens", "reported_at")[:PROGRESS_POINTS]
    )[::-1]
    lineage = version_lineage(version=run.mixture_version, run=run)
    return {
        "run": run,
        "version": run.mixture_version,
        "progress": progress,
        "stages": run_stages(run=run),
        "lineage": lineage,
        "tainted": f"run:{run.pk}" in lineage["tainted"],
    }


def run_stages(*, run: TrainingRun) -> list[dict]:
    """Where each stage after the first starts, from the version's built schedule:
    ``name``, its first ``sample`` and its start in ``tokens``; ``step``, the step at
    which the run reached it (exact when the samples per step are constant between the
    two progress reports around it), and ``first_report_step``, the first report that had
    consumed it (both None before the run got there). Empty when not built."""
    try:
        manifest = read_manifest(run.mixture_version.path)
    except (ShardcoreError, OSError, ValueError):
        return []
    stages = (manifest.get("stages") or [])[1:]
    if not stages:
        return []
    seq_len = int(manifest.get("seq_len") or 0)
    reports = run_progress_reports(run=run)
    out = []
    for st in stages:
        first = int(st["first_sample"])
        read = step_of_sample(first, reports)
        past = [step for step, consumed in reports if consumed >= first]
        out.append(
            {
                "name": str(st["name"]),
                "sample": first,
                "tokens": first * seq_len,
                "step": read["step"] if read["read"] else None,
                "first_report_step": min(past) if past else None,
            }
        )
    return out


def run_losses(*, run: TrainingRun, overlay: bool = True) -> dict:
    """The run's reported losses and, with ``overlay``, those of up to OVERLAY_RUNS other
    runs of the same mixture (any version): ``runs`` (the run first), ``rows`` (run id,
    split, series, pool name, source, step, loss, consumed tokens; by run, split, series
    and step; at most LOSS_POINTS per run) and ``references``, the (id, name) of the
    runs with validation losses a proposal can compare against."""
    same_mixture = TrainingRun.objects.filter(
        mixture_version__mixture_id=run.mixture_version.mixture_id
    ).exclude(pk=run.pk)
    runs = [run]
    if overlay:
        runs += list(
            same_mixture.filter(losses__isnull=False)
            .distinct()
            .order_by("-created_at")[:OVERLAY_RUNS]
        )
    rows = list(
        RunLoss.objects.filter(run__in=runs)
        .select_related("pool")
        .order_by("run_id", "split", "series", "step")
        .values_list("run_id", "split", "series", "pool__name", "source", "step", "loss",
                     "consumed_tokens")[: LOSS_POINTS * len(runs)]
    )  # fmt: skip
    references = [
        (r.pk, r.name)
        for r in same_mixture.filter(losses__split="val").distinct().order_by("name")[:50]
    ]
    return {"runs": runs, "rows": rows, "references": references}


def run_progress_reports(*, run: TrainingRun) -> list[tuple[int, int]]:
    """Every progress report of ``run`` as (step, consumed samples)."""
    return progress_reports([run]).get(run.pk, [])


def progress_reports(runs: list[TrainingRun]) -> dict[int, list[tuple[int, int]]]:
    """Per run, its progress reports as (step, consumed samples): one query for all."""
    out: dict[int, list[tuple[int, int]]] = {}
    if not runs:
        return out
    rows = RunProgress.objects.filter(run_id__in=[r.pk for r in runs]).values_list(
        "run_id", "step", "consumed_samples"
    )
    for run_id, step, consumed in rows:
        out.setdefault(run_id, []).append((step, consumed))
    for r in runs:  # a run whose reports were pruned still has its latest position
        if r.consumed_samples and r.pk not in out:
            out[r.pk] = [(r.last_step, r.consumed_samples)]
    return out

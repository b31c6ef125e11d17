"""Page contexts: the catalog's read model (``webapp.catalog.selectors``), the jobs' and
the workers' reads, turned into what each template shows, with links and charts
(``webapp.dashboard.charts``); and the users page. Each runs a bounded number of queries."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Prefetch

from webapp.catalog import selectors as catalog
from webapp.catalog.selectors import (
    TAINT_TARGETS,
    NotFound,
    flag_recent,
    page_of,
    paged,
    runs_with_taint,
)
from webapp.links import page_url
from webapp.roles import ROLES, role_from_groups

__all__ = ["flag_recent"]  # the audit page's list, read as the catalog gives it


def user_list() -> list[dict]:
    """Every user with their role and token, in two queries."""
    from django.contrib.auth.models import Group

    User = get_user_model()
    users = (
        User.objects.order_by("username")
        .select_related("auth_token")
        .prefetch_related(
            Prefetch("groups", queryset=Group.objects.filter(name__in=ROLES), to_attr="roles")
        )
    )
    out = []
    for u in users:
        role = role_from_groups([g.name for g in u.roles], is_superuser=u.is_superuser)
        token = getattr(u, "auth_token", None)
        out.append({"user": u, "role": role, "token_created": token.created if token else None})
    return out


def overview() -> dict:
    """Everything the overview page shows."""
    from webapp.ops.selectors import heartbeat_recent, workers_live

    return {
        "workers": workers_live(),
        "heartbeats": list(heartbeat_recent(limit=10)),
        **overview_catalog(),
    }


# --- catalog and jobs reads for the pages ---------------------------------------------
# Lists are paginated by keyset-free LIMIT/OFFSET (``catalog.page_of``): pages hold at
# most PAGE_SIZE rows and every list query is ordered by an indexed column.


def overview_catalog() -> dict:
    """Counts from ``webapp.catalog.selectors.overview_counts`` (plus mixtures and tainted
    runs), the running jobs, recent runs and the newest taints."""
    from django.urls import reverse

    from webapp.catalog.models import Mixture, Taint, TrainingRun
    from webapp.catalog.selectors import overview_counts, tainted_runs
    from webapp.jobs.models import ACTIVE_JOB_STATES, Job

    running = (
        Job.objects.filter(state__in=ACTIVE_JOB_STATES)
        .defer("plan", "bad_input", "log_tail")
        .order_by("-created_at")[:10]
    )
    runs = TrainingRun.objects.select_related("mixture_version__mixture").order_by("-created_at")
    taints = Taint.objects.select_related(*TAINT_TARGETS).order_by("-created_at")[:20]
    n = overview_counts()
    return {
        "counts": [
            ("sources", n["sources"], reverse("dashboard:sources")),
            ("ready pools", n["pools"], reverse("dashboard:pools")),
            ("mixtures", Mixture.objects.count(), reverse("dashboard:mixtures")),
            ("mixture versions", n["mixture_versions"], reverse("dashboard:mixtures")),
            ("active jobs", n["active_jobs"], reverse("dashboard:jobs") + "?state=running"),
            ("training runs", n["runs"], reverse("dashboard:runs")),
            ("tainted runs", tainted_runs().count(), reverse("dashboard:audit")),
            ("flags", n["flags"], reverse("dashboard:audit")),
        ],
        "running_jobs": list(running),
        "recent_runs": runs_with_taint(list(runs[:10])),
        "tainted": [taint_row(t) for t in taints],
    }


def taint_row(t) -> dict:
    """A taint as the catalog describes it, with the link to the page that shows it."""
    row = catalog.taint_describe(t)
    return {**row, "url": page_url(row["kind"], row["id"])}


def mixture_page(*, page: int = 1) -> dict:
    from django.db.models import Count, Max

    from webapp.catalog.models import Mixture

    qs = Mixture.objects.annotate(
        num_versions=Count("versions"), latest=Max("versions__number")
    ).order_by("name")
    return page_of(qs, page)


def job_page(*, state: str = "", page: int = 1) -> dict:
    from webapp.jobs.models import ACTIVE_JOB_STATES, Job, JobState

    qs = Job.objects.defer("plan", "bad_input", "log_tail").order_by("-created_at")
    if state == "running":
        qs = qs.filter(state__in=ACTIVE_JOB_STATES)
    elif state in JobState.values:
        qs = qs.filter(state=state)
    return {**page_of(qs, page), "state": state, "states": ["running", *JobState.values]}


def run_page(*, page: int = 1) -> dict:
    """A page of ``webapp.catalog.selectors.run_list`` (runs with their version and taint
    count, one query)."""
    from webapp.catalog.selectors import run_list

    out = paged(lambda offset, limit: run_list(offset=offset, limit=limit), page)
    for r in out["rows"]:
        r.tainted = r.num_taints > 0
    return out


UNITS_SHOWN = 200


def job_detail(*, job_id: int) -> dict:
    """The job page: ``webapp.jobs.selectors.job_detail`` (the job, unit counts by state,
    the first units in plan order, failed units: four queries) shaped for the template."""
    from django.http import Http404

    from webapp.dashboard import charts
    from webapp.jobs import selectors as jobs
    from webapp.jobs.models import Job, UnitState

    try:
        detail = jobs.job_detail(job_id=job_id, units_limit=UNITS_SHOWN)
    except Job.DoesNotExist:
        raise Http404(f"no job {job_id}") from None
    job = detail.job
    eta = job.eta
    return {
        "job": job,
        "unit_counts": {s: detail.unit_states.get(s, 0) for s in UnitState.values},
        "units": detail.units,
        "units_truncated": job.units_total > len(detail.units),
        "failed_units": detail.failed_units,
        "eta_seconds": eta.total_seconds() if eta is not None else None,
        "timeline_figure": charts.unit_timeline(_timeline_rows(detail.units)),
    }


def _timeline_rows(units) -> list[dict]:
    from django.utils import timezone

    now = timezone.now().isoformat()
    return [
        {
            "unit": u.unit_id,
            "worker": u.worker,
            "state": u.state,
            "start": u.started_at.isoformat() if u.started_at else None,
            "end": u.finished_at.isoformat() if u.finished_at else None,
            "now": now,
        }
        for u in units
    ]


def job_progress_json(*, job_id: int) -> dict:
    """The JSON document the job page polls (plain types only)."""
    from django.utils import timezone

    from webapp.jobs.models import UnitState

    p = job_detail(job_id=job_id)
    job = p["job"]
    now = timezone.now()
    return {
        "id": job.pk,
        "state": job.state,
        "is_active": job.is_active,
        "units_done": job.units_done,
        "units_total": job.units_total,
        "progress": job.progress,
        "documents": job.documents,
        "tokens": job.tokens,
        "bytes": job.bytes,
        "bad_lines": job.bad_lines,
        "tokens_per_second": job.tokens_per_second,
        "bytes_per_second": job.bytes_per_second,
        "eta_seconds": p["eta_seconds"],
        "error": job.error,
        "log_tail": job.log_tail,
        "unit_counts": p["unit_counts"],
        "units": [
            {
                "unit_id": u.unit_id,
                "phase": u.phase,
                "state": u.state,
                "attempts": u.attempts,
                "worker": u.worker,
                "heartbeat_age": (
                    round((now - u.heartbeat_at).total_seconds())
                    if u.state == UnitState.RUNNING and u.heartbeat_at
                    else None
                ),
                "last_event": u.last_event,
                "error": u.error[:500],
            }
            for u in p["units"]
        ],
        "failed_units": [
            {"unit_id": u.unit_id, "phase": u.phase, "error": u.error[:2000]}
            for u in p["failed_units"]
        ],
    }


# --- lineage ----------------------------------------------------------------------------


def version_lineage(*, version, run=None) -> dict:
    """Nodes and edges run -> mixture version -> pools -> tokenized sources -> sources, with
    taint marked, for charts.lineage_graph. Five queries however large the graph."""
    from django.db.models import Prefetch, Q
    from django.urls import reverse

    from webapp.catalog.models import Flag, MixtureComponent, Taint, TokenizedSource

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
    taints = list(
        Taint.objects.filter(cond).values_list(
            "run_id", "mixture_version_id", "pool_id", "tokenized_source_id"
        )
    )
    tainted = set()
    for run_id, mv_id, pool_id, ts_id in taints:
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
        nodes.append(
            {
                "id": f"run:{run.pk}",
                "kind": "run",
                "label": run.name,
                "url": reverse("dashboard:run", args=[run.pk]),
            }
        )
        edges.append((f"run:{run.pk}", mv_id))
    nodes.append(
        {
            "id": mv_id,
            "kind": "mixture_version",
            "label": str(version),
            "url": reverse("dashboard:mixture_version", args=[version.pk]),
        }
    )
    for c in comps:
        edges.append((mv_id, f"pool:{c.pool_id}"))
    for p in pools.values():
        nodes.append(
            {
                "id": f"pool:{p.pk}",
                "kind": "pool",
                "label": p.name,
                "url": reverse("dashboard:pool", args=[p.pk]),
            }
        )
        edges += [(f"pool:{p.pk}", f"ts:{ts.pk}") for ts in p.parents.all()]
    for ts in tokenized.values():
        nodes.append(
            {
                "id": f"ts:{ts.pk}",
                "kind": "tokenized_source",
                "label": f"{ts.source.name} · {ts.tokenizer.spec}",
            }
        )
        edges.append((f"ts:{ts.pk}", f"src:{ts.source_id}"))
    for s in sources.values():
        nodes.append(
            {
                "id": f"src:{s.pk}",
                "kind": "source",
                "label": s.name,
                "url": reverse("dashboard:source", args=[s.pk]),
            }
        )
    for n in nodes:
        n["tainted"] = n["id"] in tainted
    return {"nodes": nodes, "edges": edges, "components": comps, "tainted": tainted}


# --- runs -------------------------------------------------------------------------------

PROGRESS_POINTS = 2000


def run_detail(*, run_id: int) -> dict:
    from django.shortcuts import get_object_or_404

    from webapp.catalog.models import RunProgress, TrainingRun
    from webapp.dashboard import charts

    run = get_object_or_404(
        TrainingRun.objects.select_related("mixture_version__mixture", "created_by"), pk=run_id
    )
    # The newest reports, charted in step order; the (run, step) index serves both.
    points = list(
        RunProgress.objects.filter(run=run)
        .order_by("-step")
        .values("step", "consumed_samples", "consumed_tokens", "reported_at")[:PROGRESS_POINTS]
    )[::-1]
    lineage = version_lineage(version=run.mixture_version, run=run)
    return {
        "run": run,
        "version": run.mixture_version,
        "progress_figure": charts.progress_by_step(
            [
                {
                    "at": p["reported_at"].isoformat(),
                    "tokens": p["consumed_tokens"],
                    "step": p["step"],
                }
                for p in points
            ],
            stages=_progress_stages(run),
            total_tokens=run.mixture_version.token_budget,
        ),
        "lineage_figure": charts.lineage_graph(lineage["nodes"], lineage["edges"]),
        "tainted": f"run:{run.pk}" in lineage["tainted"],
        "num_reports": len(points),
        "flag_reads": [*catalog.run_flag_reads(run=run)],
        "segments": catalog.run_segment_rows(run=run),
        **_resume_context(run),
        **run_losses(run=run),
    }


OVERLAY_RUNS = 4
LOSS_POINTS = 5000
EPOCH_MARKS = 40  # a pool read many times would hide the curves behind its lines


def run_losses(*, run, overlay: bool = True) -> dict:
    """The run's loss charts: validation loss per pool (and per source) against step and
    against tokens, training loss against step, with the mixture's stage starts marked;
    with ``overlay``, up to OVERLAY_RUNS other runs of the same mixture (any version)
    dashed, in the same colour per pool or source."""
    from webapp.catalog.models import RunLoss, TrainingRun
    from webapp.dashboard import charts

    runs = [run]
    if overlay:
        runs += list(
            TrainingRun.objects.filter(
                mixture_version__mixture_id=run.mixture_version.mixture_id, losses__isnull=False
            )
            .exclude(pk=run.pk)
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
    names = {r.pk: r.name for r in runs}
    keys = sorted({(split, series) for _, split, series, *_ in rows})
    colour = {k: i for i, k in enumerate(keys)}
    curves: dict[tuple, dict] = {}
    for run_id, split, series, pool, source, step, loss, tokens in rows:
        c = curves.setdefault(
            (run_id, split, series),
            {"label": "training loss" if split == "train" else pool + (f" / {source}" if source else ""),
             "steps": [], "tokens": [], "loss": [], "loss_t": []},
        )  # fmt: skip
        c["steps"].append(step)
        c["loss"].append(loss)
        if tokens is not None:
            c["tokens"].append(tokens)
            c["loss_t"].append(loss)

    def series_for(split: str, by: str) -> list[dict]:
        out = []
        for (run_id, sp, key), c in curves.items():
            if sp != split:
                continue
            mine = run_id == run.pk
            out.append(
                {
                    "name": c["label"] if mine else f"{names[run_id]}: {c['label']}",
                    "x": c["steps"] if by == "step" else c["tokens"],
                    "y": c["loss"] if by == "step" else c["loss_t"],
                    "colour": colour[(sp, key)],
                    "dash": not mine,
                }
            )
        return out

    marks = catalog.run_loss_marks(run=run)
    stages = marks["stages"]
    # A pool's epoch starts, in its validation curve's colour (up to EPOCH_MARKS of them).
    epochs = [
        {**e, "colour": colour[("val", f"pool:{e['pool']}")]}
        for e in marks["epochs"]
        if ("val", f"pool:{e['pool']}") in colour
    ][:EPOCH_MARKS]
    return {
        "val_step_figure": charts.loss_curves(
            series_for("val", "step"),
            x_title="step",
            boundaries=[
                {"x": b["step"], "label": b["label"], "colour": b.get("colour")}
                for b in stages + epochs
                if b["step"]
            ],  # fmt: skip
            title="Validation loss per pool / source, by step",
        ),
        "val_tokens_figure": charts.loss_curves(
            series_for("val", "tokens"),
            x_title="tokens",
            boundaries=[
                {"x": b["tokens"], "label": b["label"], "colour": b.get("colour")}
                for b in stages + epochs
            ],  # fmt: skip
            title="Validation loss per pool / source, by tokens consumed",
        ),
        "train_figure": charts.loss_curves(
            series_for("train", "step"),
            x_title="step",
            boundaries=[{"x": b["step"], "label": b["label"]} for b in stages if b["step"]],
            title="Training loss",
            empty="no training loss reported",
        ),
        "overlaid_runs": [r for r in runs[1:] if any(k[0] == r.pk for k in curves)],
        "reference_choices": [
            (r.pk, r.name)
            for r in TrainingRun.objects.filter(
                mixture_version__mixture_id=run.mixture_version.mixture_id, losses__split="val"
            )
            .exclude(pk=run.pk)
            .distinct()
            .order_by("name")[:50]
        ],
        "num_losses": len(rows),
    }


def run_proposal(*, run, reference: str) -> dict:
    """The run page's proposal of next-stage weights against the reference run (by id):
    the rows, or the reason there are none."""
    from webapp.catalog.services import CatalogError, run_mixture_proposal

    if not reference.isdigit():
        return {"proposal_error": "reference: give a run id"}
    try:
        return {"proposal": run_mixture_proposal(run_id=run.pk, reference_run_id=int(reference))}
    except CatalogError as e:
        return {"proposal_error": str(e)}


def _progress_stages(run) -> list[dict]:
    """Where each stage after the first starts, from the version's built schedule: its
    first sample in tokens, and the step at which the run reached it (exact when the
    samples per step are constant between the two progress reports around it; None
    before the run got there)."""
    from shardcore.errors import ShardcoreError
    from shardcore.lineage import step_of_sample
    from shardcore.manifest import read_manifest

    try:
        manifest = read_manifest(run.mixture_version.path)
    except (ShardcoreError, OSError, ValueError):
        return []
    stages = (manifest.get("stages") or [])[1:]
    if not stages:
        return []
    seq_len = int(manifest.get("seq_len") or 0)
    reports = catalog.run_progress_reports(run=run)
    out = []
    for st in stages:
        first = int(st["first_sample"])
        read = step_of_sample(first, reports)
        out.append(
            {
                "label": str(st["name"]),
                "tokens": first * seq_len,
                "sample": first,
                "step": read["step"] if read["read"] else None,
            }
        )
    return out


def _resume_context(run) -> dict:
    if not run.last_reported_at and not run.consumed_samples:
        return {"resume": None}
    from shardcore.errors import ShardcoreError
    from webapp.catalog.services import CatalogError, run_resume_position

    try:
        position = run_resume_position(run_id=run.pk)
    except (CatalogError, ShardcoreError, OSError) as e:
        return {"resume": None, "resume_error": f"No resume position: {e}"}
    shown = ("stage", "pool", "epoch", "shard", "shard_prefix", "record_in_shard", "token_offset")
    resume = {k: position[k] for k in shown if k in position}
    snippet = loader_snippet(position)
    from pathlib import Path

    if Path(run.mixture_version.path, "manifest.json").is_file():
        snippet += stream_snippet(run.mixture_version.path, position["sample"])
    return {"resume": resume, "snippet": snippet}


# --- sources ----------------------------------------------------------------------------


def source_detail(*, source_id: int) -> dict:
    """The source page: ``catalog.source_detail`` with its composition and lengths charted."""
    from webapp.dashboard import charts

    detail = catalog.source_detail(source_id=source_id)
    stats = detail.pop("stats")
    return {
        **detail,
        "composition_figure": charts.composition_bars(
            stats["by_property"], title="Documents, bytes and tokens by property"
        ),
        "length_figure": charts.length_histogram(
            stats["edges"], stats["counts"], title="Document length (tokens)", unit="tokens"
        ),
    }


# --- pools ------------------------------------------------------------------------------


def pool_detail(*, pool_id: int, by: str = "") -> dict:
    """The pool page: ``catalog.pool_detail`` with its shuffle quality charted."""
    from webapp.dashboard import charts

    detail = catalog.pool_detail(pool_id=pool_id, by=by)
    quality = quality_for_charts(detail["quality"])
    return {
        **detail,
        "quality": quality,
        "deviation_figure": charts.window_deviation(quality.get("curve") or {}),
        "heatmap_figure": charts.position_heatmap(*quality["heatmap"])
        if quality.get("heatmap")
        else charts.position_heatmap([], [], []),
        "comparison_figure": charts.shuffle_comparison(quality.get("comparison") or {}),
        "training_figure": _training_figure(detail["training"]),
    }


def _training_figure(training: list[dict]) -> dict:
    """Training loss of the runs that read this pool or another shuffle of its documents,
    with each pool's shard boundaries in the run's colour."""
    from webapp.dashboard import charts

    colour = {t["pool"].pk: i for i, t in enumerate(dict.fromkeys(t["pool"] for t in training))}
    series = [
        {"name": f"{t['run'].name} ({t['pool'].name})", "x": t["steps"], "y": t["loss"],
         "colour": colour[t["pool"].pk]}
        for t in training
    ]  # fmt: skip
    bounds = {}
    for t in training:
        for s in t["shard_steps"]:
            bounds.setdefault((t["pool"].pk, round(s, 3)), {"x": round(s, 3), "label": "",
                                                           "colour": colour[t["pool"].pk]})  # fmt: skip
    return charts.loss_curves(
        series,
        x_title="step",
        boundaries=list(bounds.values()),
        title="Training loss read in pool order; dashed: each pool's shard boundaries",
        empty="no run has reported training loss on this pool or another shuffle of it",
    )


def quality_for_charts(report: dict) -> dict:
    """Reshape a ``shardcore.quality.report`` dict (``windows``, ``batches``,
    ``composition``), optionally with ``by_shuffle`` (one report per shuffle of the same
    data), into chart inputs."""
    if not report:
        return {}
    out: dict = {"report": report, "batches": report.get("batches")}
    out["curve"] = _curve(report.get("windows") or {})
    if out["curve"] and report.get("reference"):
        out["curve"]["reference"] = report["reference"]
    out["verdict"] = report.get("verdict")
    comp = report.get("composition") or {}
    if comp.get("labels"):
        edges = comp["bin_edges"]
        total = edges[-1] or 1
        positions = [(a + b) / 2 / total for a, b in zip(edges, edges[1:], strict=False)]
        out["heatmap"] = (positions, list(comp["labels"]), comp["share"])
    out["comparison"] = {
        name: _curve(r.get("windows") or {}) for name, r in (report.get("by_shuffle") or {}).items()
    }
    return out


TOP_LABELS = 8


def _curve(windows: dict) -> dict:
    """Chart input from ``shardcore.quality.window_deviation``: the worst label and the
    largest labels' max deviations per window size, against the largest ideal bound."""
    sizes = windows.get("window_sizes") or []
    if not sizes:
        return {}
    devs = {"worst label": windows["max_all"]}
    share = windows.get("share") or []
    top = sorted(range(len(share)), key=lambda j: -share[j])[:TOP_LABELS]
    for j in top:
        devs[str(windows["labels"][j])] = [row[j] for row in windows["max"]]
    return {"window_sizes": sizes, "deviations": devs, "ideal": windows.get("ideal_all")}


# --- mixtures ---------------------------------------------------------------------------


def mixture_detail(*, mixture_id: int) -> dict:
    from django.db.models import Count
    from django.shortcuts import get_object_or_404

    from webapp.catalog.models import Mixture

    mixture = get_object_or_404(Mixture, pk=mixture_id)
    versions = list(
        mixture.versions.annotate(num_runs=Count("runs")).defer("params").order_by("-number")[:50]
    )
    return {"mixture": mixture, "versions": versions}


def mixture_version_detail(*, version_id: int) -> dict:
    from django.shortcuts import get_object_or_404

    from webapp.catalog.models import MixtureVersion
    from webapp.dashboard import charts

    version = get_object_or_404(
        MixtureVersion.objects.select_related("mixture", "job", "created_by"), pk=version_id
    )
    lineage = version_lineage(version=version)
    runs = runs_with_taint(list(version.runs.order_by("-created_at")[:50]))
    exports = list(version.exports.order_by("format", "-created_at"))
    components = lineage["components"]
    quality = version_quality(version=version, components=components)
    schedule = _built_schedule(version, components)
    if schedule is not None:
        rows, stage_facts, names = schedule
        composition = charts.schedule_composition(
            stage_facts, names, title="Composition over training (stages in schedule order)"
        )
    else:  # not built (yet): the planned shares by weight, with nothing on the x axis
        total_weight = sum(c.weight for c in components) or 1.0
        rows = [
            {
                "pool": c.pool.name,
                "tokens": int(version.token_budget * c.weight / total_weight),
                "epochs": (version.token_budget * c.weight / total_weight)
                / max(c.pool.num_tokens, 1),
            }
            for c in components
        ]
        composition = charts.schedule_composition([], [])
    return {
        "version": version,
        "components": components,
        "runs": runs,
        "exports": exports,
        # One materialized copy per version: the Launch button goes once one is under way.
        "materialized": any(
            e.format == "materialized" and e.status in ("ready", "building") for e in exports
        ),
        "tainted": f"mv:{version.pk}" in lineage["tainted"],
        "quality": quality,
        "epochs_figure": charts.predicted_epochs(rows, title="Tokens and epochs per pool"),
        "heatmap_figure": composition,
        "deviation_figure": charts.window_deviation(quality.get("curve") or {}),
        "lineage_figure": charts.lineage_graph(lineage["nodes"], lineage["edges"]),
    }


def version_quality(*, version, components) -> dict:
    """The version's schedule quality as its build recorded it (``params["quality"]``),
    else measured from its files (cached by fingerprint: a built schedule never changes);
    series named by the pools' catalog names; reshaped for the charts, with every
    stage's verdict under ``stages``."""
    report = (version.params or {}).get("quality")
    if report is None and version.path and version.status == "ready":
        from webapp.dashboard.services import version_quality_compute

        report = version_quality_compute(version=version)
    if not report or report.get("error"):
        return {"error": (report or {}).get("error", "")}
    names = _pool_key_names(version, components)
    report = {**report}
    for part in ("windows", "composition"):
        if report.get(part):
            report[part] = {**report[part],
                            "labels": [names.get(x, x) for x in report[part]["labels"]]}  # fmt: skip
    out = quality_for_charts(report) if report.get("windows") else {"report": report}
    out["stages"] = []
    for st in report.get("stages") or []:
        verdict = st["verdict"]
        if "value" in verdict:  # one pool only: its catalog name
            value = names.get(verdict["value"], verdict["value"])
            verdict = {**verdict, "text": f"one {report['label']} only ({value}): nothing to mix"}
        out["stages"].append({**st, "verdict": verdict})
    return out


def _pool_key_names(version, components) -> dict[str, str]:
    """The schedule's pool keys -> the pools' catalog names."""
    from shardcore.errors import ManifestError
    from shardcore.manifest import read_manifest

    try:
        manifest = read_manifest(version.path)
    except (ManifestError, OSError):
        return {}
    by_path = {c.pool.path: c.pool.name for c in components}
    return {p["key"]: by_path.get(p["path"], p["key"]) for p in manifest["pools"]}


def _built_schedule(version, components) -> tuple | None:
    """From the version's built schedule (its manifest): per pool its tokens and epochs,
    per stage its place, length and samples per pool, and the pools' catalog names (in
    the manifest's order). None when the schedule is not built."""
    from shardcore.errors import ManifestError
    from shardcore.manifest import read_manifest

    if not version.path:
        return None
    try:
        manifest = read_manifest(version.path)
    except ManifestError:
        return None
    by_path = {c.pool.path: c.pool.name for c in components}
    names = [by_path.get(p["path"], p["key"]) for p in manifest["pools"]]
    rows = [
        {"pool": n, "tokens": int(p["tokens"]), "epochs": float(p["epochs"])}
        for n, p in zip(names, manifest["pools"], strict=True)
    ]
    return rows, manifest.get("stages") or [], names


def audit_search(*, source: str, file_path: str = "", document_id: int | None = None) -> dict:
    """``catalog.audit_search``; a source or file that does not exist shows as ``error``."""
    try:
        return catalog.audit_search(source=source, file_path=file_path, document_id=document_id)
    except NotFound as e:
        return {"error": str(e)}


def flag_detail(*, flag_id: int) -> dict:
    """The flag page: the flag, each item it taints (once) linked to its page, and a
    summary counting each kind once."""
    detail = catalog.flag_detail(flag_id=flag_id)
    taints = [{**t, "url": page_url(t["kind"], t["id"])} for t in detail["taints"]]
    return {
        "flag": detail["flag"],
        "taints": taints,
        "summary": _taint_summary(detail["counts"], detail["documents"]),
    }


def _taint_summary(counts: dict[str, int], documents: int) -> str:
    """The flag page's one line, e.g. "Taints 1 tokenized source, 1 pool, 1 mixture
    version and 2 runs, holding 37 flagged documents." (each item counted once)."""
    names = {
        "tokenized": ("tokenized source", "tokenized sources"),
        "pools": ("pool", "pools"),
        "versions": ("mixture version", "mixture versions"),
        "runs": ("run", "runs"),
        "copies": ("materialized copy", "materialized copies"),
    }
    parts = [f"{n:,} {names[k][n != 1]}" for k, n in counts.items() if n]
    if not parts:
        return "Taints nothing: no artifact or run holds the flagged documents."
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    held = f"{documents:,} flagged document{'s' if documents != 1 else ''}"
    return f"Taints {listed}, holding {held}."


def mixture_version_document(*, version_id: int) -> dict:
    """A mixture version as a self-contained JSON document (the "JSON" export)."""
    from django.shortcuts import get_object_or_404

    from webapp.catalog.models import MixtureVersion

    v = get_object_or_404(MixtureVersion.objects.select_related("mixture"), pk=version_id)
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


def export_file(*, export_id: int):
    """The file of a ready export; 404 for anything else (a materialized copy is a directory
    of shards and is read in place, not downloaded)."""
    from pathlib import Path

    from django.http import Http404
    from django.shortcuts import get_object_or_404

    from webapp.catalog.models import ArtifactStatus, Export

    export = get_object_or_404(Export, pk=export_id, status=ArtifactStatus.READY)
    path = Path(export.path)
    if not path.is_file():
        raise Http404(f"export {export.pk} is not a downloadable file")
    return path


# --- resume positions -------------------------------------------------------------------


def loader_snippet(position: dict) -> str:
    """Python a trainer pastes to continue exactly where the report left off."""
    return (
        "from shardcore.pool import Pool\n"
        f"pool = Pool({position['pool_path']!r})  # {position['pool']}, stage {position['stage']}\n"
        f"# resume at mixture sample {position['sample']}: epoch {position['epoch']} of the "
        f"pool, shard {position['shard']}, record {position['record_in_shard']} in it\n"
        f"start_record = {position['record']}\n"
        f"token_offset = {position.get('token_offset', 0)}  # tokens consumed of that record\n"
    )


def stream_snippet(mixture_path: str, sample: int) -> str:
    """Python that streams the mixture from ``sample`` on with ``shardcore.loader``."""
    return (
        "\n# Or stream the mixture from there, exactly, with any world size and workers:\n"
        "from shardcore.loader import ShardyardIterableDataset, ShardyardLoader, resume_state\n"
        f"path = {str(mixture_path)!r}\n"
        "dataset = ShardyardIterableDataset(path, rank=0, world_size=1)  # your rank, world size\n"
        f"dataset.load_state_dict(resume_state(path, next_sample={int(sample)}))\n"
        "loader = ShardyardLoader(dataset, batch_size=8)  # your per-rank batch size\n"
    )


# --- mixture builder --------------------------------------------------------------------


def builder_context() -> dict:
    return {"pools": catalog.builder_pools(), "mixtures": catalog.mixture_names()}


def mixture_predict(*, payload: dict) -> dict:
    """The builder's live answer (``catalog.mixture_draft_predict``) with two figures."""
    from webapp.dashboard import charts

    out = catalog.mixture_draft_predict(payload=payload)
    if out["error"]:
        return out
    schedule = out.pop("schedule")
    return {
        **out,
        "epochs_figure": charts.predicted_epochs(
            out["rows"], warn_epochs=float(out["spec"]["max_repetitions"])
        ),
        "composition_figure": charts.schedule_composition(
            schedule,
            [r["pool"] for r in out["rows"]],
            title="Composition by stage (share of samples)",
        ),
    }


# --- version diff -----------------------------------------------------------------------


def mixture_version_diff(*, a_id: int, b_id: int) -> dict:
    """Two versions side by side: their settings, and per (stage, pool) the weight, the
    tokens and epochs each built schedule gives it (from the manifests), with the change."""
    from django.shortcuts import get_object_or_404

    from webapp.catalog.models import MixtureVersion

    a, b = (
        get_object_or_404(MixtureVersion.objects.select_related("mixture"), pk=pk)
        for pk in (a_id, b_id)
    )

    def facts(v) -> dict:
        comps = list(v.components.select_related("pool").order_by("id"))
        built = _built_schedule(v, comps)
        tokens = {r["pool"]: r for r in built[0]} if built else {}
        stage_weight: dict[str, float] = {}
        for c in comps:
            stage_weight[c.stage or "main"] = stage_weight.get(c.stage or "main", 0) + c.weight
        out = {}
        for c in comps:
            stage = c.stage or "main"
            row = tokens.get(c.pool.name, {})
            out[(stage, c.pool.name)] = {
                "share": c.weight / (stage_weight[stage] or 1),
                "tokens": row.get("tokens"),
                "epochs": row.get("epochs"),
                "pool_id": c.pool_id,
            }
        return out

    fa, fb = facts(a), facts(b)
    rows = []
    for key in sorted(set(fa) | set(fb), key=lambda k: (k[0] != "main", k)):
        x, y = fa.get(key), fb.get(key)
        change = "added" if x is None else "removed" if y is None else (
            "changed" if abs(x["share"] - y["share"]) > 1e-9 or x["tokens"] != y["tokens"]
            else "same"
        )  # fmt: skip
        rows.append({"stage": key[0], "pool": key[1], "a": x, "b": y, "change": change,
                     "pool_id": (x or y)["pool_id"]})  # fmt: skip
    settings_rows = [
        (label, getattr(a, f), getattr(b, f))
        for label, f in (("token budget", "token_budget"), ("samples", "num_samples"),
                         ("seed", "seed"), ("fingerprint", "fingerprint"))
    ]  # fmt: skip
    settings_rows.append(("order", a.params.get("order", "blend") if a.params else "blend",
                          b.params.get("order", "blend") if b.params else "blend"))  # fmt: skip
    return {"a": a, "b": b, "rows": rows, "settings": settings_rows}

"""Reads of the dashboard's own (users and roles), and page reads the catalog and jobs
selectors do not offer. Each runs a bounded number of queries."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Prefetch

from webapp.catalog import selectors as catalog_selectors
from webapp.dashboard.permissions import ROLES, role_from_groups


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
# Lists are paginated by keyset-free LIMIT/OFFSET: pages hold at most PAGE_SIZE rows and
# every list query is ordered by an indexed column.

PAGE_SIZE = 50


def _page(qs, page: int, size: int = PAGE_SIZE) -> dict:
    """One page of ``qs`` without a COUNT(*) over the whole table: fetch size + 1 rows."""
    return _paged(lambda offset, limit: list(qs[offset : offset + limit]), page, size)


MAX_PAGE = 1_000_000


def _paged(fetch, page, size: int = PAGE_SIZE) -> dict:
    """One page from ``fetch(offset, limit) -> list``, asking for one row more than shown."""
    # A page number from the query string: anything but a sane integer is page 1 (never a
    # ValueError or an offset past bigint, i.e. never a 500).
    try:
        page = min(max(1, int(str(page or 1))), MAX_PAGE)
    except ValueError:
        page = 1
    rows = fetch((page - 1) * size, size + 1)
    return {
        "rows": rows[:size],
        "page": page,
        "has_next": len(rows) > size,
        "has_prev": page > 1,
    }


# Every relation taint_describe reads, fetched with the taint.
TAINT_TARGETS = (
    "flag",
    "tokenized_source__source",
    "tokenized_source__tokenizer",
    "pool",
    "mixture_version__mixture",
    "run",
    "export__version__mixture",
)


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
        "recent_runs": _runs_with_taint(list(runs[:10])),
        "tainted": [taint_describe(t) for t in taints],
    }


def taint_describe(t) -> dict:
    from django.urls import reverse

    target = t.target
    if t.run_id:
        label, url = f"run {target.name}", reverse("dashboard:run", args=[t.run_id])
    elif t.mixture_version_id:
        label = f"mixture {target}"
        url = reverse("dashboard:mixture_version", args=[t.mixture_version_id])
    elif t.pool_id:
        label, url = f"pool {target.name}", reverse("dashboard:pool", args=[t.pool_id])
    elif t.export_id:
        label = f"materialized copy of {target.version}"
        url = reverse("dashboard:mixture_version", args=[target.version_id])
    else:
        label = f"tokenized {target.source.name} ({target.tokenizer.spec})"
        url = reverse("dashboard:source", args=[target.source_id])
    return {
        "label": label,
        "url": url,
        "flag": t.flag.reason,
        "flag_id": t.flag_id,
        "documents": t.documents,
        "created_at": t.created_at,
    }


def _runs_with_taint(runs: list) -> list:
    """Mark each run ``tainted`` with one query for the whole list."""
    from webapp.catalog.models import Taint

    ids = set(
        Taint.objects.filter(run_id__in=[r.pk for r in runs]).values_list("run_id", flat=True)
    )
    for r in runs:
        r.tainted = r.pk in ids
    return runs


def source_page(*, page: int = 1) -> dict:
    from webapp.catalog.models import Source

    return _page(Source.objects.order_by("name"), page)


def pool_page(*, page: int = 1) -> dict:
    from webapp.catalog.models import Pool

    return _page(Pool.objects.order_by("-created_at").defer("params"), page)


def mixture_page(*, page: int = 1) -> dict:
    from django.db.models import Count, Max

    from webapp.catalog.models import Mixture

    qs = Mixture.objects.annotate(
        num_versions=Count("versions"), latest=Max("versions__number")
    ).order_by("name")
    return _page(qs, page)


def job_page(*, state: str = "", page: int = 1) -> dict:
    from webapp.jobs.models import ACTIVE_JOB_STATES, Job, JobState

    qs = Job.objects.defer("plan", "bad_input", "log_tail").order_by("-created_at")
    if state == "running":
        qs = qs.filter(state__in=ACTIVE_JOB_STATES)
    elif state in JobState.values:
        qs = qs.filter(state=state)
    return {**_page(qs, page), "state": state, "states": ["running", *JobState.values]}


def run_page(*, page: int = 1) -> dict:
    """A page of ``webapp.catalog.selectors.run_list`` (runs with their version and taint
    count, one query)."""
    from webapp.catalog.selectors import run_list

    out = _paged(lambda offset, limit: run_list(offset=offset, limit=limit), page)
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
        "progress_figure": charts.progress_over_time(
            [
                {
                    "at": p["reported_at"].isoformat(),
                    "tokens": p["consumed_tokens"],
                    "step": p["step"],
                }
                for p in points
            ],
            total_tokens=run.mixture_version.token_budget,
        ),
        "lineage_figure": charts.lineage_graph(lineage["nodes"], lineage["edges"]),
        "tainted": f"run:{run.pk}" in lineage["tainted"],
        "num_reports": len(points),
        "flag_reads": [
            {**r, "text": flag_read_text(r)} for r in catalog_selectors.run_flag_reads(run=run)
        ],
        "segments": _segments_rows(run),
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

    marks = _run_boundaries(run)
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


def _segments_rows(run) -> list[dict]:
    """The versions the run read, in order, with the run's samples and steps each gave
    (the lineage of a switch); a run that never switched has one row."""
    rows = []
    for g in catalog_selectors.run_segments(run=run):
        end = g.end_sample
        rows.append(
            {
                "segment": g,
                "version": g.mixture_version,
                "samples": f"[{g.first_sample:,}, {'…' if end is None else f'{end:,}'})",
                "steps": f"{g.first_step:,} – {'' if end is None else run_step_at(run, end)}",
            }
        )
    return rows


def run_step_at(run, sample: int):
    """The step whose progress report reached ``sample`` consumed samples (None if none)."""
    from webapp.catalog.models import RunProgress

    return (
        RunProgress.objects.filter(run=run, consumed_samples__gte=sample)
        .order_by("step")
        .values_list("step", flat=True)
        .first()
    )


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


def _run_boundaries(run) -> dict[str, list[dict]]:
    """What the loss charts mark, in the run's samples: ``stages``, where each stage after
    the first of each version it read starts, and where it switched version; ``epochs``,
    where each pool's next pass over its records starts (``Mixture.epoch_starts``). Each
    with its tokens (sample x seq_len) and the first step whose progress report had
    consumed it (None before the run got there)."""
    import bisect
    import os
    from pathlib import Path

    from shardcore.errors import ShardcoreError
    from shardcore.manifest import read_manifest
    from shardcore.mixture import Mixture
    from webapp.catalog.models import MixtureComponent, RunProgress
    from webapp.catalog.selectors import run_segments

    reports = list(
        RunProgress.objects.filter(run=run).order_by("step").values_list("step", "consumed_samples")
    )
    consumed = [c for _, c in reports]

    def at(sample: int, seq_len: int) -> dict:
        i = bisect.bisect_left(consumed, sample)
        step = reports[i][0] if i < len(reports) else None
        return {"sample": sample, "tokens": sample * seq_len, "step": step}

    segments = run_segments(run=run)
    pools = {
        os.path.abspath(c.pool.path): c.pool
        for c in MixtureComponent.objects.filter(
            version__in=[g.mixture_version_id for g in segments]
        ).select_related("pool")
    }
    stages, epochs = [], []
    for g in segments:
        try:
            manifest = read_manifest(g.mixture_version.path)
        except (ShardcoreError, OSError, ValueError):
            continue
        seq_len = int(manifest.get("seq_len") or 0)
        stop = None if g.end_sample is None else g.end_sample - g.first_sample
        if g.index:
            stages.append({"label": f"switch to v{g.mixture_version.number}",
                           **at(g.first_sample, seq_len)})  # fmt: skip
        for st in manifest.get("stages", [])[1:]:
            if stop is None or st["first_sample"] < stop:
                stages.append({"label": f"stage {st['name']}",
                               **at(g.first_sample + st["first_sample"], seq_len)})  # fmt: skip
        try:
            mix = Mixture(g.mixture_version.path)
        except (ShardcoreError, OSError, ValueError):
            continue  # no schedule to read epochs from
        for e in mix.epoch_starts(stop):
            pool = pools.get(os.path.abspath(mix.pools[e["pool"]]["path"]))
            name = pool.name if pool else Path(mix.pools[e["pool"]]["path"]).name
            epochs.append({"label": f"{name} epoch {e['epoch'] + 1}",
                           "pool": pool.pk if pool else None,
                           **at(g.first_sample + e["sample"], seq_len)})  # fmt: skip
    return {"stages": stages, "epochs": epochs}


def flag_read_text(row: dict) -> str:
    """One line answering "when did the run first read the flagged documents"."""
    first = row["first_sample"]
    if row.get("error"):
        return f"unknown: {row['error']}"
    if row.get("never"):
        return "never: no sample of this mixture reads a flagged document"
    if not row["read"]:
        return (
            f"not yet: the first flagged sample is {first}; at its current position the run "
            f"has consumed {row['consumed_samples']} samples (step {row['step']})"
        )
    if row["exact"]:
        return f"first read at step {row['step']} (sample {first})"
    return f"first read after step {row['after_step']}, by step {row['by_step']} (sample {first})"


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

FILES_SHOWN = 200


def _latest_tokenized(source):
    from webapp.catalog.models import ArtifactStatus, TokenizedSource

    return (
        TokenizedSource.objects.filter(source=source, status=ArtifactStatus.READY)
        .select_related("tokenizer")
        .order_by("-created_at")
        .first()
    )


def source_detail(*, source_id: int) -> dict:
    from django.shortcuts import get_object_or_404

    from webapp.catalog.models import Source
    from webapp.dashboard import charts

    source = get_object_or_404(Source, pk=source_id)
    files = list(source.files.order_by("path")[:FILES_SHOWN])
    bad_files = list(source.files.filter(bad_lines__gt=0).order_by("-bad_lines")[:50])
    tokenized = list(
        source.tokenized.select_related("tokenizer").defer("params").order_by("-created_at")[:20]
    )
    flags = list(source.flags.select_related("source_file").order_by("-created_at")[:20])
    stats = source_stats(
        tokenized=_latest_tokenized(source), metadata_fields=source.metadata_fields
    )
    return {
        "source": source,
        "files": files,
        "files_truncated": source.num_files > len(files),
        "bad_files": bad_files,
        "tokenized": tokenized,
        "flags": flags,
        "composition_figure": charts.composition_bars(
            stats["by_property"], title="Documents, bytes and tokens by property"
        ),
        "length_figure": charts.length_histogram(
            stats["edges"], stats["counts"], title="Document length (tokens)", unit="tokens"
        ),
    }


def source_stats(*, tokenized, metadata_fields) -> dict:
    """Composition by property and the length histogram of a tokenized source, read with
    DuckDB from its Parquet sidecars (per-document data never enters Postgres). Cached by
    fingerprint: a built artifact never changes."""
    from django.core.cache import cache

    empty = {"by_property": {}, "edges": [], "counts": []}
    if tokenized is None:
        return empty
    key = f"dash:source-stats:{tokenized.pk}:{tokenized.fingerprint}"
    cached = cache.get(key)
    if cached is not None:
        return cached
    try:
        stats = _source_stats_read(tokenized.path, list(metadata_fields or []))
    except Exception as e:  # noqa: BLE001 - a missing or unreadable sidecar shows as empty
        import logging

        logging.getLogger(__name__).warning("stats of %s: %s", tokenized.path, e)
        return empty
    cache.set(key, stats, timeout=24 * 3600)
    return stats


def _source_stats_read(path: str, fields: list[str]) -> dict:
    from shardcore.tokenized import property_stats

    return property_stats(path, fields)


# --- pools ------------------------------------------------------------------------------

SHARDS_SHOWN = 50


def pool_properties(*, pool) -> list[str]:
    """What the quality charts can label documents by: the pool's properties (nested ones
    as dotted paths), read from its documents table's schema only."""
    from shardcore import props
    from shardcore.errors import ShardcoreError

    try:
        import pyarrow.parquet as pq

        schema = pq.read_schema(f"{pool.path}/documents.parquet")
    except (OSError, ShardcoreError, ValueError):
        return []
    return props.names(props.props_type(schema))[:50]


def pool_detail(*, pool_id: int, by: str = "") -> dict:
    from django.db.models import Count, Sum
    from django.shortcuts import get_object_or_404

    from webapp.catalog.models import MixtureVersion, Pool
    from webapp.dashboard import charts

    pool = get_object_or_404(Pool, pk=pool_id)
    # The (pool, index) index serves both the first page of shards and the sums.
    shards = list(pool.shards.order_by("index")[:SHARDS_SHOWN])
    totals = pool.shards.aggregate(
        n=Count("id"), records=Sum("num_records"), tokens=Sum("num_tokens"), bytes=Sum("num_bytes")
    )
    parents = list(pool.parents.select_related("source", "tokenizer").defer("params"))
    versions = list(
        MixtureVersion.objects.filter(components__pool=pool)
        .select_related("mixture")
        .distinct()
        .order_by("-created_at")[:20]
    )
    taints = list(pool.taints.select_related("flag")[:20])
    properties = pool_properties(pool=pool)
    by = by if by in properties or by in ("length", "_doc.source") else ""
    quality = pool_quality(pool=pool, by=by)
    return {
        "pool": pool,
        "by": by,
        "properties": properties,
        "shards": shards,
        "totals": totals,
        "parents": parents,
        "versions": versions,
        "taints": taints,
        "quality": quality,
        "deviation_figure": charts.window_deviation(quality.get("curve") or {}),
        "heatmap_figure": charts.position_heatmap(*quality["heatmap"])
        if quality.get("heatmap")
        else charts.position_heatmap([], [], []),
        "comparison_figure": charts.shuffle_comparison(quality.get("comparison") or {}),
    }


def pool_quality(*, pool, by: str = "") -> dict:
    """The pool's shuffle-quality report as its build recorded it (``params["quality"]``,
    or ``quality.json`` beside the manifest), else measured from its files (cached);
    reshaped for the charts. ``by`` labels documents by a property instead (measured)."""
    import json
    from pathlib import Path

    if by:
        from webapp.dashboard.services import pool_quality_compute

        return quality_for_charts(pool_quality_compute(pool=pool, by=by))
    report = (pool.params or {}).get("quality")
    if report is None:
        try:
            report = json.loads((Path(pool.path) / "quality.json").read_text())
        except (OSError, ValueError):
            from webapp.dashboard.services import pool_quality_compute

            report = pool_quality_compute(pool=pool)
    return quality_for_charts(report)


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
    runs = _runs_with_taint(list(version.runs.order_by("-created_at")[:50]))
    exports = list(version.exports.order_by("format", "-created_at"))
    quality = quality_for_charts(version.params.get("quality") or {})
    components = lineage["components"]
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


# --- audit ------------------------------------------------------------------------------

AUDIT_RUNS = 100  # shown on the page; the count covers all


def audit_search(*, source: str, file_path: str = "", document_id: int | None = None) -> dict:
    """Every mixture version and run that contains a source, one of its files, or one of its
    documents. Relational lineage (source -> tokenized sources -> pools -> versions ->
    runs); for a document, pools are checked against their Parquet document lists."""
    from webapp.catalog.models import MixtureVersion, Pool, Source, TokenizedSource, TrainingRun

    q = Source.objects.all()
    src = (q.filter(pk=int(source)) if source.isdigit() else q.filter(name=source)).first()
    if src is None:
        return {"error": f"no source named {source!r}"}
    file = None
    if file_path:
        file = src.files.filter(path=file_path).first()
        if file is None:
            return {"error": f"source {src.name} has no file {file_path!r}", "source": src}
    tokenized = list(TokenizedSource.objects.filter(source=src).select_related("tokenizer"))
    pools = list(
        Pool.objects.filter(parents__in=tokenized).distinct().prefetch_related("parents")
        .order_by("-created_at")
    )  # fmt: skip
    if file is not None or document_id is not None:
        pools = [p for p in pools if _pool_holds(p, src.pk, file, document_id)]
    versions = list(
        MixtureVersion.objects.filter(components__pool__in=pools)
        .select_related("mixture")
        .distinct()
        .order_by("-created_at")
    )
    run_qs = TrainingRun.objects.filter(mixture_version__in=versions)
    runs = _runs_with_taint(
        list(run_qs.select_related("mixture_version__mixture").order_by("-created_at")[:AUDIT_RUNS])
    )
    return {
        "source": src,
        "file": file,
        "document_id": document_id,
        "tokenized": tokenized,
        "pools": pools,
        "versions": versions,
        "runs": runs,
        "num_runs": run_qs.count() if len(runs) == AUDIT_RUNS else len(runs),
    }


def _pool_holds(pool, source_id: int, file, document_id: int | None) -> bool:
    """Whether the pool holds the document, or any document of the file (a file's documents
    are the id range the tokenize stage recorded in ``params["file_ranges"]``); read from
    the pool's Parquet document list."""
    from webapp.catalog.lineage import pool_documents_hit
    from webapp.catalog.selectors import audit_document_ids

    for ts in pool.parents.all():
        if ts.source_id != source_id:
            continue
        if document_id is not None:
            ids = audit_document_ids(tokenized=ts, document_ids=[document_id])
        else:
            ids = audit_document_ids(tokenized=ts, file_path=file.path)
        if not ids:
            continue
        try:
            if pool_documents_hit(pool=pool, tokenized=ts, doc_ids=ids):
                return True
        except Exception:  # noqa: BLE001
            # An unreadable document list cannot clear the pool: an audit over-reports.
            return True
    return False


def flag_detail(*, flag_id: int) -> dict:
    from django.shortcuts import get_object_or_404

    from webapp.catalog.models import Flag

    flag = get_object_or_404(Flag.objects.select_related("source", "source_file"), pk=flag_id)
    taints = flag.taints.select_related(*TAINT_TARGETS).order_by("id")
    taints = list(taints.select_related("run__mixture_version"))
    reads = catalog_selectors.flag_run_reads(flag=flag, runs=[t.run for t in taints if t.run_id])
    described = []
    for t in taints:
        d = taint_describe(t)
        if t.run_id:
            d["read"] = reads[t.run_id]
            d["first_read"] = flag_read_text(reads[t.run_id])
        described.append(d)
    return {"flag": flag, "taints": described}


def flag_recent(*, limit: int = 20) -> list:
    from django.db.models import Count

    from webapp.catalog.models import Flag

    return list(
        Flag.objects.select_related("source", "source_file")
        .annotate(num_taints=Count("taints"))
        .order_by("-created_at")[:limit]
    )


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

BUILDER_POOLS = 500


def builder_pools() -> list[dict]:
    """Ready training pools the builder offers, newest first, as plain facts."""
    from webapp.catalog.models import ArtifactStatus, Pool

    return list(
        Pool.objects.filter(status=ArtifactStatus.READY, split=Pool.Split.TRAIN)
        .order_by("-created_at")
        .values("id", "name", "num_records", "num_tokens", "seq_len", "path")[:BUILDER_POOLS]
    )


def builder_context() -> dict:
    from webapp.catalog.models import Mixture

    return {
        "pools": builder_pools(),
        "mixtures": list(Mixture.objects.order_by("name").values_list("name", flat=True)[:500]),
    }


def mixture_predict(*, payload: dict) -> dict:
    """The builder's live answer: per-pool prediction, warnings and two figures."""
    from webapp.catalog.models import ArtifactStatus, Pool
    from webapp.dashboard import builder, charts

    try:
        spec = builder.spec_from_rows(
            rows=payload.get("rows") or [],
            stages=payload.get("stages") or [],
            tokens=int(payload.get("tokens") or 0),
            seed=int(payload.get("seed") or 0),
            order=str(payload.get("order") or "blend"),
            max_repetitions=float(payload.get("max_repetitions") or 4),
            order_options=payload.get("order_options"),
        )
    except (builder.BuilderError, TypeError, ValueError) as e:
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
        # Saving is refused while a pool would repeat beyond the cap: the build would fail.
        "save_error": (
            f"{', '.join(result['over_cap'])} above max_repetitions={spec['max_repetitions']:g}"
            if result["over_cap"]
            else None
        ),
        "epochs_figure": charts.predicted_epochs(
            result["rows"], warn_epochs=float(spec["max_repetitions"])
        ),
        "composition_figure": charts.schedule_composition(
            result["schedule"],
            [r["pool"] for r in result["rows"]],
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

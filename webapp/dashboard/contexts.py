"""Page contexts: the catalog's read model (``webapp.catalog.selectors``), the jobs' and
the workers' reads, turned into what each template shows, with links and charts
(``webapp.dashboard.charts``). The queries are the read models'; each page runs a
bounded number of them."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.urls import reverse
from django.utils import timezone

from shardcore import storage
from shardcore.manifest import MANIFEST_NAME
from shardcore.order import ORDERINGS
from webapp.catalog import selectors as catalog
from webapp.catalog.errors import CatalogError
from webapp.catalog.models import ArtifactStatus
from webapp.catalog.selectors import NotFound
from webapp.dashboard import charts
from webapp.jobs import selectors as jobs
from webapp.jobs.models import Job, UnitState
from webapp.links import page_url
from webapp.ops import selectors as ops


def overview() -> dict:
    """Everything the overview page shows: the workers, the catalog's counts (each linked
    to its list), the running jobs, the newest runs and taints."""
    data = catalog.overview()
    n = data["counts"]
    return {
        "workers": ops.workers_live(),
        "heartbeats": list(ops.heartbeat_recent(limit=10)),
        "counts": [
            ("sources", n["sources"], reverse("dashboard:sources")),
            ("ready pools", n["pools"], reverse("dashboard:pools")),
            ("mixtures", n["mixtures"], reverse("dashboard:mixtures")),
            ("mixture versions", n["mixture_versions"], reverse("dashboard:mixtures")),
            ("active jobs", n["active_jobs"], reverse("dashboard:jobs") + "?state=active"),
            ("training runs", n["runs"], reverse("dashboard:runs")),
            ("tainted runs", n["tainted_runs"], reverse("dashboard:audit")),
            ("flags", n["flags"], reverse("dashboard:audit")),
        ],
        "running_jobs": jobs.job_running(limit=10),
        "recent_runs": data["recent_runs"],
        "tainted": [taint_link(t) for t in data["taints"]],
    }


def taint_link(row: dict) -> dict:
    """A taint as the catalog describes it, with the link to the page that shows it."""
    return {**row, "url": page_url(row["kind"], row["id"])}


UNITS_SHOWN = 200


def job_detail(*, job_id: int, units_from=0) -> dict:
    """The job page: ``webapp.jobs.selectors.job_detail`` (the job, unit counts by state,
    ``UNITS_SHOWN`` units in plan order from position ``units_from`` (a query-string value:
    anything but a sane integer is 0), failed units: four queries) shaped for the
    template."""
    try:
        units_from = max(0, min(int(str(units_from or 0)), 2**31 - 1))
    except ValueError:
        units_from = 0
    try:
        detail = jobs.job_detail(job_id=job_id, units_limit=UNITS_SHOWN, units_offset=units_from)
    except Job.DoesNotExist:
        raise Http404(f"no job {job_id}") from None
    job = detail.job
    eta = job.eta
    return {
        "job": job,
        "unit_counts": {s: detail.unit_states.get(s, 0) for s in UnitState.values},
        "units": detail.units,
        "units_truncated": job.units_total > len(detail.units),
        "units_from": units_from,
        "units_to": units_from + len(detail.units),
        "units_prev": max(0, units_from - UNITS_SHOWN) if units_from else None,
        "units_next": (
            units_from + UNITS_SHOWN if units_from + UNITS_SHOWN < job.units_total else None
        ),
        "failed_units": detail.failed_units,
        "eta_seconds": eta.total_seconds() if eta is not None else None,
        "timeline_figure": charts.unit_timeline(_timeline_rows(detail.units)),
    }


def _timeline_rows(units) -> list[dict]:
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


def job_progress_json(*, job_id: int, units_from=0, detail: dict | None = None) -> dict:
    """The JSON document the job page polls (plain types only); ``detail``: the page's
    ``job_detail``, when read already."""
    p = detail or job_detail(job_id=job_id, units_from=units_from)
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


def lineage_figure(lineage: dict, *, plot_px: int = charts.LINEAGE_PLOT_PX) -> dict:
    """``catalog.version_lineage`` drawn, each node linked to the page that shows it;
    ``plot_px``: the narrowest the chart is drawn on its page (labels fit it)."""
    nodes = [{**n, "url": page_url(n["kind"], n["ref"]) or ""} for n in lineage["nodes"]]
    return charts.lineage_graph(nodes, lineage["edges"], plot_px=plot_px)


# --- runs -------------------------------------------------------------------------------


# The run page draws its lineage across the page (a 1,280 px window leaves this much).
RUN_LINEAGE_PX = 900


def run_detail(*, run_id: int) -> dict:
    """The run page: ``catalog.run_detail`` with its progress, lineage and losses charted,
    when it first read each flag's documents, and where it resumes."""
    detail = catalog.run_detail(run_id=run_id)
    run, stages = detail["run"], detail["stages"]
    segments = catalog.run_segment_rows(run=run)
    budget = catalog.run_budget(run=run, segments=[r["segment"] for r in segments])
    return {
        "run": run,
        "version": detail["version"],
        "budget": budget,
        "progress_figure": charts.progress_by_step(
            [
                {
                    "at": p["reported_at"].isoformat(),
                    "tokens": p["consumed_tokens"],
                    "step": p["step"],
                }
                for p in detail["progress"]
            ],
            stages=[
                {
                    "label": st["name"],
                    "tokens": st["tokens"],
                    "sample": st["sample"],
                    "step": st["step"],
                }
                for st in stages
            ],
            total_tokens=budget,
            switches=[
                {
                    "step": r["segment"].first_step - 1,
                    "label": f"switch to v{r['version'].number}",
                }
                for r in segments[1:]
            ],
        ),
        "lineage_figure": lineage_figure(detail["lineage"], plot_px=RUN_LINEAGE_PX),
        "tainted": detail["tainted"],
        "num_reports": len(detail["progress"]),
        "flag_reads": catalog.run_flag_reads(run=run),
        "segments": segments,
        **_resume_context(run),
        **run_losses(run=run, stages=stages),
    }


EPOCH_MARKS = 40  # a pool read many times would hide the curves behind its lines


def run_losses(*, run, stages: list[dict], overlay: bool = True) -> dict:
    """The run's loss charts (``catalog.run_losses``): validation loss per pool (and per
    source) against step and against tokens, training loss against step, with the
    mixture's stage starts (``stages``) marked; with ``overlay``, other runs of the same
    mixture dashed, in the same colour per pool or source."""
    losses = catalog.run_losses(run=run, overlay=overlay)
    runs, rows = losses["runs"], losses["rows"]
    names = {r.pk: r.name for r in runs}
    keys = sorted({(split, series) for _, split, series, *_ in rows})
    colour = {k: i for i, k in enumerate(keys)}
    curves: dict[tuple, dict] = {}
    for run_id, split, series, pool, source, step, loss, tokens in rows:
        c = curves.setdefault(
            (run_id, split, series),
            {
                "label": "training loss"
                if split == "train"
                else pool + (f" / {source}" if source else ""),
                "steps": [],
                "tokens": [],
                "loss": [],
                "loss_t": [],
            },
        )
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

    # Stage starts and switches of version of every version the run read, and each
    # pool's epoch starts in its validation curve's colour (up to EPOCH_MARKS of them).
    marks = catalog.run_loss_marks(run=run)
    epochs = [
        {**e, "colour": colour[("val", f"pool:{e['pool']}")]}
        for e in marks["epochs"]
        if ("val", f"pool:{e['pool']}") in colour
    ][:EPOCH_MARKS]
    by_step = [{"x": b["step"], "label": b["label"]} for b in marks["stages"] if b["step"]]
    by_tokens = [{"x": b["tokens"], "label": b["label"]} for b in marks["stages"]]
    epochs_by_step = [
        {"x": e["step"], "label": e["label"], "colour": e["colour"]} for e in epochs if e["step"]
    ]
    epochs_by_tokens = [
        {"x": e["tokens"], "label": e["label"], "colour": e["colour"]} for e in epochs
    ]
    return {
        "val_step_figure": charts.loss_curves(
            series_for("val", "step"),
            x_title="step",
            boundaries=by_step + epochs_by_step,
            title="Validation loss per pool / source, by step",
        ),
        "val_tokens_figure": charts.loss_curves(
            series_for("val", "tokens"),
            x_title="tokens",
            boundaries=by_tokens + epochs_by_tokens,
            title="Validation loss per pool / source, by tokens consumed",
        ),
        "train_figure": charts.loss_curves(
            series_for("train", "step"),
            x_title="step",
            boundaries=by_step,
            title="Training loss",
            empty="no training loss reported",
        ),
        "overlaid_runs": [r for r in runs[1:] if any(k[0] == r.pk for k in curves)],
        "reference_choices": losses["references"],
        "num_losses": len(rows),
    }


def run_proposal(*, run, reference: str) -> dict:
    """The run page's proposal of next-stage weights against the reference run (by id):
    the rows, or the reason there are none."""
    if not reference.isdigit():
        return {"proposal_error": "reference: give a run id"}
    try:
        return {
            "proposal": catalog.run_mixture_proposal(run_id=run.pk, reference_run_id=int(reference))
        }
    except CatalogError as e:
        return {"proposal_error": str(e)}


def builder_proposal(*, run: str, reference: str) -> dict:
    """The builder's "Propose from run": the runs that reported validation loss
    (``propose_runs``: id, "mixture / run"), the chosen run (``proposal_run``), the other
    runs of its mixture to compare against (``propose_references``) and the run page's
    proposal (``run_proposal``) against the chosen reference, else the first of them,
    and the builder's draft of it (``builder_draft``)."""
    runs = catalog.runs_with_val_losses(limit=200)
    out: dict = {
        "propose_runs": [(r.pk, f"{r.mixture_version.mixture.name} / {r.name}") for r in runs],
        "propose_references": [],
    }
    if not run:
        return out
    chosen = next((r for r in runs if str(r.pk) == run), None)
    if chosen is None:
        return {**out, "proposal_error": f"run: no run {run} with a validation loss"}
    mixture = chosen.mixture_version.mixture_id
    references = [
        (r.pk, r.name)
        for r in runs
        if r.mixture_version.mixture_id == mixture and r.pk != chosen.pk
    ]
    out.update(proposal_run=chosen, propose_references=references)
    if not reference:
        if not references:
            return {
                **out,
                "proposal_error": f"reference: no other run of {chosen.mixture_version.mixture.name} reported validation loss",
            }
        reference = str(references[0][0])
    out.update(run_proposal(run=chosen, reference=reference))
    if "proposal" in out:
        # The builder opens on the proposal: the run's version with the proposed weights.
        out["builder_draft"] = catalog.run_proposal_draft(run=chosen, proposal=out["proposal"])
    return out


def _resume_context(run) -> dict:
    if not run.last_reported_at and not run.consumed_samples:
        return {"resume": None}
    version = run.mixture_version
    if version.status != ArtifactStatus.READY:
        # Being built (after a switch) or failed: say so, never a file path on the server.
        job = f" (job #{version.job_id})" if version.job_id else ""
        doing = {
            ArtifactStatus.BUILDING: f"its schedule is being built{job}; the resume position "
            "shows here once it is ready",
        }.get(version.status, f"it is {version.status}{job}")
        return {"resume": None, "resume_error": f"{version}: {doing}."}
    try:
        position = catalog.run_resume_position(run_id=run.pk)
    except CatalogError as e:
        return {"resume": None, "resume_error": f"No resume position: {e}"}
    shown = ("stage", "pool", "epoch", "shard", "shard_prefix", "record_in_shard", "token_offset")
    resume = {k: position[k] for k in shown if k in position}
    snippet = loader_snippet(position)
    segments = position.get("segments") or []
    if len(segments) > 1:
        # A run that switched version reads its segments, in the run's sample numbering.
        source = [{"path": g["path"], "first_sample": g["first_sample"]} for g in segments]
        snippet += stream_snippet(source, position["sample"])
    elif storage.exists(storage.join(run.mixture_version.path, MANIFEST_NAME)):
        snippet += stream_snippet(run.mixture_version.path, position["sample"])
    return {"resume": resume, "snippet": snippet}


# --- sources ----------------------------------------------------------------------------


def source_detail(*, source_id: int) -> dict:
    """The source page: ``catalog.source_detail`` with its composition and lengths charted."""
    detail = catalog.source_detail(source_id=source_id)
    stats = detail.pop("stats")
    return {
        **detail,
        "stats_computing": stats.get("computing"),
        "composition_figures": charts.composition_by_property(
            stats["by_property"], others=stats.get("others")
        ),
        "length_figure": charts.length_histogram(
            stats["edges"],
            stats["counts"],
            title="Document length (tokens)",
            unit="tokens",
            empty=_no_lengths(detail, stats),
        ),
    }


def _no_lengths(detail: dict, stats: dict) -> str:
    """Why a source's length chart is empty: lengths in tokens come from a ready tokenized
    source (the scan counts documents, not tokens), measured by a worker once it is."""
    documents = detail["source"].num_documents
    if not documents:
        return "no documents"
    if stats.get("computing"):
        return "being measured by a worker"
    if stats.get("error"):
        return f"could not be measured: {stats['error']}"
    if not any(t.status == ArtifactStatus.READY for t in detail["tokenized"]):
        return f"not tokenized yet ({documents:,} documents scanned): tokenize it for lengths"
    return "no documents"


# --- pools ------------------------------------------------------------------------------


def pool_detail(*, pool_id: int, by: str = "") -> dict:
    """The pool page: ``catalog.pool_detail`` with its shuffle quality charted."""
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
        "recipe": charts.recipe_card((detail["pool"].params or {}).get("recipe")),
    }


def _training_figure(training: list[dict]) -> dict:
    """Training loss of the runs that read this pool or another shuffle of its documents,
    with each pool's shard boundaries in the run's colour."""
    colour = {p.pk: i for i, p in enumerate(dict.fromkeys(t["pool"] for t in training))}
    series = [
        {
            "name": f"{t['run'].name} ({t['pool'].name})",
            "x": t["steps"],
            "y": t["loss"],
            "colour": colour[t["pool"].pk],
        }
        for t in training
    ]
    bounds: dict[Any, Any] = {}
    for t in training:
        for s in t["shard_steps"]:
            bounds.setdefault(
                (t["pool"].pk, round(s, 3)),
                {"x": round(s, 3), "label": "", "colour": colour[t["pool"].pk]},
            )
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
    if report.get("computing"):
        return {"computing": report["computing"]}
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


def mixture_version_detail(*, version_id: int, by: str = "") -> dict:
    """The version page: ``catalog.mixture_version_detail`` with its tokens and epochs per
    pool, its composition over training, its mixing quality and its lineage charted. Not
    built (yet): the planned shares by weight, with nothing on the x axis."""
    detail = catalog.mixture_version_detail(version_id=version_id, by=by)
    version, components, schedule = detail["version"], detail["components"], detail["schedule"]
    quality = version_quality(detail["quality"], names=schedule["names"] if schedule else {})
    if schedule is not None:
        rows = schedule["pools"]
        composition = charts.schedule_composition(
            schedule["stages"],
            [r["pool"] for r in rows],
            title="Composition over training (stages in schedule order)",
        )
    else:
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
        **{k: detail[k] for k in ("version", "components", "runs", "exports", "materialized")},
        "tainted": detail["tainted"],
        "quality": quality,
        "by": "" if by == "pool" else by,
        "properties": detail["properties"],
        "epochs_figure": charts.predicted_epochs(rows, title="Tokens and epochs per pool"),
        "heatmap_figure": composition,
        "deviation_figure": charts.window_deviation(quality.get("curve") or {}),
        "lineage_figure": lineage_figure(detail["lineage"]),
        "recipe": charts.recipe_card(
            (version.params or {}).get("recipe"),
            unit="samples",
            stages=len((version.params or {}).get("stages") or []),
        ),
    }


def version_quality(report: dict, *, names: dict[str, str]) -> dict:
    """A version's schedule quality (``catalog.mixture_version_detail``'s ``quality``)
    with series named by the pools' catalog names (``names``: schedule key -> name),
    reshaped for the charts, with every stage's verdict under ``stages``."""
    if report and report.get("computing"):
        return {"computing": report["computing"]}
    if not report or report.get("error"):
        return {"error": (report or {}).get("error", "")}
    report = {**report}
    for part in ("windows", "composition"):
        if report.get(part):
            report[part] = {
                **report[part],
                "labels": [names.get(x, x) for x in report[part]["labels"]],
            }
    out = quality_for_charts(report) if report.get("windows") else {"report": report}
    stages: list[dict[str, Any]] = []
    out["stages"] = stages
    for st in report.get("stages") or []:
        verdict = st["verdict"]
        if "value" in verdict:  # one pool only: its catalog name
            value = names.get(verdict["value"], verdict["value"])
            verdict = {**verdict, "text": f"one {report['label']} only ({value}): nothing to mix"}
        labels = [{**r, "label": names.get(r["label"], r["label"])} for r in st.get("labels") or []]
        stages.append({**st, "verdict": verdict, "labels": labels})
    return out


def audit_search(*, source: str, file_path: str = "", document_id: int | None = None) -> dict:
    """``catalog.audit_search``; a source or file that does not exist shows as ``error``."""
    try:
        return catalog.audit_search(source=source, file_path=file_path, document_id=document_id)
    except NotFound as e:
        return {"error": str(e)}


def flag_detail(*, flag_id: int, page=1, documents_after=None) -> dict:
    """The flag page: the flag, a page of the documents it names, each item it taints
    (once) linked to its page, and a summary counting each kind once; ``taint`` says when
    that is still being computed."""
    detail = catalog.flag_detail(flag_id=flag_id, page=page, documents_after=documents_after)
    keys = ("page", "has_next", "has_prev", "reads", "taint", "document_ids", "documents_after")
    return {
        **{k: detail[k] for k in (*keys, "documents_next")},
        "flag": detail["flag"],
        "taints": [taint_link(t) for t in detail["taints"]],
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


# --- resume positions -------------------------------------------------------------------


def loader_snippet(position: dict) -> str:
    """Python a trainer pastes to continue exactly where the report left off."""
    remote = storage.is_remote(position["pool_path"])
    # The run's next sample, as the stream snippet's next_sample counts it (in the run's
    # numbering); a run that switched versions reads it as another sample of its version.
    sample, local = position["sample"], position.get("version_sample", position["sample"])
    within = f" (sample {local} of the version it reads now)" if local != sample else ""
    return (
        "from shardcore.pool import Pool\n"
        + ("# a pool on object storage opens from a checked local copy of it\n" if remote else "")
        + f"# {position['pool']}, stage {position['stage']}\n"
        f"pool = Pool({position['pool_path']!r})\n"
        f"# the run's next sample is {sample}{within}: record {position['record_in_shard']} of "
        f"shard {position['shard']}, in epoch {position['epoch']} of this pool\n"
        f"start_record = {position['record']}\n"
        f"token_offset = {position.get('token_offset', 0)}  # tokens consumed of that record\n"
    )


def stream_snippet(mixture_path, sample: int) -> str:
    """Python that streams the mixture (or a run's segments, a list) from ``sample`` on
    with ``shardcore.loader``."""
    path = mixture_path if isinstance(mixture_path, list) else str(mixture_path)
    what = "the run's versions" if isinstance(path, list) else "the mixture"
    return (
        f"\n# Or stream {what} from there, exactly, with any world size and workers:\n"
        "from shardcore.loader import ShardyardIterableDataset, ShardyardLoader, resume_state\n"
        f"path = {path!r}\n"
        "# rank and world size: torch.distributed's, or torchrun's RANK and WORLD_SIZE\n"
        "dataset = ShardyardIterableDataset(path)\n"
        f"dataset.load_state_dict(resume_state(path, next_sample={int(sample)}))\n"
        "loader = ShardyardLoader(dataset, batch_size=8)  # your per-rank batch size\n"
    )


# --- mixture builder --------------------------------------------------------------------


def builder_context() -> dict:
    return {
        "pools": catalog.builder_pools(),
        "mixtures": catalog.mixture_names(),
        "orders": list(ORDERINGS),  # every ordering a spec takes, greedy_block too
    }


def mixture_predict(*, payload: dict) -> dict:
    """The builder's live answer (``catalog.mixture_draft_predict``) with two figures."""
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

"""Training runs: a page of runs, a run with its progress, stage starts and lineage, its
losses beside other runs of the same mixture, its segments, where it resumes
(``run_resume_position``) and the next stage's weights its losses propose
(``run_mixture_proposal``)."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
from typing import Any

from django.db import connection
from django.db.models import Count

from shardcore import manifest as mf
from shardcore import storage
from shardcore.adapt import RULE, propose_weights
from shardcore.blend import blend_at
from shardcore.errors import InputError, ShardcoreError
from shardcore.flagged_reads import step_of_sample
from shardcore.locate import locate_mixture, locate_pool
from shardcore.manifest import read_manifest
from shardcore.mixture import Mixture
from webapp.catalog.builder import MAIN
from webapp.catalog.errors import CatalogError, boundary, refused
from webapp.catalog.models import (
    MixtureComponent,
    MixtureVersion,
    RunLoss,
    RunProgress,
    RunSegment,
    Taint,
    TrainingRun,
)
from webapp.catalog.selectors import facts
from webapp.catalog.selectors.common import get_or_not_found
from webapp.catalog.selectors.lineage import version_lineage
from webapp.catalog.selectors.mixtures import version_built
from webapp.paging import paged

PROGRESS_POINTS = 2000
OVERLAY_RUNS = 4
LOSS_POINTS = 5000


def run_list(*, offset: int = 0, limit: int = 50) -> list[TrainingRun]:
    """A slice of runs, newest first, with their mixture version and how many taints each
    has (``num_taints``): two queries."""
    # The page first (the created_at index), then its runs' taints: no count over every run.
    runs = list(
        TrainingRun.objects.select_related("mixture_version__mixture").order_by("-created_at")[
            offset : offset + limit
        ]
    )
    counts = dict(
        Taint.objects.filter(run_id__in=[r.pk for r in runs])
        .values("run_id")
        .annotate(n=Count("id"))
        .values_list("run_id", "n")
    )
    for r in runs:
        r.num_taints = counts.get(r.pk, 0)  # type: ignore[attr-defined]  # shown beside it
    return runs


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


def run_budget(*, run: TrainingRun, segments: list[RunSegment] | None = None) -> int:
    """The run's token budget: the budget of the first version it read. A switch saves a
    version whose budget is what the old one had left (``run_switch``), so the version the
    run reads now holds only the rest, never the run's whole budget."""
    segments = segments if segments is not None else run_segments(run=run)
    first = segments[0].mixture_version if segments else run.mixture_version
    return int(first.token_budget)


def runs_with_val_losses(*, mixture_id: int | None = None, limit: int = 50) -> list[TrainingRun]:
    """Up to ``limit`` runs that reported a validation loss (of the mixture ``mixture_id``
    when given), by mixture and run name, with their version and mixture: one query."""
    runs = TrainingRun.objects.filter(losses__split="val")
    if mixture_id is not None:
        runs = runs.filter(mixture_version__mixture_id=mixture_id)
    return list(
        runs.select_related("mixture_version__mixture")
        .distinct()
        .order_by("mixture_version__mixture__name", "name")[:limit]
    )


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
    # The version's samples count from where the run switched to it (0 if it never did).
    offset = run_segments(run=run)[-1].first_sample
    out = []
    for st in stages:
        first = offset + int(st["first_sample"])
        read = step_of_sample_at(run, first)
        past = (
            RunProgress.objects.filter(run=run, consumed_samples__gte=first)
            .order_by("consumed_samples", "step")
            .values_list("step", flat=True)
            .first()
        )
        out.append(
            {
                "name": str(st["name"]),
                "sample": first,
                "tokens": first * seq_len,
                "step": read["step"] if read["read"] else None,
                "first_report_step": past,
            }
        )
    return out


def steps_of_samples(reports: list[tuple[int, int]]):
    """``sample -> shardcore.flagged_reads.step_of_sample(sample, reports)`` for many samples
    of one run: the reports sorted once, each answer a binary search (over the running
    maximum of consumed samples: the first report past a sample in step order)."""
    points = sorted({(int(s), int(c)) for s, c in reports})
    reach = list(itertools.accumulate((c for _, c in points), max))

    def step_of(sample: int) -> dict:
        i = bisect.bisect_right(reach, sample)
        around = points[max(0, i - 1) : i + 1] if i < len(points) else points[-1:]
        return step_of_sample(sample, around)

    return step_of


_STEPS_AT_SQL = """
SELECT q.run_id, a.step, a.consumed_samples, b.step, b.consumed_samples, c.step,
       c.consumed_samples
FROM unnest(%s::bigint[], %s::bigint[]) AS q(run_id, sample)
LEFT JOIN LATERAL (
    SELECT step, consumed_samples FROM catalog_runprogress p
    WHERE p.run_id = q.run_id AND p.consumed_samples > q.sample
    ORDER BY consumed_samples, step LIMIT 1) a ON true
LEFT JOIN LATERAL (
    SELECT step, consumed_samples FROM catalog_runprogress p
    WHERE p.run_id = q.run_id AND p.step < a.step ORDER BY step DESC LIMIT 1) b ON true
LEFT JOIN LATERAL (
    SELECT step, consumed_samples FROM catalog_runprogress p
    WHERE p.run_id = q.run_id AND a.step IS NULL ORDER BY step DESC LIMIT 1) c ON true
"""


def steps_of_samples_at(asked: list[tuple[TrainingRun, int]]) -> dict[int, dict]:
    """``step_of_sample_at`` of many (run, sample) pairs (one sample per run) in one
    query (Postgres; elsewhere one run at a time): {run id: answer}."""
    if not asked:
        return {}
    if connection.vendor != "postgresql":
        return {run.pk: step_of_sample_at(run, sample) for run, sample in asked}
    runs = {run.pk: (run, sample) for run, sample in asked}
    with connection.cursor() as cursor:
        cursor.execute(_STEPS_AT_SQL, [list(runs), [s for _, s in runs.values()]])
        rows = cursor.fetchall()
    out = {}
    for run_id, a_step, a_c, b_step, b_c, c_step, c_c in rows:
        run, sample = runs[run_id]
        if a_step is not None:
            points = [(a_step, a_c)] + ([(b_step, b_c)] if b_step is not None else [])
        elif c_step is not None:
            points = [(c_step, c_c)]
        else:
            points = [(run.last_step, run.consumed_samples)] if run.consumed_samples else []
        out[run_id] = step_of_sample(sample, points)
    return out


def step_of_sample_at(run: TrainingRun, sample: int) -> dict:
    """``shardcore.flagged_reads.step_of_sample`` of ``run``'s progress reports, from the two
    reports around ``sample`` only (the first that consumed past it and the one before,
    by the (run, consumed samples) and (run, step) indexes): the same answer for a run
    whose consumed samples grow with its steps, at a cost independent of how many reports
    the run or the catalog holds. A run whose reports were pruned answers from its
    latest position."""
    after = (
        RunProgress.objects.filter(run=run, consumed_samples__gt=sample)
        .order_by("consumed_samples", "step")
        .values_list("step", "consumed_samples")
        .first()
    )
    if after is None:
        last = (
            RunProgress.objects.filter(run=run)
            .order_by("-step")
            .values_list("step", "consumed_samples")
            .first()
        )
        if last is None and run.consumed_samples:
            last = (run.last_step, run.consumed_samples)
        return step_of_sample(sample, [last] if last else [])
    before = (
        RunProgress.objects.filter(run=run, step__lt=after[0])
        .order_by("-step")
        .values_list("step", "consumed_samples")
        .first()
    )
    return step_of_sample(sample, [p for p in (before, after) if p is not None])


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
        .values_list(
            "run_id", "split", "series", "pool__name", "source", "step", "loss", "consumed_tokens"
        )[: LOSS_POINTS * len(runs)]
    )
    references = [
        (r.pk, r.name)
        for r in runs_with_val_losses(mixture_id=run.mixture_version.mixture_id, limit=51)
        if r.pk != run.pk
    ][:50]
    return {"runs": runs, "rows": rows, "references": references}


def run_segments(*, run: TrainingRun) -> list[RunSegment]:
    """The mixture versions the run read, in order (``RunSegment`` rows, the version
    loaded): the recorded segments, or for a run that never switched one unsaved segment,
    its version from sample 0 on. One query."""
    rows = list(
        RunSegment.objects.filter(run_id=run.pk)
        .select_related("mixture_version__mixture")
        .order_by("index")
    )
    if rows:
        return rows
    return [
        RunSegment(
            run=run, index=0, mixture_version=run.mixture_version, first_sample=0, first_step=1
        )
    ]


def runs_segments(runs: list[TrainingRun]) -> dict[int, list[RunSegment]]:
    """``run_segments`` of each of ``runs`` (with ``mixture_version`` loaded): one query."""
    recorded: dict[int, list[RunSegment]] = {}
    for g in RunSegment.objects.filter(run__in=runs).select_related("mixture_version"):
        recorded.setdefault(g.run_id, []).append(g)
    return {
        r.pk: sorted(recorded.get(r.pk, []), key=lambda g: g.index)
        or [RunSegment(run=r, index=0, mixture_version=r.mixture_version, first_sample=0)]
        for r in runs
    }


def run_segment_rows(*, run: TrainingRun) -> list[dict]:
    """The versions the run read, in order, with the run's samples and steps each gave
    (the lineage of a switch); a run that never switched has one row."""
    rows = []
    for g in run_segments(run=run):
        end = g.end_sample
        rows.append(
            {
                "segment": g,
                "version": g.mixture_version,
                "samples": f"[{g.first_sample:,}, {'…' if end is None else f'{end:,}'})",
                "steps": f"{g.first_step:,} – {'…' if end is None else _step_at(run, end)}",
            }
        )
    return rows


def _step_at(run: TrainingRun, sample: int) -> int | None:
    """The step whose progress report reached ``sample`` consumed samples (None if none)."""
    return (
        RunProgress.objects.filter(run=run, consumed_samples__gte=sample)
        .order_by("step")
        .values_list("step", flat=True)
        .first()
    )


def run_loss_marks(*, run: TrainingRun) -> dict[str, list[dict]]:
    """What the loss charts mark, in the run's samples: ``stages``, where each stage after
    the first of each version it read starts, and where it switched version; ``epochs``,
    where each pool's next pass over its records starts (``Mixture.epoch_starts``). Each
    with its tokens (sample x seq_len) and the step that read it (``step_of_sample``:
    exact between two reports at a constant rate; None before the run got there)."""
    reports = list(
        RunProgress.objects.filter(run=run).order_by("step").values_list("step", "consumed_samples")
    )

    step_of = steps_of_samples(reports)

    def at(sample: int, seq_len: int) -> dict:
        # The step that read the sample, as the progress chart and run_stages say it
        # (exact between two reports), not the next reported step.
        read = step_of(sample)
        step = read["step"] if read["read"] else None
        return {"sample": sample, "tokens": sample * seq_len, "step": step}

    segments = run_segments(run=run)
    pools = {
        storage.resolve(c.pool.path): c.pool
        for c in MixtureComponent.objects.filter(
            version__in=[g.mixture_version_id for g in segments]
        ).select_related("pool")
    }
    # Epoch starts are measured from each version's schedule by a task and stored.
    epoch_facts = facts.facts_read("version_epochs", [g.mixture_version_id for g in segments])
    stages, epochs = [], []
    for g in segments:
        try:
            manifest = read_manifest(g.mixture_version.path)
        except (ShardcoreError, OSError, ValueError):
            continue
        seq_len = int(manifest.get("seq_len") or 0)
        stop = None if g.end_sample is None else g.end_sample - g.first_sample
        if g.index:
            # The switch is between two steps: marked at the last step of the old version
            # (the segment records the new one's first step).
            stages.append(
                {
                    "label": f"switch to v{g.mixture_version.number}",
                    **at(g.first_sample, seq_len),
                    "step": g.first_step - 1,
                }
            )
        for st in manifest.get("stages", [])[1:]:
            if stop is None or st["first_sample"] < stop:
                stages.append(
                    {
                        "label": f"stage {st['name']}",
                        **at(g.first_sample + st["first_sample"], seq_len),
                    }
                )
        known = epoch_facts.get(g.mixture_version_id)
        if not known:
            continue  # not measured yet (or no schedule to read epochs from)
        for e in known["starts"]:
            if stop is not None and e["sample"] >= stop:
                break  # in sample order
            where = storage.resolve(known["paths"][e["pool"]])
            pool = pools.get(where)
            name = pool.name if pool else where.rsplit("/", 1)[-1]  # the pool's directory
            epochs.append(
                {
                    "label": f"{name} epoch {e['epoch'] + 1}",
                    "pool": pool.pk if pool else None,
                    **at(g.first_sample + e["sample"], seq_len),
                }
            )
    return {"stages": stages, "epochs": epochs}


def run_segment_start(run_id: int) -> int:
    """The run's sample where its current version starts (0 unless it switched)."""
    return (
        RunSegment.objects.filter(run_id=run_id, end_sample__isnull=True)
        .values_list("first_sample", flat=True)
        .first()
        or 0
    )


# --- where a run resumes, and the next stage's weights ---------------------------------


def run_mixture_proposal(
    *, run_id: int, reference_run_id: int, eta: float = 1.0, smoothing: float = 1e-3
) -> dict[str, Any]:
    """The next stage's weights for the run's pools by ``shardcore.adapt.propose_weights``
    (DoReMi's exponentiated excess loss): the run's latest validation loss per pool (its
    latest step with a whole-pool loss for every pool of its version) against the
    reference run's at the same step, or else its latest step before it. The reference
    must have reported those pools. CatalogError says what is missing.

    Losses a saved proposal read are not read again: after the run switched to a proposal
    (its segment records it), a proposal needs the run's losses after that switch, else
    the same evidence would move the new weights once more. ``base_version`` (the version
    whose weights it replaces) and ``fingerprint`` (of that version, the losses' steps,
    the reference, the rule and the proposed weights) name the proposal: saving it
    (``runs.run_switch``) checks it is still the one shown."""

    run = TrainingRun.objects.select_related("mixture_version").get(pk=run_id)
    ref = TrainingRun.objects.filter(pk=reference_run_id).first()
    if ref is None:
        raise CatalogError(f"reference: no run {reference_run_id}")
    if ref.pk == run.pk:
        # Its losses against themselves: no excess loss, the proposal would be its weights.
        raise CatalogError(
            f"reference: run {run.name} cannot be its own reference; choose another run "
            f"of {run.mixture_version.mixture.name}"
        )
    saved = run_proposal_saved(run.pk)
    # The stage the run is in: its weights are the ones a switch replaces; the pools of
    # other stages (an anneal's, while the run is in main) keep theirs.
    stage = _stage_at(run.mixture_version, int(run.consumed_samples) - run_segment_start(run.pk))
    comps = [
        c
        for c in MixtureComponent.objects.filter(version=run.mixture_version).select_related("pool")
        if (c.stage or MAIN) == stage
    ]
    weights: dict[int, float] = {}
    for c in comps:
        weights[c.pool_id] = weights.get(c.pool_id, 0.0) + c.weight
    names = {c.pool_id: c.pool.name for c in comps}

    def by_step(r: TrainingRun) -> dict[int, dict[int, float]]:
        out: dict[int, dict[int, float]] = {}
        rows = RunLoss.objects.filter(run=r, split="val", source="", pool_id__in=weights)
        for step, pool, loss in rows.values_list("step", "pool_id", "loss"):
            out.setdefault(step, {})[pool] = loss
        return {s: v for s, v in out.items() if set(v) == set(weights)}

    mine = by_step(run)
    if saved is not None and mine and max(mine) <= proposal_read_until(saved):
        raise CatalogError(
            f"run {run.name}: the proposal from its losses at step "
            f"{saved.proposal['step']:,} (against run {saved.proposal['reference']}) was "
            f"saved as {saved.mixture_version}, which the run reads from step "
            f"{saved.first_step:,}; a new proposal needs its validation losses after step "
            f"{proposal_read_until(saved):,}"
        )
    if not mine:
        raise CatalogError(
            f"run {run.name} has no step with a validation loss for each of its pools "
            f"({', '.join(names.values())})"
        )
    step = max(mine)
    theirs = by_step(ref)
    ref_steps = [s for s in theirs if s <= step]
    if not ref_steps:
        raise CatalogError(
            f"reference: run {ref.name} has no validation loss for each of the pools "
            f"{', '.join(names.values())} at or before step {step}"
        )
    ref_step = max(ref_steps)
    try:
        proposal = propose_weights(
            weights,
            mine[step],
            theirs[ref_step],
            eta=eta,
            smoothing=smoothing,
        )
    except InputError as e:
        raise CatalogError(str(e)) from e
    out: dict[str, Any] = {
        "rule": RULE,
        "eta": eta,
        "smoothing": smoothing,
        "run": run.pk,
        "reference": ref.pk,
        "base_version": run.mixture_version_id,
        "stage": stage,
        "step": step,
        "reference_step": ref_step,
        "pools": [{"pool": p, "name": names[p], **v} for p, v in proposal.items()],
    }
    named = {
        k: out[k]
        for k in (
            "rule",
            "eta",
            "smoothing",
            "run",
            "reference",
            "base_version",
            "stage",
            "step",
            "reference_step",
        )
    }
    named["weights"] = sorted((p["pool"], p["proposed"]) for p in out["pools"])
    out["fingerprint"] = hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()[:16]
    return out


def run_proposal_draft(*, run: TrainingRun, proposal: dict[str, Any]) -> dict[str, Any]:
    """The mixture builder's draft of ``proposal`` (``run_mixture_proposal``): the run's
    version as it is (its mixture's name, budget, seed, ordering, later stages) with the
    proposed weights in the stage the proposal is for; its first stage is the builder's
    "main"."""
    version = run.mixture_version
    spec = (version.params or {}).get("spec") or {}
    first = str(spec.get("first_stage") or MAIN)
    proposed = {p["pool"]: p["proposed"] for p in proposal["pools"]}
    rows = []
    for c in MixtureComponent.objects.filter(version=version).order_by("pk"):
        stage = c.stage or MAIN
        weight = proposed[c.pool_id] if stage == proposal["stage"] else c.weight
        rows.append(
            {
                "stage": MAIN if stage == first else stage,
                "pool": c.pool_id,
                "weight": round(weight, 6),
            }
        )
    return {
        "name": version.mixture.name,
        "description": (
            f"{proposal['rule']} proposal for run {run.name} against run "
            f"{proposal['reference']} (losses at step {proposal['step']})"
        )[:200],
        "tokens": version.token_budget,
        "seed": version.seed,
        "order": spec.get("order", "blend"),
        "max_repetitions": spec.get("max_repetitions", 4.0),
        "stages": [{"name": st["name"], "tokens": st["tokens"]} for st in spec.get("stages", [])],
        "rows": rows,
    }


def run_proposal_saved(run_id: int) -> RunSegment | None:
    """The run's latest segment that a saved proposal started (its version loaded)."""
    return (
        RunSegment.objects.filter(run_id=run_id)
        .exclude(proposal={})
        .select_related("mixture_version__mixture")
        .order_by("-index")
        .first()
    )


def proposal_read_until(segment: RunSegment) -> int:
    """The last step whose losses the proposal saved as ``segment`` may have read: the
    losses' step, and every step before the run switched."""
    return max(int(segment.proposal["step"]), segment.first_step - 1)


def _stage_at(version: MixtureVersion, sample: int) -> str:
    """The name of the stage of ``version`` that holds its sample ``sample`` (its last
    stage past the end; "main" while the version has no built schedule)."""
    if not version_built(version):
        return MAIN
    stages = mf.read_manifest(version.path)["stages"]
    inside = [st["name"] for st in stages if st["first_sample"] <= max(sample, 0)]
    return inside[-1] if inside else MAIN


@boundary
def run_resume_position(*, run_id: int, sample: int | None = None) -> dict[str, Any]:
    """Where the run continues: ``shardcore.locate.locate_mixture`` on the version's
    schedule (stage, pool, shard, record, token offset; the same answer as ``shardyard
    locate``), plus the pool's catalog row and the epoch of the pool being read. Nothing is
    scanned for pools read at most once. ``sample`` defaults to the run's consumed
    position: its consumed tokens when they agree with its consumed samples (then the
    token offset into the next sample is exact), else its consumed samples."""

    run = TrainingRun.objects.select_related("mixture_version").get(pk=run_id)
    segments = run_segments(run=run)
    at = run.consumed_samples if sample is None else int(sample)
    # The segment the next sample belongs to (a run switched at its position reads the
    # new version next); its version's own sample numbering.
    segment = next(g for g in reversed(segments) if g.first_sample <= at or g is segments[0])
    version, first = segment.mixture_version, segment.first_sample
    if len(segments) == 1 and not version_built(version):
        return _resume_by_blend(run, sample)
    with refused(f"run {run.name}"):
        mix = Mixture(version.path, ranged=True)
        seq_len = mix.seq_len
        if sample is None and run.consumed_tokens // seq_len == run.consumed_samples:
            where = locate_mixture(version.path, tokens=run.consumed_tokens - first * seq_len)
        else:
            where = locate_mixture(version.path, sample=at - first)
    pool_info = mix.pools[where["pool"]]
    pools = {
        storage.resolve(c.pool.path): c.pool
        for c in MixtureComponent.objects.filter(version=version).select_related("pool")
    }
    pool = pools.get(storage.resolve(where["pool_path"]))
    epoch = 0
    if pool_info["epochs"] > 1 or pool_info.get("first_read"):
        # Repeated pools: the epoch is how often this pool was read before the sample
        # (the schedule's per-chunk counts and at most a chunk of its pool column).
        before = int(mix.reads_before(where["sample"])[where["pool"]])
        epoch = (int(pool_info.get("first_read", 0)) + before) // int(pool_info["num_records"])
    return {
        **where,
        "sample": first + where["sample"],
        "mixture_version": version.pk,
        "version_sample": where["sample"],
        "segment": segment.index,
        "segments": [
            {
                "version": g.mixture_version_id,
                "path": g.mixture_version.path,
                "first_sample": g.first_sample,
                "end_sample": g.end_sample,
            }
            for g in segments
        ],
        "run": run.pk,
        "pool": pool.name if pool else where["pool_key"],
        "pool_index": where["pool"],
        "pool_id": pool.pk if pool else None,
        "epoch": epoch,
        "shard_path": storage.join(where["pool_path"], where["shard_prefix"]),
    }


def _resume_by_blend(run: TrainingRun, sample: int | None) -> dict[str, Any]:
    """Resume in a version without a schedule on disk: Megatron's blend over the
    components' weights, then ``locate_pool`` in the pool read."""

    sample = int(run.consumed_samples if sample is None else sample)
    comps = list(
        MixtureComponent.objects.filter(version_id=run.mixture_version_id)
        .select_related("pool")
        .order_by("id")
    )
    if not comps:
        raise CatalogError("the mixture version has no components")
    if len(comps) == 1:
        comp, pool_sample = comps[0], sample
    else:
        index, pool_sample = blend_at([c.weight for c in comps], sample)
        comp = comps[index]
    manifest = mf.read_manifest(comp.pool.path)
    total = int(manifest["num_records"])
    if total == 0:
        raise CatalogError(f"pool {comp.pool.name} has no records")
    epoch, record = divmod(pool_sample, total)
    where = locate_pool(manifest, sample=record)
    return {
        "run": run.pk,
        "sample": sample,
        "pool_id": comp.pool_id,
        "pool": comp.pool.name,
        "pool_path": comp.pool.path,
        "stage": comp.stage,
        "epoch": epoch,
        "record": record,
        **{k: v for k, v in where.items() if k not in ("sample",)},
    }

"""Training runs: a page of runs, and a run's lineage down to its sources."""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db.models import Count

from shardcore.errors import ShardcoreError
from shardcore.manifest import read_manifest
from shardcore.mixture import Mixture
from webapp.catalog.models import (
    MixtureComponent,
    Pool,
    RunProgress,
    RunSegment,
    Source,
    Taint,
    TokenizedSource,
    TrainingRun,
)


def run_list(*, offset: int = 0, limit: int = 50) -> list[TrainingRun]:
    """A page of runs with their mixture version and whether they are tainted: two
    queries (the runs with a tainted flag annotated, and nothing else)."""
    return list(
        TrainingRun.objects.select_related("mixture_version__mixture")
        .annotate(num_taints=Count("taints"))
        .order_by("-created_at")[offset : offset + limit]
    )


@dataclass
class RunLineage:
    run: TrainingRun
    components: list[MixtureComponent]
    pools: list[Pool]  # the components' pools
    tokenized: list[TokenizedSource]
    sources: list[Source]
    taints: list[Taint]
    extra: dict[str, Any] = field(default_factory=dict)


def run_lineage(*, run_id: int) -> RunLineage:
    """Which sources fed this run: run -> version -> components -> pools -> tokenized
    sources -> sources. Four queries whatever the size of the tree."""
    run = TrainingRun.objects.select_related("mixture_version__mixture").get(pk=run_id)
    components = list(
        MixtureComponent.objects.filter(version_id=run.mixture_version_id)
        .select_related("pool")
        .order_by("id")
    )
    pool_ids = [c.pool_id for c in components]
    tokenized = list(
        TokenizedSource.objects.filter(pools__in=pool_ids)
        .select_related("source", "tokenizer")
        .distinct()
        .order_by("pk")
    )
    taints = list(Taint.objects.filter(run=run).select_related("flag", "flag__source"))
    return RunLineage(
        run=run,
        components=components,
        pools=[c.pool for c in components],
        tokenized=tokenized,
        sources=sorted({t.source for t in tokenized}, key=lambda s: s.name),
        taints=taints,
    )


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
    with its tokens (sample x seq_len) and the first step whose progress report had
    consumed it (None before the run got there)."""
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

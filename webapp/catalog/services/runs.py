"""Writes for training runs: registration, progress and loss reports, the switch to new
weights. Reads (where a run resumes, the next stage's proposed weights) are in
``webapp.catalog.selectors.runs``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.db.models import Exists, F, Max, OuterRef, Q, Subquery
from django.utils import timezone

from shardcore import limits
from shardcore import manifest as mf
from shardcore.errors import InputError
from shardcore.mixture import continuation
from webapp.catalog.errors import CatalogError, RunPermissionError, RunSwitchedError, refused
from webapp.catalog.models import (
    ArtifactStatus,
    MixtureComponent,
    MixtureVersion,
    Pool,
    RunLoss,
    RunProgress,
    RunSegment,
    Source,
    Taint,
    TrainingRun,
)
from webapp.catalog.scrub import corruption_refresh
from webapp.catalog.selectors.mixtures import version_built
from webapp.catalog.selectors.runs import (
    proposal_read_until,
    run_proposal_saved,
    run_segment_start,
    run_segments,
)
from webapp.catalog.services.common import checked_name
from webapp.catalog.services.flags import taint_refresh_request
from webapp.catalog.services.mixtures import (
    _stage_name,
    mixture_version_create,
    version_source_ids,
)
from webapp.roles import ROLES, has_role, may_write_run, user_role


def run_register(
    *,
    name: str,
    mixture_version_id: int,
    external_id: str = "",
    team: str | None = None,
    created_by=None,
) -> TrainingRun:
    """Register a run against a ready mixture version; ``created_by`` owns it and, with
    ``team`` (a group ``created_by`` belongs to), so does the team. Idempotent by name for
    whoever may write the run (a trainer that retries after a lost answer gets the same
    run); anyone else's registration of a taken name is refused. A run on tainted data is
    tainted. ``created_by=None`` is an operator's command: no owner, no checks."""

    name = checked_name(name, "run name", max_length=200)
    version = MixtureVersion.objects.filter(pk=mixture_version_id).first()
    if version is None:
        raise CatalogError(f"no mixture version {mixture_version_id}")
    if version.status != ArtifactStatus.READY:
        raise CatalogError(f"mixture version {version} is {version.status}; train on a ready one")
    group = None
    if team:
        group = Group.objects.filter(name=team).exclude(name__in=ROLES).first()
        if group is None:
            raise CatalogError(f"team: no team {team!r} (a group other than the roles)")
        if (
            created_by is not None
            and user_role(created_by) != "admin"
            and not created_by.groups.filter(pk=group.pk).exists()
        ):
            raise RunPermissionError(f"team: you are not a member of {team!r}")
    with transaction.atomic():
        run, created = TrainingRun.objects.get_or_create(
            name=name,
            defaults={
                "mixture_version": version,
                "external_id": external_id,
                "created_by": created_by,
                "team": group,
            },
        )
        if not created and created_by is not None and not may_write_run(created_by, run):
            raise RunPermissionError(f"run {name!r} exists already and belongs to another user")
        if (
            not created
            and run.mixture_version_id != version.pk
            and not run.segments.filter(mixture_version=version).exists()
        ):
            raise CatalogError(
                f"run {name!r} exists already, on mixture version {run.mixture_version_id}"
            )
        if created:
            Taint.objects.bulk_create(
                [
                    Taint(flag_id=f, run=run, documents=n)
                    for f, n in Taint.objects.filter(mixture_version=version).values_list(
                        "flag_id", "documents"
                    )
                ]
            )
            if version.corruptions.exists():
                corruption_refresh()
    return run


def run_progress_record(
    *,
    run_id: int,
    step: int,
    consumed_samples: int | None = None,
    consumed_tokens: int | None = None,
    mixture_version: int | None = None,
    actor=None,
) -> TrainingRun:
    """Record the run's position at ``step`` (``POST /api/runs/{id}/progress/``, called by
    every training step): one row per step, the run never moves backwards, a registered
    run becomes running. The first report of a step wins: a retried (or concurrent)
    report of a recorded step records nothing and answers the run as it is, whatever
    counts it gives (a unique constraint on (run, step) enforces it: the report is
    inserted with ON CONFLICT DO NOTHING). Samples, or only tokens: a sample is
    one record of ``seq_len`` trained tokens. Raises TrainingRun.DoesNotExist.

    A report is bounded by the run's mixture version (no step, sample or token beyond its
    schedule: a step reads at least one sample) and monotonic: samples and tokens never
    decrease with the step across the run's reports, so a report lies between the
    recorded reports on each side of its step; anything else is a CatalogError naming the
    field and those reports, never recorded. ``actor`` (the API's user) must own the
    run, belong to its team or be an admin (RunPermissionError); None is an operator.
    After a switch of version the run's samples go on counting from where it switched: a
    report is bounded by the current segment's first sample plus its version's size.
    ``mixture_version``, the version the trainer read up to this report, is checked
    against the run's segments: a report that read the old version past the switch is
    refused with RunSwitchedError.

    At most three statements for a report after the run's last: one locks the run and
    reads everything the checks need (the version's seq_len and size, the actor's team
    membership, its last report), then the report is inserted unless its step is
    recorded, and the run moved forward if it was. A late report (a step before the run's
    last) reads the reports on each side of it after the lock, in one more."""

    if consumed_samples is None and consumed_tokens is None:
        raise CatalogError("give consumed_samples or consumed_tokens")
    if step < 0 or min(consumed_samples or 0, consumed_tokens or 0) < 0:
        raise CatalogError("step and consumed samples must be >= 0")
    member = get_user_model().groups.through.objects.filter(
        # No actor: no membership row matches (user_id IS NULL matches none).
        user_id=actor.pk if actor is not None else None,  # type: ignore[misc]
        group_id=OuterRef("team_id"),
    )
    seq_len = (
        MixtureComponent.objects.filter(version_id=OuterRef("mixture_version_id"))
        .values("version_id")
        .annotate(m=Max("pool__seq_len"))
        .values("m")
    )
    with transaction.atomic():
        # Reports of one run are serialized by the lock. Whether the step is recorded is
        # not read here: this statement's snapshot predates the lock it may wait for, so
        # it could miss the report that held the lock. The insert below decides.
        run = (
            TrainingRun.objects.select_for_update(of=("self",))
            .annotate(
                version_seq_len=Subquery(seq_len),
                version_samples=F("mixture_version__num_samples"),
                version_budget=F("mixture_version__token_budget"),
                in_team=Exists(member),
                # The run's sample where its current version starts (None: it never switched).
                segment_start=Subquery(
                    RunSegment.objects.filter(
                        run_id=OuterRef("pk"), end_sample__isnull=True
                    ).values("first_sample")[:1]
                ),
            )
            .get(pk=run_id)
        )
        _may_write(run, actor, in_team=bool(run.in_team))
        consumed_samples, consumed_tokens = _progress_check(
            run,
            step=step,
            samples=consumed_samples,
            tokens=consumed_tokens,
            seq_len=run.version_seq_len or 0,
            num_samples=run.version_samples or 0,
            token_budget=run.version_budget or 0,
            first_sample=run.segment_start or 0,
        )
        if step < run.last_step and not _between_neighbours(
            run, step=step, samples=consumed_samples, tokens=consumed_tokens
        ):
            return run  # the step was recorded: the first report wins
        if mixture_version is not None:
            _read_version_check(run, mixture_version, consumed_samples)
        now = timezone.now()
        if not _progress_insert(run_id, step, consumed_samples, consumed_tokens, now):
            return run  # the step was recorded: the first report wins
        if step >= run.last_step:
            # A new report at or after the last step moves the run forward.
            run.last_step, run.last_reported_at = step, now
            run.consumed_samples, run.consumed_tokens = consumed_samples, consumed_tokens
            if run.state == TrainingRun.State.REGISTERED:
                run.state = TrainingRun.State.RUNNING
            TrainingRun.objects.filter(pk=run_id).update(
                last_step=step,
                consumed_samples=consumed_samples,
                consumed_tokens=consumed_tokens,
                last_reported_at=now,
                state=run.state,
            )
    return run


def _progress_insert(run_id: int, step: int, samples: int, tokens: int, at) -> bool:
    """Insert the report of ``step`` unless one is recorded (INSERT ... ON CONFLICT DO
    NOTHING on the (run, step) constraint, in Postgres and SQLite alike); whether it was."""

    table = connection.ops.quote_name(RunProgress._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (run_id, step, consumed_samples, consumed_tokens, reported_at)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id, step) DO NOTHING RETURNING id",
            [run_id, step, samples, tokens, connection.ops.adapt_datetimefield_value(at)],
        )
        return cursor.fetchone() is not None


def _read_version_check(run: TrainingRun, version_id: int, samples: int) -> None:
    """Refuse a report whose trainer read ``version_id`` up to ``samples`` where the run's
    segments say another version (it switched before)."""
    segments = run_segments(run=run)
    last = max(samples - 1, 0)
    here = next(g for g in reversed(segments) if g.first_sample <= last or g is segments[0])
    starts_here = any(
        g.first_sample == samples and g.mixture_version_id == version_id for g in segments
    )
    if here.mixture_version_id == version_id or starts_here:
        return
    if not any(g.mixture_version_id == version_id for g in segments):
        raise CatalogError(
            f"mixture_version: run {run.name} never read mixture version {version_id}; "
            f"it reads {', '.join(str(g.mixture_version_id) for g in segments)}"
        )
    raise RunSwitchedError(
        f"mixture_version: run {run.name} switched to mixture version "
        f"{here.mixture_version_id} at sample {here.first_sample} (after step "
        f"{here.first_step - 1}); this report read version {version_id} up to sample "
        f"{samples}. Resume from the checkpoint at step {here.first_step - 1} and read the "
        f"run's segments (GET /api/runs/{run.pk}/)"
    )


BIGINT_MAX = 2**63 - 1


def _progress_check(
    run: TrainingRun,
    *,
    step: int,
    samples: int | None,
    tokens: int | None,
    seq_len: int,
    num_samples: int,
    token_budget: int,
    first_sample: int = 0,
) -> tuple[int, int]:
    """(consumed samples, consumed tokens) of a report, or CatalogError naming the field."""
    # The version's size bounds every count: its schedule's samples, else its budget,
    # after the samples the run read before it switched to this version.
    limit = num_samples or (-(-token_budget // seq_len) if seq_len and token_budget else 0)
    known = bool(limit)
    limit += first_sample if known else 0
    if not known:
        limit = BIGINT_MAX // max(seq_len, 1)
    what = f"mixture version {run.mixture_version_id} ({limit} samples)" if known else "a bigint"
    if known and first_sample:
        what = (
            f"the run's {limit} samples ({first_sample} before it switched to mixture "
            f"version {run.mixture_version_id}, then its {limit - first_sample})"
        )
    if step > limit:
        raise CatalogError(
            f"step: {step} is beyond {what}; a step reads at least one sample of the version"
        )
    if samples is not None and samples > limit:
        raise CatalogError(f"consumed_samples: {samples} is beyond {what}")
    if tokens is not None and tokens > limit * max(seq_len, 1):
        raise CatalogError(
            f"consumed_tokens: {tokens} is beyond {what} of {max(seq_len, 1)} tokens each"
        )
    samples, tokens = _progress_counts(samples, tokens, seq_len)
    if step > run.last_step:
        # The run's last report (denormalized on the locked row) is the earlier neighbour.
        _neighbour_check(
            step,
            samples,
            tokens,
            before=(run.last_step, run.consumed_samples, run.consumed_tokens),
            after=None,
        )
    return samples, tokens


Report = tuple[int, int, int]  # (step, consumed samples, consumed tokens)


def _between_neighbours(run: TrainingRun, *, step: int, samples: int, tokens: int) -> bool:
    """Check a report of a step before the run's last against the recorded reports on each
    side of it (CatalogError if it contradicts either); False if ``step`` is recorded (the
    first report wins, whatever this one says). Read after the run's lock, so a report
    recorded meanwhile is seen: one statement, the (run, step) index."""
    near = RunProgress.objects.filter(run_id=run.pk)
    rows = list(
        near.filter(
            Q(step=Subquery(near.filter(step__lte=step).order_by("-step").values("step")[:1]))
            | Q(step=Subquery(near.filter(step__gte=step).order_by("step").values("step")[:1]))
        ).values_list("step", "consumed_samples", "consumed_tokens")
    )
    if any(r[0] == step for r in rows):
        return False
    before = next((r for r in rows if r[0] < step), None)
    after = next((r for r in rows if r[0] > step), None)
    _neighbour_check(step, samples, tokens, before=before, after=after)
    return True


def _neighbour_check(
    step: int, samples: int, tokens: int, *, before: Report | None, after: Report | None
) -> None:
    """A run's samples and tokens never decrease with its steps (a switch of version goes
    on counting from where the run switched): a report of ``step`` lies between the
    recorded reports around it, or is refused with both named."""

    def around() -> str:
        sides = [f"{r[1]} samples, {r[2]} tokens at step {r[0]}" for r in (before, after) if r]
        return " and ".join(sides)

    for field, value, k, unit in (
        ("consumed_samples", samples, 1, "samples"),
        ("consumed_tokens", tokens, 2, "tokens"),
    ):
        if before is not None and value < before[k]:
            raise CatalogError(
                f"{field}: step {step} reports {value} {unit}, fewer than the {before[k]} of "
                f"the earlier step {before[0]} (the run's reports around it: {around()})"
            )
        if after is not None and value > after[k]:
            raise CatalogError(
                f"{field}: step {step} reports {value} {unit}, more than the {after[k]} of "
                f"the later step {after[0]} (the run's reports around it: {around()})"
            )


def _may_write(run: TrainingRun, actor, *, in_team: bool) -> None:

    if actor is None or user_role(actor) == "admin":
        return
    if has_role(actor, "trainer") and (
        (run.created_by_id is not None and run.created_by_id == actor.pk) or in_team
    ):
        return
    raise RunPermissionError(f"run {run.pk} belongs to another user; report to your own runs")


def _progress_counts(samples: int | None, tokens: int | None, seq_len: int) -> tuple[int, int]:
    if samples is None:
        if not seq_len:
            raise CatalogError("the run's mixture has no seq_len: report consumed_samples")
        if tokens is None:
            raise CatalogError("report consumed_samples or consumed_tokens")
        return tokens // seq_len, tokens
    return samples, samples * seq_len if tokens is None else tokens


def _version_seq_len(version_id: int) -> int:
    return max(
        MixtureComponent.objects.filter(version_id=version_id).values_list(
            "pool__seq_len", flat=True
        ),
        default=0,
    )


MAX_LOSS_ROWS = 10_000


def run_losses_record(
    *,
    run_id: int,
    step: int | None = None,
    val: list[dict] | None = None,
    train: list[dict] | None = None,
    actor=None,
) -> dict[str, int]:
    """Record a run's losses (``POST /api/runs/{id}/losses/``, whose serializer checks each
    entry's types and ranges): ``val``, at checkpoint ``step``, is
    ``[{"pool": id, "source": name or "", "loss": x >= 0}]``, the validation loss
    of each pool the run's version reads (its training pool's id or its validation pool's,
    and a source's name to report one source of a pool built from several); ``train`` is
    ``[{"step": s >= 0, "loss": x >= 0}]``, training loss per step. Whoever may report the
    run's progress may report its losses (RunPermissionError otherwise). Every entry is
    checked against the catalog before anything is written; a refusal is a CatalogError
    naming the entry and field.
    A retried report records nothing twice (first report wins). Returns the number of
    rows recorded and of rows already there."""
    val = list(val or [])
    train = list(train or [])
    if not val and not train:
        raise CatalogError("give val (validation losses at a step) or train (losses per step)")
    if len(val) + len(train) > MAX_LOSS_ROWS:
        raise CatalogError(f"at most {MAX_LOSS_ROWS} losses per report")
    if val and step is None:
        raise CatalogError("step: validation losses are reported at a step")
    run = TrainingRun.objects.select_related("mixture_version").filter(pk=run_id).first()
    if run is None:
        raise TrainingRun.DoesNotExist(f"no run {run_id}")
    in_team = bool(
        actor is not None and run.team_id and actor.groups.filter(pk=run.team_id).exists()
    )
    _may_write(run, actor, in_team=in_team)
    version = run.mixture_version
    seq_len = _version_seq_len(version.pk)
    limit = version.num_samples or (
        -(-version.token_budget // seq_len) if seq_len and version.token_budget else 0
    )
    if limit:
        limit += run_segment_start(run.pk)  # after a switch, the samples read before it

    def check_step(value: int, where: str) -> int:
        if limit and value > limit:
            raise CatalogError(
                f"{where}: {value} is beyond mixture version {version.pk} ({limit} samples);"
                " a step reads at least one sample of the version"
            )
        return value

    # The pools a validation loss may name: the pools of the versions the run read (its
    # current one, and before a switch the earlier ones) and their held-out slices.
    read = {version.pk} | set(
        RunSegment.objects.filter(run=run).values_list("mixture_version", flat=True)
    )
    comps = list(
        MixtureComponent.objects.filter(version__in=read)
        .select_related("pool__val_pool")
        .order_by("version_id", "id")
    )
    by_id: dict[int, Pool] = {}
    for c in comps:
        by_id[c.pool.pk] = c.pool
        held_out = getattr(c.pool, "val_pool", None)
        if held_out is not None:
            by_id[held_out.pk] = c.pool
    sources: dict[int, set[str]] = {}
    rows: list[RunLoss] = []
    seen: set[tuple[str, str, int]] = set()
    if val and step is None:
        raise CatalogError("step: required with validation losses")
    val_step = check_step(step, "step") if val and step is not None else 0
    for i, entry in enumerate(val):
        where = f"val[{i}]"
        pool_id = entry["pool"]
        if pool_id not in by_id:
            names = ", ".join(dict.fromkeys(f"{c.pool.name} ({c.pool.pk})" for c in comps))
            raise CatalogError(
                f"{where}.pool: {pool_id!r} is not read by mixture version {version.pk}; "
                f"its pools: {names}"
            )
        pool = by_id[pool_id]
        source = entry.get("source") or ""
        if source:
            if pool.pk not in sources:
                sources[pool.pk] = set(
                    Source.objects.filter(tokenized__pools=pool).values_list("name", flat=True)
                )
            if source not in sources[pool.pk]:
                raise CatalogError(
                    f"{where}.source: {source!r} is not a source of pool {pool.name}; "
                    f"its sources: {', '.join(sorted(sources[pool.pk])) or 'none'}"
                )
        loss = float(entry["loss"])
        series = f"pool:{pool.pk}" + (f"/source:{source}" if source else "")
        if ("val", series, val_step) in seen:
            what = f"pool {pool.name}" + (f" source {source}" if source else "")
            raise CatalogError(f"{where}: {what} is given twice at step {val_step}")
        seen.add(("val", series, val_step))
        rows.append(
            RunLoss(
                run=run,
                split="val",
                step=val_step,
                pool=pool,
                source=source,
                series=series,
                loss=loss,
            )
        )
    for i, entry in enumerate(train):
        where = f"train[{i}]"
        s = check_step(int(entry["step"]), f"{where}.step")
        loss = float(entry["loss"])
        if ("train", "", s) in seen:
            raise CatalogError(f"{where}.step: step {s} is given twice")
        seen.add(("train", "", s))
        rows.append(RunLoss(run=run, split="train", step=s, series="", loss=loss))
    # The token axis: the run's consumed tokens at each step it reported progress for.
    tokens = dict(
        RunProgress.objects.filter(run=run, step__in={r.step for r in rows}).values_list(
            "step", "consumed_tokens"
        )
    )
    for r in rows:
        r.consumed_tokens = tokens.get(r.step)
    with transaction.atomic():
        before = RunLoss.objects.filter(run=run).count()
        RunLoss.objects.bulk_create(rows, ignore_conflicts=True)
        recorded = RunLoss.objects.filter(run=run).count() - before
    return {"recorded": recorded, "already_recorded": len(rows) - recorded}


def run_switch(
    *,
    run_id: int,
    weights: Mapping[int, float],
    note: str = "",
    actor=None,
    proposal: Mapping[str, Any] | None = None,
    add: Iterable[int] = (),
) -> dict[str, Any]:
    """Save new weights (say, the proposal) as a new version of the run's mixture that
    continues from the run's resume position, and switch the run to it there.

    The switch sample is the run's resume position (its last report's consumed samples).
    The new version continues the version the run read up to it
    (``shardcore.mixture.continuation``: each shared pool reads on from where the run left
    it): its first stage is the rest of the stage the run is in, named as it (e.g. "anneal")
    and with ``weights``, then the
    later stages of the old version unchanged; its budget is what the old version had left.
    Its sample 0 is the run's switch sample. The run's segments record the switch (the old
    version closed at that sample, the new one open from it, from the next step on), the
    run reads the new version from then on, and the taint of both versions is asked for
    again (computed by a task).
    A second switch before the run read anything of the first replaces it. Built through
    ``mixture_version_create``. Only whoever may write the run switches it
    (``webapp.roles.may_write_run``: its owner, a member of its team, or an admin;
    RunPermissionError otherwise); ``actor=None`` is an operator. ``weights``: pool id ->
    weight, each in ``shardcore.limits.weight``'s range; a pool the stage does not hold is
    refused unless ``add`` lists it (a mistyped id would otherwise become the stage).

    ``proposal`` (``selectors.runs.run_mixture_proposal``'s answer, whose weights these
    are) is recorded on the new segment, and saved once: under the run's lock it must
    still propose for the version the run reads, from losses no saved proposal read
    (a second save of the same proposal, or a concurrent one, is a CatalogError naming
    the version it was saved as)."""

    if not weights:
        raise CatalogError("weights: give the new weight of each pool")
    try:
        weights = {int(p): limits.weight(f"weights[{p}]", w) for p, w in weights.items()}
    except InputError as exc:
        raise CatalogError(str(exc)) from None
    with transaction.atomic():
        # FOR NO KEY UPDATE: the switch changes no key of the run, so a taint being stored
        # that refers to the run (a foreign key's KEY SHARE lock) need not wait for it.
        run = TrainingRun.objects.select_for_update(no_key=True).get(pk=run_id)
        if actor is not None and not may_write_run(actor, run):
            raise RunPermissionError(
                f"run {run.name} belongs to another user: only its owner, its team or an "
                "admin may switch it"
            )
        if proposal is not None:
            _proposal_unsaved(run, proposal)
        segments = run_segments(run=run)
        at = int(run.consumed_samples)
        kept = [g for g in segments if g.first_sample < at]
        base = kept[-1] if kept else segments[0]
        local = at - base.first_sample if kept else 0
        version = base.mixture_version
        if not version_built(version):
            raise CatalogError(f"{version} has no built schedule to continue from")
        if local >= version.num_samples:
            raise CatalogError(
                f"run {run.name} has read all {version.num_samples} samples of {version}: "
                "nothing left to switch"
            )
        manifest = mf.read_manifest(version.path)
        seq_len = int(manifest["seq_len"])
        stages = manifest["stages"]
        k = max(i for i, st in enumerate(stages) if st["first_sample"] <= local)
        later = stages[k + 1 :]
        comps = MixtureComponent.objects.filter(version=version)
        held = {c.pool_id for c in comps if _stage_name(c.stage) == stages[k]["name"]}
        unknown = sorted(set(weights) - held - {int(p) for p in add})
        if unknown:
            raise CatalogError(
                f"weights: pool(s) {', '.join(map(str, unknown))} are not in stage "
                f"{stages[k]['name']!r} of {version} (its pools: "
                f"{', '.join(map(str, sorted(held)))}); to add a pool to the stage, list it "
                "in add"
            )
        components = [{"pool": p, "weight": w, "stage": ""} for p, w in weights.items()]
        for st in later:
            components += [
                {"pool": c.pool_id, "weight": c.weight, "stage": st["name"]}
                for c in comps
                if _stage_name(c.stage) == st["name"]
            ]
        spec = (version.params or {}).get("spec") or manifest["spec"]
        with refused(f"run {run.name}"):
            cont = continuation(version.path, local)
        new = mixture_version_create(
            mixture_id=version.mixture_id,
            components=components,
            token_budget=(version.num_samples - local) * seq_len,
            seed=version.seed,
            stages=[{"name": st["name"], "tokens": st["num_samples"] * seq_len} for st in later],
            order=spec.get("order", "blend"),
            max_repetitions=float(spec.get("max_repetitions", 4.0)),
            order_options=spec.get("order_options") or {},
            note=note
            or f"continues {version} for run {run.name} at its sample {at} (step {run.last_step})",
            continues=cont,
            first_stage=stages[k]["name"],
            created_by=actor,
        )
        RunSegment.objects.filter(run=run, first_sample__gte=at).delete()
        if kept and kept[-1].pk is not None:
            RunSegment.objects.filter(pk=kept[-1].pk).update(end_sample=at)
        elif kept:
            RunSegment.objects.create(
                run=run,
                index=0,
                mixture_version=version,
                first_sample=0,
                end_sample=at,
                first_step=1,
            )
        segment = RunSegment.objects.create(
            run=run,
            index=len(kept),
            mixture_version=new,
            first_sample=at,
            first_step=run.last_step + 1,
            created_by=actor,
            proposal={k: proposal[k] for k in PROPOSAL_KEYS} if proposal is not None else {},
        )
        run.mixture_version = new
        run.save(update_fields=["mixture_version"])
        # What the flags of both versions' sources taint, computed again by a task.
        taint_refresh_request(
            source_ids=set(version_source_ids(version)) | set(version_source_ids(new))
        )
    return {
        "run": run,
        "version": new,
        "segment": segment,
        "continues": {"version": version.pk, "sample": local},
    }


# What a segment records of the proposal its switch saved.
PROPOSAL_KEYS = ("fingerprint", "rule", "eta", "smoothing", "reference", "step", "reference_step")


def _proposal_unsaved(run: TrainingRun, proposal: Mapping[str, Any]) -> None:
    """Refuse to save ``proposal`` again, or once the run reads another version than the
    one it proposes for (read under the run's lock)."""
    saved = run_proposal_saved(run.pk)
    if saved is not None and int(proposal["step"]) <= proposal_read_until(saved):
        raise CatalogError(
            f"run {run.name}: this proposal (its losses at step {int(proposal['step']):,}) "
            f"was saved already, as {saved.mixture_version}, which the run reads from step "
            f"{saved.first_step:,}"
        )
    if int(proposal["base_version"]) != run.mixture_version_id:
        raise CatalogError(
            f"run {run.name} reads mixture version {run.mixture_version_id} now, not the "
            f"{proposal['base_version']} this proposal was made for: propose again"
        )

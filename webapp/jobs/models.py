"""Jobs: one row per run of a shardcore stage, one ``JobUnit`` row per unit of its plan.

The plan lives in both, split so that no unit's work grows with the job: the Job row keeps
the plan's header (stage, output, params, meta: ``plan`` without ``phases``) and the
counters, each ``JobUnit`` row its own unit's spec, state, lease and outcome. A claim reads
one unit row; a success updates that row and adds to the job's counters in place.

The jobs app is generic over stages (tokenize, pool, materialize...): it knows a
``shardcore.units.Plan`` and nothing about the artifact it builds. The catalog app creates a
job with a *recorder* (the registered name of a catalog service, ``webapp.jobs.recorders``)
that the engine calls when the job reaches a terminal state, so the artifact rows are
written by the catalog, not here. Two apps keep that boundary visible: jobs never import
the catalog.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone


class JobState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class UnitState(models.TextChoices):
    # Units of a later phase wait as PENDING until their phase starts.
    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_JOB_STATES = (JobState.QUEUED, JobState.RUNNING)


class Job(models.Model):
    kind = models.CharField(max_length=40)  # the shardcore stage name, e.g. "tokenize"
    title = models.CharField(max_length=300, blank=True)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    # shardcore.units.Plan.to_json() without "phases": each unit's spec is its JobUnit row.
    plan = models.JSONField()
    output_dir = models.CharField(max_length=1000)
    # Index of the phase being run; == number of phases while finalize runs.
    phase = models.PositiveIntegerField(default=0)
    num_phases = models.PositiveIntegerField(default=1)
    # Units of the current phase not succeeded yet: set when the phase starts (or is
    # retried), decremented in place by each success; the success that takes it to 0
    # starts the next phase. No unit counts the rows of its phase.
    phase_left = models.PositiveIntegerField(default=0)
    # Set by the finalize claim and renewed by its heartbeat, like a unit's heartbeat_at.
    finalize_claimed_at = models.DateTimeField(null=True, blank=True)
    finalize_queued_at = models.DateTimeField(null=True, blank=True)
    # When the message of the step that sends the current phase's next batch of units was
    # sent (``dispatch.job_dispatch_execute``); None when no such step is due.
    dispatch_queued_at = models.DateTimeField(null=True, blank=True)
    # Units per phase, from the plan: a phase's start counts its units left from this and
    # the (few) of them already succeeded, without counting its rows. Empty for jobs
    # created before it was kept (their phase starts count the rows).
    phase_units = models.JSONField(default=list, blank=True)
    # Registered name of the service called on success/failure (see module docstring):
    # a name, not an import path, so that moving the code strands no stored job.
    recorder = models.CharField(max_length=200, blank=True)

    units_total = models.PositiveIntegerField(default=0)
    units_done = models.PositiveIntegerField(default=0)
    documents = models.BigIntegerField(default=0)
    tokens = models.BigIntegerField(default=0)
    bytes = models.BigIntegerField(default=0)
    bad_lines = models.BigIntegerField(default=0)
    # {file: {reason: {"count": n, "samples": [...]}}} summed over the units' stats when the
    # job ends (webapp.jobs.selectors.job_bad_input sums them while it runs).
    bad_input = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    log_tail = models.TextField(blank=True)

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # The jobs page lists newest first, filtered by state.
        indexes = [
            models.Index(fields=["-created_at"]),
            models.Index(fields=["state", "-created_at"]),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} {self.kind} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_JOB_STATES

    @property
    def progress(self) -> float:
        return self.units_done / self.units_total if self.units_total else 0.0

    @property
    def elapsed(self) -> timedelta | None:
        if self.started_at is None:
            return None
        return (self.finished_at or timezone.now()) - self.started_at

    @property
    def bytes_per_second(self) -> float | None:
        seconds = self.elapsed.total_seconds() if self.elapsed else 0
        return self.bytes / seconds if seconds > 0 else None

    @property
    def tokens_per_second(self) -> float | None:
        seconds = self.elapsed.total_seconds() if self.elapsed else 0
        return self.tokens / seconds if seconds > 0 else None

    @property
    def eta(self) -> timedelta | None:
        """Remaining time assuming the remaining units take as long as the finished ones."""
        if self.state != JobState.RUNNING or not self.units_done or self.elapsed is None:
            return None
        remaining = self.units_total - self.units_done
        return self.elapsed * (remaining / self.units_done)


class JobUnit(models.Model):
    job = models.ForeignKey(Job, related_name="units", on_delete=models.CASCADE)
    unit_id = models.CharField(max_length=200)  # the unit's "id" in the plan
    # Position in the plan (phases in order, units in order): pages list units by it.
    index = models.PositiveIntegerField()
    phase = models.PositiveIntegerField()
    # The unit's dict in the plan: all its run needs besides the job's plan header.
    spec = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=UnitState.choices, default=UnitState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    stats = models.JSONField(null=True, blank=True)
    # The bad_lines of its stats: the job's bad input is summed over the units that have any.
    bad_lines = models.BigIntegerField(default=0)
    error = models.TextField(blank=True)
    worker = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Renewed every SHARDYARD_UNIT_HEARTBEAT seconds while the unit runs: a running unit
    # whose heartbeat is older than SHARDYARD_UNIT_LEASE lost its worker.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # When its task message was last sent: a unit queued longer than the lease whose
    # message is not in the broker any more is sent again.
    queued_at = models.DateTimeField(null=True, blank=True)
    # What the engine last did to the unit on its own (requeued after its worker was lost,
    # message re-sent, recording retried); kept across attempts for the job page.
    last_event = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "unit_id"], name="jobunit_unique_per_job"),
            # Pages of a job's units in plan order.
            models.UniqueConstraint(fields=["job", "index"], name="jobunit_index_per_job"),
        ]
        indexes = [
            # Phase starts and retries select the units of (job, phase) by state; the
            # dispatcher takes a phase's next pending units in plan order.
            models.Index(fields=["job", "phase", "state", "index"], name="jobunit_phase_state"),
            # The sweep's lost units and the workers page read only the running units,
            # a few rows however many units the jobs hold.
            models.Index(
                fields=["job"], name="jobunit_running", condition=models.Q(state="running")
            ),
            # The sweep reads the queued units sent before a time (those whose message the
            # broker should have delivered by then), not every queued unit.
            models.Index(
                fields=["queued_at"], name="jobunit_queued", condition=models.Q(state="queued")
            ),
            # The job's bad input sums the units that refused input.
            models.Index(
                fields=["job"], name="jobunit_bad_input", condition=models.Q(bad_lines__gt=0)
            ),
        ]
        ordering = ["job", "index"]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.unit_id} ({self.state})"


class SweepTurn(models.Model):
    """The last sweep of a queue: workers take turns (one sweep per interval per queue,
    ``recovery.sweep_turn``) instead of every worker sweeping on its own timer."""

    queue = models.CharField(max_length=200, unique=True)
    swept_at = models.DateTimeField()
    worker = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"sweep of {self.queue} at {self.swept_at} by {self.worker}"

"""Training runs: what a trainer registers and reports (progress, losses), and the
segments of a run that switched mixture version."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.catalog.models.artifacts import Pool
from webapp.catalog.models.mixtures import MixtureVersion


class TrainingRun(models.Model):
    class State(models.TextChoices):
        REGISTERED = "registered"
        RUNNING = "running"
        FINISHED = "finished"
        FAILED = "failed"
        ABANDONED = "abandoned"

    name = models.CharField(max_length=200, unique=True)
    mixture_version = models.ForeignKey(
        MixtureVersion, related_name="runs", on_delete=models.PROTECT
    )
    external_id = models.CharField(max_length=300, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.REGISTERED)
    # The latest report, denormalized so that run lists need no aggregate.
    last_step = models.BigIntegerField(default=0)
    consumed_samples = models.BigIntegerField(default=0)
    consumed_tokens = models.BigIntegerField(default=0)
    last_reported_at = models.DateTimeField(null=True, blank=True)
    # The owner; with ``team`` (a group), who may report progress (webapp.roles).
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    team = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["-created_at"])]

    def __str__(self) -> str:
        return self.name


class RunSegment(models.Model):
    """A stretch of a run read from one mixture version: the run's samples [first_sample,
    end_sample) are the version's samples [0, end_sample - first_sample). Recorded when
    a run switches version mid-training (the new version continues the old one at the
    run's resume position, ``shardcore.mixture.continuation``): the old segment is closed
    at that sample, the new one is open (``end_sample`` None) and is the run's
    ``mixture_version``. A run that never switched has no rows: it reads its version
    from sample 0."""

    run = models.ForeignKey(TrainingRun, related_name="segments", on_delete=models.CASCADE)
    index = models.PositiveIntegerField()  # 0, 1, ... in training order
    mixture_version = models.ForeignKey(
        MixtureVersion, related_name="run_segments", on_delete=models.PROTECT
    )
    first_sample = models.BigIntegerField()
    end_sample = models.BigIntegerField(null=True, blank=True)
    # The first step that reads it: 1 for the first, the switch's step + 1 after.
    first_step = models.BigIntegerField(default=1)
    # The proposal the switch saved (its fingerprint, reference run and the loss steps it
    # read), empty for weights given by hand: a proposal from those losses is not made
    # again, so saving it twice never applies its update twice.
    proposal = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="run_segment_index"),
        ]
        ordering = ["run", "index"]

    def __str__(self) -> str:
        end = "" if self.end_sample is None else self.end_sample
        return f"{self.run_id}[{self.first_sample}:{end}] <- {self.mixture_version_id}"


class RunProgress(models.Model):
    run = models.ForeignKey(TrainingRun, related_name="progress", on_delete=models.CASCADE)
    step = models.BigIntegerField()
    consumed_samples = models.BigIntegerField()
    consumed_tokens = models.BigIntegerField()
    reported_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # One report per step, enforced by the database: of concurrent reports of a step,
        # the first to insert wins (the service inserts with ON CONFLICT DO NOTHING).
        constraints = [
            models.UniqueConstraint(fields=["run", "step"], name="run_progress_once_per_step")
        ]
        # The run page charts progress in step order.
        indexes = [
            models.Index(fields=["run", "step"]),
            # "Which report first consumed sample s" (first reads, stage starts).
            models.Index(fields=["run", "consumed_samples"], name="runprogress_run_consumed"),
        ]
        ordering = ["run", "step"]

    def __str__(self) -> str:
        return f"{self.run_id} @ step {self.step}"


class RunLoss(models.Model):
    """A loss the trainer reported: validation loss of one pool (or of one source of a
    pool with several) at a checkpoint, or training loss at a step."""

    class Split(models.TextChoices):
        TRAIN = "train"
        VAL = "val"

    run = models.ForeignKey(TrainingRun, related_name="losses", on_delete=models.CASCADE)
    split = models.CharField(max_length=8, choices=Split.choices)
    step = models.BigIntegerField()
    # Validation: the training pool of the run's version whose held-out slice was scored.
    pool = models.ForeignKey(
        Pool, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source = models.CharField(max_length=100, blank=True)  # a source's name, "" = whole pool
    # What makes a report unique besides run, split and step: "" (training), "pool:<id>"
    # or "pool:<id>/source:<name>". A retried report records nothing twice.
    series = models.CharField(max_length=200, blank=True)
    loss = models.FloatField()
    # The run's consumed tokens at ``step`` when a progress report gives them: the x axis
    # of the loss-against-tokens chart.
    consumed_tokens = models.BigIntegerField(null=True, blank=True)
    reported_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "split", "series", "step"], name="run_loss_once_per_step"
            )
        ]
        ordering = ["run", "split", "series", "step"]

    def __str__(self) -> str:
        return f"{self.run_id} {self.split} {self.series or 'train'} @ {self.step}: {self.loss}"

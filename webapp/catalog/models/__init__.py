"""The catalog: sources, tokenizers, tokenized sources, pools, shards, mixtures and their
versions, training runs with their progress, flags and the taint they cause.

Built artifacts (tokenized sources, pools, mixture versions) are immutable: once READY their
fields are not edited (services refuse; ``save`` refuses too), a new row supersedes them.
Per-document data stays in Parquet beside each artifact (the documents sidecars, see
``shardcore.props``); rows hold counts, fingerprints, parameters, parents and the manifest
path.
"""

from __future__ import annotations

import operator
from functools import reduce

from django.conf import settings
from django.db import models
from django.db.models import Q

from shardcore.export import FORMATS as EXPORT_FORMATS
from webapp.catalog.guards import uri_is_remote
from webapp.catalog.models.evaluations import RunEvaluation as RunEvaluation
from webapp.catalog.models.facts import Fact as Fact
from webapp.catalog.models.flag_documents import FlagDocuments as FlagDocuments


class ImmutableArtifactError(Exception):
    """A built artifact was about to be modified; build a new version instead."""


class ArtifactStatus(models.TextChoices):
    BUILDING = "building"
    READY = "ready"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Its files were removed on purpose (webapp.ops.storage); the row and its lineage stay.
    RETIRED = "retired"


class Artifact(models.Model):
    """What every built artifact row carries."""

    fingerprint = models.CharField(max_length=64, blank=True, db_index=True)
    params = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=16, choices=ArtifactStatus.choices, default=ArtifactStatus.BUILDING
    )
    path = models.CharField(max_length=1000)  # the artifact directory
    manifest_path = models.CharField(max_length=1000, blank=True)
    num_documents = models.BigIntegerField(default=0)
    num_tokens = models.BigIntegerField(default=0)
    num_bytes = models.BigIntegerField(default=0)
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        # A READY row in the database is frozen: the service that finishes a build writes
        # it while it is still BUILDING; after that only a new row supersedes it.
        if self.pk:
            stored = type(self).objects.filter(pk=self.pk).values_list("status", flat=True)
            if stored and stored[0] == ArtifactStatus.READY:
                raise ImmutableArtifactError(
                    f"{type(self).__name__} {self.pk} is built and immutable; "
                    "create a new version instead"
                )
        super().save(*args, **kwargs)

    @property
    def is_ready(self) -> bool:
        return self.status == ArtifactStatus.READY


# --- sources ----------------------------------------------------------------------------


class Source(models.Model):
    class Status(models.TextChoices):
        REGISTERED = "registered"
        SCANNED = "scanned"
        FAILED = "failed"

    name = models.SlugField(max_length=100, unique=True)
    uri = models.CharField(max_length=1000)  # absolute local path (resolved) or s3://
    text_field = models.CharField(max_length=100, default="text")
    metadata_fields = models.JSONField(default=list, blank=True)
    description = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.REGISTERED)
    fingerprint = models.CharField(max_length=64, blank=True)
    num_files = models.IntegerField(default=0)
    num_bytes = models.BigIntegerField(default=0)
    num_documents = models.BigIntegerField(default=0)
    bad_lines = models.BigIntegerField(default=0)
    scan_error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    scanned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_remote(self) -> bool:

        return uri_is_remote(self.uri)


class SourceFile(models.Model):
    source = models.ForeignKey(Source, related_name="files", on_delete=models.CASCADE)
    path = models.CharField(max_length=1000)  # relative to the source's uri
    size = models.BigIntegerField(default=0)
    num_documents = models.BigIntegerField(default=0)
    bad_lines = models.BigIntegerField(default=0)
    # {reason: {"count": n, "samples": [...]}} from the scan or the latest tokenize job.
    bad_input = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "path"], name="sourcefile_unique_path")
        ]
        ordering = ["source", "path"]

    def __str__(self) -> str:
        return f"{self.source.name}:{self.path}"


class Tokenizer(models.Model):
    spec = models.CharField(max_length=300, unique=True)  # "tiktoken:<enc>" or "hf:<path>"
    fingerprint = models.CharField(max_length=64, blank=True)
    vocab_size = models.IntegerField(null=True, blank=True)
    eos_id = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.spec


# --- built artifacts --------------------------------------------------------------------


class TokenizedSource(Artifact):
    source = models.ForeignKey(Source, related_name="tokenized", on_delete=models.PROTECT)
    tokenizer = models.ForeignKey(Tokenizer, related_name="tokenized", on_delete=models.PROTECT)
    supersedes = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="superseded_by"
    )
    num_shards = models.IntegerField(default=0)  # kept here: a page sums no shard rows

    class Meta:
        indexes = [models.Index(fields=["source", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.source.name} x {self.tokenizer.spec} (#{self.pk})"


class Annotation(Artifact):
    """Per-document columns computed from a tokenized source's text by one annotator with
    its parameters (``shardcore.annotation``), in Parquet beside nothing it copies: the
    fingerprint names (tokenized source x annotator x parameters). A tokenized source has
    any number; a pool names those it joins (``Pool.annotations``) and reads their columns
    as ``<annotator>.<column>``. ``params`` holds the annotator's parameters; ``summary``
    what its page charts, computed by the job that built it."""

    tokenized_source = models.ForeignKey(
        TokenizedSource, related_name="annotations", on_delete=models.PROTECT
    )
    annotator = models.CharField(max_length=100)
    annotator_version = models.CharField(max_length=40, blank=True)
    columns = models.JSONField(default=list, blank=True)  # [{"name", "type"}] in order
    summary = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [models.Index(fields=["tokenized_source", "annotator", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.annotator} of {self.tokenized_source} (#{self.pk})"


class Pool(Artifact):
    class Split(models.TextChoices):
        TRAIN = "train"
        VAL = "val"

    name = models.CharField(max_length=200)
    parents = models.ManyToManyField(TokenizedSource, related_name="pools")
    split = models.CharField(max_length=8, choices=Split.choices, default=Split.TRAIN)
    # A validation pool points at the train pool it was held out from.
    train_pool = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="val_pool"
    )
    # The annotations whose columns the pool reads as ``<annotator>.<column>``.
    annotations = models.ManyToManyField("Annotation", related_name="pools", blank=True)
    filter = models.TextField(blank=True)
    seq_len = models.IntegerField(default=0)
    num_records = models.BigIntegerField(default=0)
    num_shards = models.IntegerField(default=0)  # kept here: a page sums no shard rows
    supersedes = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="superseded_by"
    )

    class Meta:
        indexes = [models.Index(fields=["split", "-created_at"])]
        constraints = [
            # A pool's name names one pool of its split (its held-out slice is
            # "<name>-val"); a build that failed or was cancelled frees its name.
            models.UniqueConstraint(
                fields=["name", "split"],
                condition=~Q(status__in=[ArtifactStatus.FAILED, ArtifactStatus.CANCELLED]),
                name="pool_unique_name",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.split})"


class Shard(models.Model):
    """One file pair (.bin/.idx) of a tokenized source, a pool or a materialized mixture
    (an ``Export`` of format "materialized"); never edited."""

    tokenized_source = models.ForeignKey(
        TokenizedSource, null=True, blank=True, related_name="shards", on_delete=models.CASCADE
    )
    pool = models.ForeignKey(
        Pool, null=True, blank=True, related_name="shards", on_delete=models.CASCADE
    )
    export = models.ForeignKey(
        "Export", null=True, blank=True, related_name="shards", on_delete=models.CASCADE
    )
    index = models.IntegerField()
    prefix = models.CharField(max_length=1000)  # path without .bin/.idx
    num_records = models.BigIntegerField(default=0)
    num_documents = models.BigIntegerField(default=0)
    num_tokens = models.BigIntegerField(default=0)
    num_bytes = models.BigIntegerField(default=0)
    checksum = models.CharField(max_length=64, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(tokenized_source__isnull=False, pool=None, export=None)
                    | Q(tokenized_source=None, pool__isnull=False, export=None)
                    | Q(tokenized_source=None, pool=None, export__isnull=False)
                ),
                name="shard_has_one_parent",
            ),
        ]
        # Detail pages list an artifact's shards in order.
        indexes = [
            models.Index(fields=["tokenized_source", "index"]),
            models.Index(fields=["pool", "index"]),
            models.Index(fields=["export", "index"]),
        ]
        ordering = ["index"]

    def __str__(self) -> str:
        return self.prefix


class Mixture(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class MixtureVersion(Artifact):
    """An immutable version of a mixture: components, token budget, seed, ordering. Its
    schedule (shardcore.mixture: pool and record per training sample) lives in ``path``
    with its manifest; exports and a materialized copy hang off it."""

    mixture = models.ForeignKey(Mixture, related_name="versions", on_delete=models.PROTECT)
    number = models.PositiveIntegerField()
    token_budget = models.BigIntegerField()
    seed = models.BigIntegerField(default=0)
    num_samples = models.BigIntegerField(default=0)
    pools = models.ManyToManyField(Pool, through="MixtureComponent", related_name="mixtures")
    note = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["mixture", "number"], name="mixtureversion_number")
        ]
        ordering = ["mixture", "-number"]

    def __str__(self) -> str:
        return f"{self.mixture.name} v{self.number}"


class MixtureComponent(models.Model):
    version = models.ForeignKey(MixtureVersion, related_name="components", on_delete=models.CASCADE)
    pool = models.ForeignKey(Pool, related_name="components", on_delete=models.PROTECT)
    weight = models.FloatField()
    stage = models.CharField(max_length=40, blank=True)  # e.g. "main", "anneal"
    epochs = models.FloatField(null=True, blank=True)  # planned passes over the pool

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["version", "pool", "stage"], name="component_unique")
        ]

    def __str__(self) -> str:
        return f"{self.version}: {self.pool.name} x {self.weight:g}"


def export_format_choices() -> list[tuple[str, str]]:
    """An Export row's formats: the materialized copy, then every trainer format of
    ``shardcore.export.FORMATS`` (a callable, so a new format needs no migration)."""
    return [(Export.Format.MATERIALIZED, "Materialized")] + [
        (f.catalog, f.label) for f in EXPORT_FORMATS.values()
    ]


class Export(models.Model):
    """A materialized copy (a directory of shards in schedule order, built by a job) or a
    trainer config file (Megatron, OLMo-core, nanotron, JSON) of a mixture version."""

    class Format:
        # The materialized copy; the trainer formats are shardcore.export.FORMATS' catalog
        # names (``export_format_choices``).
        MATERIALIZED = "materialized"

    version = models.ForeignKey(MixtureVersion, related_name="exports", on_delete=models.CASCADE)
    format = models.CharField(max_length=20, choices=export_format_choices)
    path = models.CharField(max_length=1000)  # the file, or the materialized directory
    status = models.CharField(
        max_length=16, choices=ArtifactStatus.choices, default=ArtifactStatus.BUILDING
    )
    fingerprint = models.CharField(max_length=64, blank=True)
    manifest_path = models.CharField(max_length=1000, blank=True)  # materialized only
    num_records = models.BigIntegerField(default=0)
    num_tokens = models.BigIntegerField(default=0)
    num_bytes = models.BigIntegerField(default=0)
    checksum = models.CharField(max_length=64, blank=True)  # xxh3 of a config file
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.version} -> {self.format}"


# --- training runs ----------------------------------------------------------------------


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


# --- flags and taint --------------------------------------------------------------------


class Flag(models.Model):
    class Target(models.TextChoices):
        SOURCE = "source"
        FILE = "file"
        DOCUMENTS = "documents"

    TaintState = Fact.State

    target = models.CharField(max_length=16, choices=Target.choices)
    source = models.ForeignKey(Source, related_name="flags", on_delete=models.CASCADE)
    source_file = models.ForeignKey(
        SourceFile, null=True, blank=True, related_name="flags", on_delete=models.CASCADE
    )
    # How many documents it names, once known; their indices (in the source's order of
    # documents, as tokenized) are its FlagDocuments rows. None: a source or file flag.
    num_documents = models.BigIntegerField(null=True, blank=True)
    reason = models.TextField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # What it taints, counted when its taint is computed: {"tokenized", "pools", "versions",
    # "runs", "copies", "documents"}; the flag page reads these, never its taint rows' sum.
    counts = models.JSONField(default=dict, blank=True)
    # "First read at step k" of its tainted runs, computed by a task (webapp.catalog.services.facts):
    # how many of them are computed, of how many.
    reads_done = models.IntegerField(default=0)
    reads_total = models.IntegerField(default=0)
    # Its taint (rows and counts), computed by a task (workers.flag_taint) once recorded.
    taint_state = models.CharField(max_length=16, choices=TaintState.choices, default="ready")
    taint_requested_at = models.DateTimeField(null=True, blank=True)
    taint_error = models.TextField(blank=True)
    annotation = models.ForeignKey(Annotation, models.SET_NULL, null=True, related_name="flags")
    where = models.TextField(blank=True)  # its documents: where this holds over annotation
    # A contamination flag: the documents of a decon annotation overlapping this benchmark
    # (or only its item ``benchmark_item``); the audit finds its taint by these.
    benchmark = models.CharField(max_length=100, blank=True, db_index=True)
    benchmark_item = models.CharField(max_length=300, blank=True)

    def __str__(self) -> str:
        return f"flag {self.pk} on {self.target} of {self.source_id}: {self.reason[:40]}"


def _one_target(name: str, fields: tuple[str, ...]) -> models.CheckConstraint:
    """Exactly one of ``fields`` is set, the alternatives in the order of ``fields``."""
    return models.CheckConstraint(
        condition=reduce(
            operator.or_,
            (
                Q(
                    **{other: None for other in fields if other != field},
                    **{f"{field}__isnull": False},
                )
                for field in fields
            ),
        ),
        name=name,
    )


def _artifact_target(related_name: str) -> type[models.Model]:
    """An abstract model of what a taint or a corruption marks: one artifact or run (a check
    constraint on each concrete model says exactly one), each reached back from its target
    as ``related_name``. (A ``%(class)s`` related name would name the same accessors but
    change every field's migration state.)"""

    class ArtifactTarget(models.Model):
        tokenized_source = models.ForeignKey(
            TokenizedSource,
            null=True,
            blank=True,
            related_name=related_name,
            on_delete=models.CASCADE,
        )
        pool = models.ForeignKey(
            Pool, null=True, blank=True, related_name=related_name, on_delete=models.CASCADE
        )
        mixture_version = models.ForeignKey(
            MixtureVersion,
            null=True,
            blank=True,
            related_name=related_name,
            on_delete=models.CASCADE,
        )
        run = models.ForeignKey(
            TrainingRun, null=True, blank=True, related_name=related_name, on_delete=models.CASCADE
        )
        # A materialized copy holds the tokens physically, apart from its version.
        export = models.ForeignKey(
            Export, null=True, blank=True, related_name=related_name, on_delete=models.CASCADE
        )

        class Meta:
            abstract = True

        @property
        def target(self):
            return (
                self.tokenized_source
                or self.pool
                or self.mixture_version
                or self.run
                or self.export
            )

    return ArtifactTarget


class Taint(_artifact_target("taints")):  # type: ignore[misc]
    """``flag`` reaches this artifact or run through lineage. Exactly one target is set."""

    flag = models.ForeignKey(Flag, related_name="taints", on_delete=models.CASCADE)
    documents = models.BigIntegerField(default=0)  # flagged documents inside the target
    created_at = models.DateTimeField(auto_now_add=True)
    # A run's taint: when it first reads a flagged document, in its sample numbering
    # (``first_sample``, ``never``, ``error``, ``segments``; webapp.catalog.services.facts), stored
    # by a task when the flag or the run is recorded; None while being computed.
    read = models.JSONField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["flag", "id"], name="taint_flag_page")]
        constraints = [
            _one_target(
                "taint_has_one_target",
                ("tokenized_source", "pool", "mixture_version", "run", "export"),
            ),
            *[
                models.UniqueConstraint(
                    fields=["flag", field],
                    condition=Q(**{f"{field}__isnull": False}),
                    name=f"taint_unique_{field}",
                )
                for field in ("tokenized_source", "pool", "mixture_version", "run", "export")
            ],
        ]

    def __str__(self) -> str:
        return f"flag {self.flag_id} taints {self.target}"


# --- corruption -------------------------------------------------------------------------


class Corruption(_artifact_target("corruptions")):  # type: ignore[misc]
    """An artifact whose files no longer match their checksums (found by a scrub), or, with
    ``cause`` set, one built from such an artifact: marked on every page and in lineage
    like a flag's taint. Exactly one target is set. A later scrub that finds the artifact
    intact again (restored from a copy) deletes the row and what it caused."""

    # The corrupt artifact this one was built from (None: this one's own files are bad).
    cause = models.ForeignKey(
        "self", null=True, blank=True, related_name="effects", on_delete=models.CASCADE
    )
    problem = models.TextField()  # the first problem: file, byte offset, what is wrong
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    found_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # The alternatives' order as the migration that created the constraint wrote it.
            _one_target(
                "corruption_has_one_target",
                ("tokenized_source", "pool", "mixture_version", "export", "run"),
            ),
        ]
        ordering = ["-found_at", "id"]

    def __str__(self) -> str:
        return f"corruption of {self.target}: {self.problem[:60]}"

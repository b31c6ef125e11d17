"""What every built artifact row carries (``Artifact``: immutable once READY), the
tokenizers, and the artifacts built from sources: tokenized sources, pools and their
shards."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from webapp.catalog.models.sources import Source


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
            stored = type(self)._default_manager.filter(pk=self.pk).values_list("status", flat=True)
            if stored and stored[0] == ArtifactStatus.READY:
                raise ImmutableArtifactError(
                    f"{type(self).__name__} {self.pk} is built and immutable; "
                    "create a new version instead"
                )
        super().save(*args, **kwargs)

    @property
    def is_ready(self) -> bool:
        return self.status == ArtifactStatus.READY


class Tokenizer(models.Model):
    spec = models.CharField(max_length=300, unique=True)  # "tiktoken:<enc>" or "hf:<path>"
    fingerprint = models.CharField(max_length=64, blank=True)
    vocab_size = models.IntegerField(null=True, blank=True)
    eos_id = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.spec


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

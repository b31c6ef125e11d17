"""Mixtures, their immutable versions (components, budget, schedule) and what is exported
from a version: a materialized copy or a trainer's config file."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from shardcore.export import FORMATS as EXPORT_FORMATS
from webapp.catalog.models.artifacts import Artifact, ArtifactStatus, Pool


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

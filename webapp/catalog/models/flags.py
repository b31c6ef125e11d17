"""Flags on sources, files or documents, the taint they cause through lineage, and the
corruption a scrub finds (marked like a taint)."""

from __future__ import annotations

import operator
from functools import reduce

from django.conf import settings
from django.db import models
from django.db.models import Q

from webapp.catalog.models.annotations import Annotation
from webapp.catalog.models.artifacts import Pool, TokenizedSource
from webapp.catalog.models.facts import Fact
from webapp.catalog.models.mixtures import Export, MixtureVersion
from webapp.catalog.models.runs import TrainingRun
from webapp.catalog.models.sources import Source, SourceFile


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

"""Annotations: per-document columns computed from a tokenized source (``shardcore.annotate``)."""

from __future__ import annotations

from django.db import models

from webapp.catalog.models.artifacts import Artifact, TokenizedSource


class Annotation(Artifact):
    """Per-document columns computed from a tokenized source's text by one annotator with
    its parameters (``shardcore.annotate.stage``), in Parquet beside nothing it copies: the
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

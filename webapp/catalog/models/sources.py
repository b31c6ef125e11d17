"""Sources: the raw JSONL corpora the catalog registers, and their files as scanned."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.catalog.guards import uri_is_remote


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

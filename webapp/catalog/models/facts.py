"""The numbers pages show that are measured from an artifact's files, stored as rows."""

from __future__ import annotations

from django.db import models


class Fact(models.Model):
    """A number set a page shows that is measured from an artifact's files (a pool's
    quality by a property, a version's quality, a tokenized source's statistics, a
    version's epoch starts, a pool's properties): computed by a task
    (``webapp.catalog.services.facts``) when the artifact is recorded or the page first asks, and
    stored here; a page reads this row and never the files. ``object_id`` is the
    artifact's primary key in the table ``kind`` names; ``key`` the variant (``by``)."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        READY = "ready"
        FAILED = "failed"

    kind = models.CharField(max_length=40)
    object_id = models.BigIntegerField()
    key = models.CharField(max_length=200, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    progress = models.FloatField(default=0.0)  # 0..1 while running
    value = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    requested_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "object_id", "key"], name="fact_unique")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.object_id} {self.key or '-'}: {self.state}"

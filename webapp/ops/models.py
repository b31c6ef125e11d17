"""Worker heartbeats: the overview shows which Celery workers answered recently."""

from django.db import models


class Heartbeat(models.Model):
    """One answer of a worker to a ``workers.tasks.heartbeat`` task."""

    worker = models.CharField(max_length=200)
    broker = models.CharField(max_length=40)
    nonce = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # The overview lists the newest heartbeats first.
        indexes = [models.Index(fields=["-created_at"])]

    def __str__(self) -> str:
        return f"{self.worker} @ {self.created_at:%Y-%m-%d %H:%M:%S}"

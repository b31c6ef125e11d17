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


class WorkerBeat(models.Model):
    """A Celery worker's own, periodic sign of life (one row per worker, updated in
    place): the overview's live list of workers, without anyone pinging them."""

    worker = models.CharField(max_length=200, unique=True)  # Celery's name@host
    host = models.CharField(max_length=200)
    queue = models.CharField(max_length=200)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        # The overview lists the workers seen most recently first.
        indexes = [models.Index(fields=["-last_seen"])]

    def __str__(self) -> str:
        return f"{self.worker} (last seen {self.last_seen:%Y-%m-%d %H:%M:%S})"

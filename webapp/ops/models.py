"""Operations rows: worker heartbeats (the overview shows which Celery workers answered
recently), webhooks, storage reports, and the single sign-on identities linked to local
users (``webapp.ops.oidc``)."""

from django.conf import settings
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


# --- notifications ----------------------------------------------------------------------

WEBHOOK_EVENTS = ("job.succeeded", "job.failed", "run.tainted", "scrub.corruption")


class WebhookEndpoint(models.Model):
    """Where to tell someone about events: a URL, the shared secret its deliveries are
    signed with (HMAC-SHA256 of the body), the events it wants, and the payload format
    (Shardyard's JSON, or Slack's ``{"text": ...}``). Set up by a user, for themselves or
    for a team (a group they belong to)."""

    class Format(models.TextChoices):
        JSON = "json"
        SLACK = "slack"

    url = models.URLField(max_length=1000)
    secret = models.CharField(max_length=200)
    events = models.JSONField(default=list)  # a subset of WEBHOOK_EVENTS
    format = models.CharField(max_length=8, choices=Format.choices, default=Format.JSON)
    active = models.BooleanField(default=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    team = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    # Only events after this moment are delivered (no flood of history on creation).
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"webhook {self.pk} -> {self.url}"


class WebhookDelivery(models.Model):
    """One event for one endpoint, with its attempts. ``key`` names the event's object
    (``job:12:failed``): one delivery per event and endpoint, however often it is seen."""

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"  # gave up after SHARDYARD_WEBHOOK_ATTEMPTS attempts

    endpoint = models.ForeignKey(
        WebhookEndpoint, related_name="deliveries", on_delete=models.CASCADE
    )
    event = models.CharField(max_length=40)
    key = models.CharField(max_length=200)
    payload = models.JSONField()
    state = models.CharField(max_length=12, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    # A drainer holds the delivery until then (its bounded request included).
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_status = models.IntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "key"], name="webhook_one_per_event")
        ]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]

    def __str__(self) -> str:
        return f"{self.event} -> {self.endpoint_id} ({self.state})"


# --- storage ----------------------------------------------------------------------------


class StorageReport(models.Model):
    """One measurement of what the data root holds (``webapp.ops.storage.storage_report``),
    made by a worker's task (``workers.storage_measure``): measuring lists every artifact
    on the store, which may take minutes on object storage or hang while it is down, so
    no request measures. The Storage page and ``/api/storage/`` show the newest finished
    one and its age."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    state = models.CharField(max_length=8, choices=State.choices, default=State.QUEUED)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    report = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        # The page reads the newest finished one and the newest still under way.
        indexes = [models.Index(fields=["state", "-finished_at"])]

    def __str__(self) -> str:
        return f"storage report {self.pk} ({self.state})"


class ExternalIdentity(models.Model):
    """A provider's user (its issuer and subject, which the provider never reassigns) linked
    to one local user. Single sign-on finds users through these rows only, never by name or
    e-mail: a row is made when the provider's user first signs in (a new local user), by an
    admin on the users page, or by a verified e-mail claim when SHARDYARD_OIDC_LINK_VERIFIED_EMAIL
    is on. Superusers are never linked."""

    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="identities"
    )
    linked_by = models.CharField(max_length=32)  # "sign-in", "admin", "verified-email"
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="identity_issuer_subject")
        ]

    def __str__(self) -> str:
        return f"{self.issuer} {self.subject} -> {self.user_id}"

"""Prometheus metrics at ``/metrics`` (prometheus-client's text format).

What the catalog and the job engine know is read from the database at scrape time by one
collector (a few aggregate queries), so every web process answers the same numbers and
nothing is lost when a process restarts: jobs and units by kind and state, unit durations,
documents, tokens and bytes processed, queue depth per queue, live workers from their
heartbeats, scrub findings, tainted runs. Request latency is measured in this process by
``RequestLatencyMiddleware`` (with several gunicorn workers, set PROMETHEUS_MULTIPROC_DIR to
a shared empty directory and every worker's requests are summed; see docs/operations.md).

The endpoint is protected like the API: an API token (``Authorization: Token <key>``) or a
signed-in session of any user, or the bearer token of SHARDYARD_METRICS_TOKEN
(``Authorization: Bearer <token>``, for a Prometheus server that has no user)."""

from __future__ import annotations

import hmac
import os
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from webapp.catalog.models import Corruption, Taint
from webapp.jobs.models import Job, JobUnit, UnitState
from webapp.ops.models import WorkerBeat
from webapp.roles import has_role
from workers.celery import app

# Unit durations are read from the database, bucketed here (seconds).
UNIT_DURATION_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600)
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def _queue_depths() -> dict[str, int | None]:
    """Messages waiting in each queue this deployment uses (None: the broker did not
    answer). Redis keeps a queue as a list under its name (and one list per priority)."""

    queues = {settings.CELERY_TASK_DEFAULT_QUEUE, app.conf.task_default_queue}
    url = settings.CELERY_BROKER_URL
    depths: dict[str, int | None] = {}
    if url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
        try:
            for q in sorted(queues):
                try:
                    n = client.llen(q)
                    for key in client.scan_iter(match=f"{q}\x06\x16*"):
                        n += client.llen(key)
                    depths[q] = n
                except Exception:
                    depths[q] = None
        finally:
            client.close()
    elif url.startswith("filesystem://"):
        folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
        for q in sorted(queues):
            depths[q] = sum(1 for _ in folder.glob(f"*.{q}.msg")) if folder.is_dir() else 0
    return depths


class CatalogCollector:
    """Reads the job engine's and the catalog's rows at each scrape."""

    def collect(self):

        jobs = GaugeMetricFamily(
            "shardyard_jobs", "Jobs by kind and state.", labels=["kind", "state"]
        )
        processed = {
            name: CounterMetricFamily(f"shardyard_{name}_processed", help_, labels=["kind"])
            for name, help_ in (
                ("documents", "Documents processed by finished units of jobs, by job kind."),
                ("tokens", "Tokens processed by finished units of jobs, by job kind."),
                ("bytes", "Input bytes processed by finished units of jobs, by job kind."),
            )
        }
        for row in (
            Job.objects.values("kind", "state")
            .annotate(
                n=Count("id"), documents=Sum("documents"), tokens=Sum("tokens"), bytes=Sum("bytes")
            )
            .order_by()
        ):
            jobs.add_metric([row["kind"], row["state"]], row["n"])
        for row in (
            Job.objects.values("kind")
            .annotate(documents=Sum("documents"), tokens=Sum("tokens"), bytes=Sum("bytes"))
            .order_by()
        ):
            for name, family in processed.items():
                family.add_metric([row["kind"]], row[name] or 0)
        yield jobs
        yield from processed.values()

        units = GaugeMetricFamily(
            "shardyard_units",
            "Units of jobs by job kind, phase (stage) and state.",
            labels=["kind", "phase", "state"],
        )
        for row in (
            JobUnit.objects.values("job__kind", "phase", "state").annotate(n=Count("id")).order_by()
        ):
            units.add_metric([row["job__kind"], str(row["phase"]), row["state"]], row["n"])
        yield units

        # Durations of finished units (started to finished), bucketed in one query.
        took = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())

        aggregates = {"count": Count("id"), "sum": Sum(took)}
        for i, bound in enumerate(UNIT_DURATION_BUCKETS):
            aggregates[f"le{i}"] = Count("id", filter=Q(took__lte=timedelta(seconds=bound)))
        durations = HistogramMetricFamily(
            "shardyard_unit_duration_seconds",
            "Wall time of finished units, by job kind.",
            labels=["kind"],
        )
        finished = JobUnit.objects.filter(
            state=UnitState.SUCCEEDED, started_at__isnull=False, finished_at__isnull=False
        ).annotate(took=took)
        for row in finished.values("job__kind").annotate(**aggregates).order_by():
            buckets = [
                (str(float(bound)), row[f"le{i}"]) for i, bound in enumerate(UNIT_DURATION_BUCKETS)
            ]
            buckets.append(("+Inf", row["count"]))
            total = row["sum"].total_seconds() if row["sum"] else 0.0
            durations.add_metric([row["job__kind"]], buckets, total)
        yield durations

        depth = GaugeMetricFamily(
            "shardyard_queue_depth",
            "Task messages waiting in the broker, by queue.",
            labels=["queue"],
        )
        for queue, n in _queue_depths().items():
            if n is not None:
                depth.add_metric([queue], n)
        yield depth

        interval = max(float(getattr(settings, "SHARDYARD_WORKER_BEAT", 10)), 1.0)
        horizon = timezone.now() - timedelta(seconds=3 * interval)
        live = GaugeMetricFamily(
            "shardyard_workers_live",
            "Celery workers whose own heartbeat is recent (three beats), by queue.",
            labels=["queue"],
        )
        for row in (
            WorkerBeat.objects.filter(last_seen__gte=horizon)
            .values("queue")
            .annotate(n=Count("id"))
            .order_by()
        ):
            live.add_metric([row["queue"]], row["n"])
        yield live

        findings = GaugeMetricFamily(
            "shardyard_scrub_findings",
            "Corruption rows the scrub recorded: own (the artifact's files are bad) or "
            "inherited (built from a corrupt artifact).",
            labels=["origin"],
        )
        own = Corruption.objects.filter(cause__isnull=True).count()
        findings.add_metric(["own"], own)
        findings.add_metric(["inherited"], Corruption.objects.count() - own)
        yield findings

        yield GaugeMetricFamily(
            "shardyard_runs_tainted",
            "Training runs that a flag taints through lineage.",
            value=Taint.objects.filter(run__isnull=False).values("run").distinct().count(),
        )


_REGISTRY = CollectorRegistry(auto_describe=False)
_REGISTRY.register(CatalogCollector())

# Request latency: this process's own histogram (or every process's, in multiprocess mode).
REQUEST_LATENCY = Histogram(
    "shardyard_request_duration_seconds",
    "Time to answer a request, by method, route and status class.",
    ["method", "route", "status"],
    buckets=REQUEST_BUCKETS,
)


def _process_registry() -> CollectorRegistry | None:
    """The default registry, or every process's samples in multiprocess mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    from prometheus_client import REGISTRY

    return REGISTRY


# Every label value comes from a fixed set, whatever a client sends: the method is one of
# these or "other" (any token is a valid HTTP method, and each new value would be a series
# of its own, kept for the life of the process), the route is a URL pattern of this
# project (never the raw path; "unmatched" for a path no pattern matches), and the status
# is its class.
KNOWN_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")
STATUS_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")


def request_labels(request, response) -> tuple[str, str, str]:
    """The (method, route, status) labels of one request, each from a bounded set."""
    method = request.method if request.method in KNOWN_METHODS else "other"
    match = getattr(request, "resolver_match", None)
    route = match.route if match is not None and match.route else "unmatched"
    status = f"{response.status_code // 100}xx"
    return method, route, status if status in STATUS_CLASSES else "other"


class RequestLatencyMiddleware:
    """Times every request, labelled by ``request_labels``: the number of series is at most
    methods x routes x status classes, however many requests and of whatever kind."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        start = time.perf_counter()
        response = self.get_response(request)
        REQUEST_LATENCY.labels(*request_labels(request, response)).observe(
            time.perf_counter() - start
        )
        return response


def _authorized(request) -> bool:
    """An API token, a signed-in user, or SHARDYARD_METRICS_TOKEN as a bearer."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, credential = header.partition(" ")
    credential = credential.strip()
    expected = getattr(settings, "SHARDYARD_METRICS_TOKEN", "") or ""
    if scheme.lower() == "bearer" and expected and credential:
        return hmac.compare_digest(credential.encode(), expected.encode())
    if scheme.lower() == "token" and credential:
        from rest_framework.authtoken.models import Token

        token = Token.objects.select_related("user").filter(key=credential).first()
        return bool(token and token.user.is_active and has_role(token.user, "viewer"))
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated)


@login_not_required
@never_cache
def metrics(request):
    """The Prometheus text format; 401 without credentials (like the API)."""
    if not _authorized(request):
        response = HttpResponse(
            "metrics need an API token (Authorization: Token <key>), a signed-in session "
            "or the SHARDYARD_METRICS_TOKEN bearer\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics", Token'
        return response
    body = generate_latest(_REGISTRY)
    process = _process_registry()
    if process is not None:
        body += generate_latest(process)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)

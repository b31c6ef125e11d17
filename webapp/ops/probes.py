"""Probes for Kubernetes (or any load balancer): ``/healthz`` answers 200 while the process
serves requests (liveness); ``/readyz`` answers 200 only when the database and the broker
answer too (readiness), else 503 with a JSON body naming what is down. Both are public (no
login, no token) and touch nothing but a ``SELECT 1`` and a broker ping (the ping bounded
by SHARDYARD_READY_TIMEOUT seconds; the database by its driver's connect timeout, e.g.
``?connect_timeout=3`` in DATABASE_URL)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connections
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET


def _describe(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _timeout() -> float:
    return float(getattr(settings, "SHARDYARD_READY_TIMEOUT", 3))


def check_database() -> str | None:
    """None when the default database answers ``SELECT 1``, else what went wrong."""
    try:
        with connections["default"].cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
    except Exception as exc:  # any driver error means "not ready"
        # A broken connection must not be reused by the next request of this thread.
        connections["default"].close_if_unusable_or_obsolete()
        return _describe(exc)
    return None


def check_broker() -> str | None:
    """None when the Celery broker answers (Redis PING, or the filesystem broker's folder
    is writable), else what went wrong."""
    url = settings.CELERY_BROKER_URL
    try:
        if url.startswith(("redis://", "rediss://")):
            import redis

            client = redis.Redis.from_url(
                url, socket_connect_timeout=_timeout(), socket_timeout=_timeout()
            )
            try:
                client.ping()
            finally:
                client.close()
        elif url.startswith("filesystem://"):
            folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / ".readyz"
            probe.write_bytes(b"")
            probe.unlink()
        else:  # settings refuse other schemes; keep the probe honest anyway
            return f"unsupported broker URL scheme in {url.split('://', 1)[0]!r}"
    except Exception as exc:
        return _describe(exc)
    return None


@login_not_required
@never_cache
@require_GET
def healthz(request):
    """Liveness: the process answers."""
    return JsonResponse({"status": "ok"})


@login_not_required
@never_cache
@require_GET
def readyz(request):
    """Readiness: the database and the broker answer; 503 naming each one that does not."""
    checks = {"database": check_database(), "broker": check_broker()}
    down = [name for name, error in checks.items() if error]
    body = {
        "status": "ready" if not down else "unavailable",
        "checks": {name: (error or "ok") for name, error in checks.items()},
    }
    if down:
        body["down"] = down
    return JsonResponse(body, status=503 if down else 200)

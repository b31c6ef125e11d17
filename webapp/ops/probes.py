"""Probes for Kubernetes (or any load balancer): ``/healthz`` answers 200 while the process
serves requests (liveness); ``/readyz`` answers 200 only when the database and the broker
answer too (readiness), else 503. Both are public (no login, no token) and touch nothing
but a ``SELECT 1`` and a broker ping (the ping bounded by SHARDYARD_READY_TIMEOUT seconds;
the database by its driver's connect timeout, e.g. ``?connect_timeout=3`` in DATABASE_URL).

What is down, and why, is told only to a signed-in admin (the errors name internal hosts
and ports): anyone else gets the status alone. Every failed check is logged with its
error, so the operator reads it there too (a database that is down also signs nobody in)."""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connections
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from webapp.roles import has_role

log = logging.getLogger(__name__)


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
    """Readiness: the database and the broker answer (200), else 503; what is down and why
    for a signed-in admin only."""
    checks = {"database": check_database(), "broker": check_broker()}
    down = [name for name, error in checks.items() if error]
    for name in down:
        log.warning("readyz: %s is down: %s", name, checks[name])
    body: dict = {"status": "ready" if not down else "unavailable"}
    if not checks["database"] and _is_admin(request):
        body["checks"] = {name: (error or "ok") for name, error in checks.items()}
        if down:
            body["down"] = down
    return JsonResponse(body, status=503 if down else 200)


def _is_admin(request) -> bool:
    """Whether a signed-in admin asks (reading the session and the user needs the
    database: when that fails, nobody is)."""
    try:
        return has_role(request.user, "admin")
    except Exception:  # the session store or the user table does not answer
        return False

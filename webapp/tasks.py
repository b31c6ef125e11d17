"""Sending a worker's task by its name (``workers.fact_compute``, ``workers.job_unit_run``...).

The web side never imports the module that defines the tasks (``workers.tasks``, which calls
the catalog's and the engine's services): it names the task, and the Celery app finds it.
So the services that ask for work and the tasks that do it import each other in one
direction only (tasks -> services), and a rename of a task function touches one module.

The app registers the tasks when it imports its task modules (``TASK_PACKAGES`` in
``workers.celery``): a worker does that when it starts, a web process the first time it
sends. Options given here (``queue``, ``headers``, ``countdown``) go to ``apply_async``; under
``CELERY_TASK_ALWAYS_EAGER`` the task runs in the caller, as ``delay`` would.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from workers.celery import TASK_PACKAGES, app

log = logging.getLogger(__name__)


def task(name: str) -> Any:
    """The registered task called ``name``; a name no task module registers is an error
    that names it."""
    if name not in app.tasks:
        app.autodiscover_tasks(TASK_PACKAGES, related_name="tasks", force=True)
    try:
        return app.tasks[name]
    except KeyError:
        raise LookupError(f"no worker task is called {name!r}") from None


def task_send(name: str, *, options: dict[str, Any] | None = None, **kwargs: Any) -> None:
    """Send task ``name`` with keyword arguments ``kwargs`` (plain values, never model
    instances); the broker's errors reach the caller, which decides what a lost send means."""
    task(name).apply_async(kwargs=kwargs, **(options or {}))


def task_send_on_commit(name: str, *, what: str, **kwargs: Any) -> None:
    """Send task ``name`` once the current transaction commits (at once outside one). A
    broker that does not answer is logged as ``what`` not sent: the row that asked for the
    work says it is queued, and is asked for again once that has lasted too long."""

    def send() -> None:
        try:
            task_send(name, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the broker is down: the row says queued
            log.warning("%s not sent: %s", what, exc)

    transaction.on_commit(send)

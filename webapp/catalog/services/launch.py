"""The catalog's one way to start a build (shardcore's errors translated by
``webapp.catalog.errors.refused``).

Every long stage (tokenize, pool, mixture version, materialize) is launched the same way:

1. plan, with shardcore's refusals turned into a CatalogError (``refused``);
2. in one transaction, lock what the build reads (so that of two concurrent identical
   launches the second waits for the first);
3. answer the build already running (a double click, a retried request) instead of a copy;
4. else create the job and the artifact row (``create(job, plan)``) that the job's recorder
   fills in when it succeeds.

A service states what differs (what to lock, what counts as the same build running, how to
plan, the row to create) and calls ``launch``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import transaction

from shardcore.units import Plan
from webapp.jobs.models import Job
from webapp.jobs.services import job_create

T = TypeVar("T")


def launch(
    *,
    lock: Callable[[], Any],
    running: Callable[[], T | None],
    plan: Callable[[], Plan],
    create: Callable[[Job, Plan], T],
    title: str | Callable[[], str],
    recorder: str,
    created_by: Any = None,
    plan_first: bool = True,
) -> T:
    """Start a build, or answer the one already running (``running()``, asked before the
    plan and again under the lock). ``plan_first``: plan before taking the lock (planning
    from user input can take seconds in its limited child; the lock is held only to
    decide); otherwise plan under the lock (a plan that depends on what the lock guards,
    such as a version's number)."""
    made: Plan | None = None
    if plan_first:
        existing = running()
        if existing is not None:
            return existing
        made = plan()
    with transaction.atomic():
        lock()
        existing = running()
        if existing is not None:
            return existing
        if made is None:
            made = plan()
        name = title() if callable(title) else title  # a title may name what the lock decided
        job = job_create(plan=made, title=name, recorder=recorder, created_by=created_by)
        return create(job, made)

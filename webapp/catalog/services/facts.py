"""Asking for what pages show that is measured from an artifact's files (``Fact`` rows, a
flag's taint, its runs' first reads) and computing it in a task; the reads are
``selectors.facts``.

- ``fact_request``: the fact's row QUEUED and one task message after the transaction
  commits. Recorders ask for the default facts when an artifact is recorded
  (``artifact_facts_request``); a page asks for a variant (``?by=``) the first time someone
  opens it: its reads note what they lacked, and ``fact_requests`` (around every request,
  by the catalog's middleware) asks for it once the view has answered.
- ``fact_compute``: what the task (``workers.fact_compute``) runs: measures from the files
  (``webapp.catalog.measures``) and stores the value (READY) or the error (FAILED).
  Idempotent: a redelivered or repeated task measures again and stores the same value.
- ``flag_taint_request``: a flag's taint (which tokenized sources, pools, versions, copies
  and runs hold its documents, and how many: it reads each tainted pool's documents
  table) is computed by a task (``workers.flag_taint`` ->
  ``services.flags.flag_taint_compute``) after the flag is recorded; its row says queued,
  running, ready or failed.
- ``flag_reads_request`` (computed by ``services.flags.flag_reads_compute``): per run a
  flag taints, when it first reads a flagged document (the sample; the step follows from
  its progress reports when a page shows it), stored on the taint; the flag counts how many
  are done.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from django.utils import timezone

from shardcore import storage
from webapp.catalog.measures import MEASURES
from webapp.catalog.models import (
    Fact,
    Flag,
    MixtureVersion,
    Pool,
    Taint,
    TokenizedSource,
)
from webapp.catalog.selectors.facts import ASKED, STALE
from webapp.tasks import task_send_on_commit

log = logging.getLogger(__name__)

# --- asking, reading, computing ---------------------------------------------------------


def _send(kind: str, object_id: int, key: str) -> None:
    task_send_on_commit(
        "workers.fact_compute",
        what=f"fact {kind} {object_id} {key!r}",
        kind=kind,
        object_id=object_id,
        key=key,
    )


def fact_request(kind: str, object_id: int, key: str = "", *, again: bool = False) -> Fact:
    """The fact's row, created QUEUED with one task message sent after the transaction
    commits when there is none (or, with ``again``, when it is not READY, or is queued
    or running for longer than STALE)."""
    if kind not in MEASURES:
        raise ValueError(f"unknown fact {kind!r}")
    fact, created = Fact.objects.get_or_create(kind=kind, object_id=object_id, key=key)
    stale = fact.state in (Fact.State.QUEUED, Fact.State.RUNNING) and (
        fact.requested_at < timezone.now() - STALE
    )
    if created or stale or (again and fact.state != Fact.State.READY):
        if not created:
            Fact.objects.filter(pk=fact.pk).update(
                state=Fact.State.QUEUED, requested_at=timezone.now(), progress=0.0, error=""
            )
        _send(kind, object_id, key)
    return fact


def fact_compute(*, kind: str, object_id: int, key: str = "") -> str:
    """Measure the fact from the artifact's files and store it: READY with its value, or
    FAILED with the error. Returns the state stored."""
    measure = MEASURES[kind]
    fact, _ = Fact.objects.get_or_create(kind=kind, object_id=object_id, key=key)
    Fact.objects.filter(pk=fact.pk).update(
        state=Fact.State.RUNNING, started_at=timezone.now(), progress=0.0
    )
    try:
        value = measure(object_id, key)
    except Exception as exc:  # noqa: BLE001 - any failure is the fact's, said on its page
        if storage.is_store_error(exc):
            raise  # the object store did not answer: the task retries
        log.info("fact %s %s %r failed: %s", kind, object_id, key, exc)
        Fact.objects.filter(pk=fact.pk).update(
            state=Fact.State.FAILED, error=str(exc)[:2000], finished_at=timezone.now()
        )
        return Fact.State.FAILED
    Fact.objects.filter(pk=fact.pk).update(
        state=Fact.State.READY,
        value=value,
        error="",
        progress=1.0,
        finished_at=timezone.now(),
    )
    return Fact.State.READY


def artifact_facts_request(obj) -> None:
    """The default facts of an artifact just recorded, asked for (computed by a task)."""
    if isinstance(obj, Pool):
        fact_request("pool_properties", obj.pk, again=True)
    elif isinstance(obj, TokenizedSource):
        fact_request("source_stats", obj.pk, again=True)
    elif isinstance(obj, MixtureVersion):
        fact_request("version_epochs", obj.pk, again=True)


# --- what a flag taints -----------------------------------------------------------------


def flag_taint_request(*, flag_id: int) -> None:
    """Ask for the flag's taint: its row QUEUED now, one task message once the transaction
    commits (``workers.flag_taint``)."""
    Flag.objects.filter(pk=flag_id).update(
        taint_state=Flag.TaintState.QUEUED, taint_requested_at=timezone.now(), taint_error=""
    )

    task_send_on_commit("workers.flag_taint", what=f"flag {flag_id} taint", flag_id=flag_id)


# --- when a tainted run first reads a flagged document ----------------------------------


def flag_reads_request(*, flag_id: int) -> None:
    """Ask for the first flagged sample of each run the flag taints (one task), once the
    transaction commits; the flag counts them (``reads_total``, ``reads_done``)."""
    total = Taint.objects.filter(flag_id=flag_id, run__isnull=False).count()
    Flag.objects.filter(pk=flag_id).update(reads_total=total, reads_done=0)

    task_send_on_commit("workers.flag_reads", what=f"flag {flag_id} reads", flag_id=flag_id)


# --- what the reads of a request asked for ----------------------------------------------


@contextmanager
def fact_requests() -> Iterator[None]:
    """Collect what the reads inside ask for (``selectors.facts``: facts never measured,
    taints whose task was lost) and ask for each once they are done: the middleware wraps
    every request in it, so a page's reads stay reads and the asking is this service's."""
    asked: set[tuple] = set()
    token = ASKED.set(asked)
    try:
        yield
    finally:
        ASKED.reset(token)
    for what in sorted(asked, key=repr):  # a view that raised asks for nothing
        if what[0] == "fact":
            fact_request(*what[1:])
        else:
            flag_taint_request(flag_id=what[1])

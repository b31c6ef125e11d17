"""Writes for jobs: create, execute units, finalize, cancel, retry.

A job runs a ``shardcore.units.Plan``. Each unit is one Celery task
(``workers.tasks.job_unit_run``) that claims its row by state, runs the unit through
shardcore (idempotent: completion markers), then records its stats. The last unit of a
phase to finish queues the next phase; after the last phase one ``job_finalize`` task writes
the manifest (the artifact's commit point) and calls the job's recorder, a catalog service
that writes the artifact rows in the same transaction as the job's success.

The engine is split by concern, and this module is its front door:

* ``webapp.jobs.dispatch``: create a job (its plan's header in the Job row, one row per
  unit carrying the unit's spec), start phases, send task messages (a phase's first batch
  at its start, the rest by the dispatcher's steps, ``workers.job_dispatch``, a bounded
  batch each), and put a plan back together for a worker;
* ``webapp.jobs.claims``: claim a unit (exactly once), renew its lease, record its outcome
  (a success adds to the job's counters in place and counts its phase down), finalize;
* ``webapp.jobs.recovery``: cancel, retry, and the sweep that heals lost workers and lost
  messages (one worker per queue at a time);
* ``webapp.jobs.common``: errors, the job's log, its terminal record, database retries.

No unit's claim or success reads the plan, rewrites the job row or counts unit rows, so a
unit costs the same whatever the job's size (``bench/scale/jobs.py`` measures it).
Database errors while recording an outcome are retried on a fresh connection
(``SHARDYARD_DB_RETRIES``); a launch the broker refuses fails the job with a readable
error, and Retry sends it again.
"""

from __future__ import annotations

from webapp.jobs.claims import Heartbeat, job_finalize_execute, job_unit_execute, job_unit_give_up
from webapp.jobs.claims import claim as _claim
from webapp.jobs.claims import unit_fail as _unit_fail
from webapp.jobs.claims import unit_succeed as _unit_succeed
from webapp.jobs.common import (
    LOG_TAIL_LINES,
    JobError,
    TransientUnitError,
    bad_input_sum,
    lock_holder_guard,
    transient_errors,
    unit_lease,
)
from webapp.jobs.dispatch import job_create, job_dispatch_execute, job_plan
from webapp.jobs.dispatch import send_units as _send_units
from webapp.jobs.recovery import (
    MAX_UNIT_ATTEMPTS,
    job_cancel,
    job_reap,
    job_resend_lost,
    job_retry,
    job_sweep,
    lost_units_q,
    sweep_turn,
)

__all__ = [
    "LOG_TAIL_LINES",
    "MAX_UNIT_ATTEMPTS",
    "Heartbeat",
    "JobError",
    "TransientUnitError",
    "_claim",
    "_send_units",
    "_unit_fail",
    "_unit_succeed",
    "bad_input_sum",
    "job_cancel",
    "job_create",
    "job_dispatch_execute",
    "job_finalize_execute",
    "job_plan",
    "job_reap",
    "job_resend_lost",
    "job_retry",
    "job_sweep",
    "job_unit_execute",
    "job_unit_give_up",
    "lock_holder_guard",
    "lost_units_q",
    "sweep_turn",
    "transient_errors",
    "unit_lease",
]

"""The sweeper's view of the broker (``webapp.jobs.broker``) on the filesystem transport that
``make run`` uses: real task messages written by Celery through kombu's filesystem
transport are found by unit and job id; a message taken away is not. (Redis is covered by
``test_jobs_heal``, which deletes the queue key of a real Redis.)"""

from __future__ import annotations

from kombu import Connection

from webapp.jobs import broker
from workers.tasks import job_finalize, job_unit_run


def test_it_finds_the_unit_and_finalize_messages_a_filesystem_broker_holds(tmp_path, settings):
    folder = tmp_path / "broker"
    folder.mkdir()
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(tmp_path / "control"),  # not the working directory
    }
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = options
    with Connection("filesystem://", transport_options=options) as conn:
        for unit_id in (7, 9):
            job_unit_run.apply_async(kwargs={"unit_id": unit_id}, connection=conn, queue="q1")
        job_finalize.apply_async(kwargs={"job_id": 3}, connection=conn, queue="q1")
        job_unit_run.apply_async(kwargs={"unit_id": 11}, connection=conn, queue="other")

    pending = broker.pending_messages(broker_url="filesystem://", queue="q1", unacked_within=60)
    assert pending.units == {7, 9} and pending.finalizes == {3}

    # A worker takes a message (the transport moves its file away): it is no longer pending.
    taken = sorted(folder.glob("*.q1.msg"))[0]
    taken.unlink()
    left = broker.pending_messages(broker_url="filesystem://", queue="q1", unacked_within=60)
    assert len(left.units) + len(left.finalizes) == 2
    assert broker.pending_messages(broker_url="amqp://x", queue="q1", unacked_within=60) is None

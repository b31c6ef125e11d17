"""The sweeper's view of the broker (``webapp.jobs.broker``) on the filesystem transport that
``make run`` uses: real task messages written by Celery through kombu's filesystem
transport carry the time they were sent, and the queue's head is its oldest waiting
message; a message taken away is not waiting any more. (Redis is covered by
``test_jobs_dispatch`` and ``test_jobs_heal``, which delete messages from a real Redis.)"""

from __future__ import annotations

import time

from kombu import Connection

from webapp.jobs import broker
from workers.tasks import job_finalize, job_unit_run


def test_it_reads_when_the_oldest_waiting_message_was_sent_on_a_filesystem_broker(
    tmp_path, settings
):
    folder = tmp_path / "broker"
    folder.mkdir()
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(tmp_path / "control"),  # not the working directory
    }
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = options
    sent = []
    with Connection("filesystem://", transport_options=options) as conn:
        for unit_id in (7, 9):
            sent.append(time.time())
            job_unit_run.apply_async(kwargs={"unit_id": unit_id}, connection=conn, queue="q1")
            time.sleep(0.01)
        job_finalize.apply_async(kwargs={"job_id": 3}, connection=conn, queue="q1")
        job_unit_run.apply_async(kwargs={"unit_id": 11}, connection=conn, queue="other")

    head = broker.queue_head(broker_url="filesystem://", queue="q1", unacked_within=60)
    assert head is not None
    assert sent[0] <= head.oldest_sent < sent[1]
    assert head.delivered == broker.Pending()

    # A worker takes the oldest message (the transport moves its file away): the head is
    # the next one, sent later.
    min(folder.glob("*.q1.msg"), key=lambda p: broker._sent(p.read_bytes())).unlink()
    left = broker.queue_head(broker_url="filesystem://", queue="q1", unacked_within=60)
    assert left is not None and sent[1] <= left.oldest_sent
    for path in folder.glob("*.q1.msg"):
        path.unlink()
    empty = broker.queue_head(broker_url="filesystem://", queue="q1", unacked_within=60)
    assert empty is not None and empty.oldest_sent is None
    assert broker.queue_head(broker_url="amqp://x", queue="q1", unacked_within=60) is None

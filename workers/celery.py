"""The Celery application. Configuration comes from Django settings (``CELERY_*`` names),
so the broker is Redis in production and the filesystem transport in ``make run``.
"""

import os
import sys
import time
from pathlib import Path

from celery import Celery
from celery.signals import before_task_publish, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("shardyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The packages whose ``tasks`` modules define the tasks; a worker imports them when it
# starts, a web process the first time it sends one (``webapp.tasks``).
TASK_PACKAGES = ["workers"]
app.autodiscover_tasks(TASK_PACKAGES, related_name="tasks")


def ensure_broker_dirs() -> None:
    """The filesystem transport needs its folders to exist before the first message."""
    from django.conf import settings

    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
            Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS[key]).mkdir(parents=True, exist_ok=True)


def worker_command(
    *, hostname: str, concurrency: int = 1, options: tuple[str, ...] = ()
) -> list[str]:
    """The command line that starts one Celery worker of this app with this interpreter
    (``options``: more ``celery worker`` flags, e.g. ``-Q`` and a queue)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers",
        "worker",
        "--loglevel",
        "INFO",
        "--concurrency",
        str(concurrency),
        "--hostname",
        hostname,
        *options,
    ]


@before_task_publish.connect
def _stamp_sent(headers=None, **_kwargs) -> None:
    """Every message carries the time it was sent: the sweeper compares the oldest waiting
    one's with the units' own send times (``webapp.jobs.broker``)."""
    if headers is not None:
        headers["shardyard_sent"] = time.time()


@worker_ready.connect
def _start_sweeper(sender=None, **_kwargs) -> None:
    from workers import sweeper

    sweeper.start(queue=app.conf.task_default_queue)


@worker_ready.connect
def _start_beat(sender=None, **_kwargs) -> None:
    from workers import beat

    beat.start(worker=getattr(sender, "hostname", "") or "", queue=app.conf.task_default_queue)


@worker_shutdown.connect
def _stop_beat(**_kwargs) -> None:
    from workers import beat

    beat.stop()


@worker_shutdown.connect
def _stop_sweeper(**_kwargs) -> None:
    from workers import sweeper

    sweeper.stop()


@worker_ready.connect
def _start_webhooks(sender=None, **_kwargs) -> None:
    from workers import webhooks

    webhooks.start()


@worker_shutdown.connect
def _stop_webhooks(**_kwargs) -> None:
    from workers import webhooks

    webhooks.stop()

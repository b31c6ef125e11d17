"""Send a heartbeat task and wait until a worker has recorded it: proves broker, worker and
database work together. Exit status 1 when no worker answers in time."""

from __future__ import annotations

import time
import uuid

from django.core.management.base import BaseCommand, CommandError

from webapp.ops.models import Heartbeat
from workers.celery import ensure_broker_dirs
from workers.tasks import heartbeat


class Command(BaseCommand):
    help = "Check that a Celery worker answers and can write to the database."

    def add_arguments(self, parser):
        parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait (default 30)")

    def handle(self, *args, wait, **options):
        ensure_broker_dirs()
        nonce = uuid.uuid4().hex
        heartbeat.apply_async(kwargs={"nonce": nonce})
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            hb = Heartbeat.objects.filter(nonce=nonce).first()
            if hb is not None:
                self.stdout.write(
                    self.style.SUCCESS(f"worker {hb.worker} answered via {hb.broker}")
                )
                return
            time.sleep(0.25)
        raise CommandError(f"no worker answered within {wait:g}s")

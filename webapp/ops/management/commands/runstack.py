"""``make run``: migrate, ensure an admin, then run the web server and one Celery worker
side by side until Ctrl-C, which stops both; the first time, the demo corpus is loaded in
the background (``load_demo``) so that every page has real data within minutes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from shardcore.config import env_bool, env_int
from workers.celery import ensure_broker_dirs, worker_command


class Command(BaseCommand):
    help = "Run the web server and a Celery worker together (the embedded setup)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("SHARDYARD_HOST", "127.0.0.1"))
        parser.add_argument(
            "--port", type=int, default=int(os.environ.get("SHARDYARD_PORT", "8000"))
        )
        parser.add_argument("--concurrency", type=int, default=1)
        parser.add_argument(
            "--no-demo", action="store_true", help="do not load the demo (also SHARDYARD_DEMO=0)"
        )

    def handle(self, *args, host, port, concurrency, no_demo, **options):
        settings.HOME_ROOT.mkdir(parents=True, exist_ok=True)
        for root in settings.SOURCE_ROOTS:
            if not isinstance(root, str):  # s3:// roots are strings
                root.mkdir(parents=True, exist_ok=True)
        ensure_broker_dirs()
        call_command("migrate", interactive=False, verbosity=0)
        call_command("ensure_admin")
        python = sys.executable
        procs = [
            subprocess.Popen(worker_command(hostname="embedded@%h", concurrency=concurrency)),
            subprocess.Popen(
                [python, "manage.py", "runserver", "--noreload", f"{host}:{port}"],
                cwd=settings.BASE_DIR,
            ),
        ]
        self.stdout.write(
            self.style.SUCCESS(f"Shardyard is running at http://{host}:{port}/  (Ctrl-C stops it)")
        )
        helpers = []
        if env_bool("SHARDYARD_DEMO", True) and not no_demo:
            demo_bytes = env_int("SHARDYARD_DEMO_BYTES", 4_000_000, minimum=1000)
            helpers.append(
                subprocess.Popen(
                    [python, "manage.py", "load_demo", "--max-bytes", str(demo_bytes)],
                    cwd=settings.BASE_DIR,
                )
            )

        # A service manager (systemd, docker stop, kill) sends SIGTERM, not Ctrl-C: stop the
        # children the same way instead of dying and leaving them running.
        def _terminate(signum, frame):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _terminate)
        try:
            while all(p.poll() is None for p in procs):
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            for p in helpers + procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in helpers + procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.stdout.write("Stopped.")

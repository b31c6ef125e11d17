"""``manage.py load_demo``: the demo corpus (the local CPython standard library) through the
whole pipeline on the running worker. Idempotent; ``make run`` calls it in the background."""

from django.core.management.base import BaseCommand, CommandError

from webapp.ops.demo import DemoError, demo_load


class Command(BaseCommand):
    help = "Register the CPython standard-library demo and build its pools and mixture."

    def add_arguments(self, parser):
        parser.add_argument(
            "--max-bytes", type=int, default=4_000_000, help="text per source (default 4 MB)"
        )
        parser.add_argument("--seq-len", type=int, default=512)
        parser.add_argument("--tokens", type=int, default=2_000_000, help="mixture token budget")
        parser.add_argument(
            "--wait", type=float, default=1800.0, help="seconds to wait for the worker"
        )

    def handle(self, *args, max_bytes, seq_len, tokens, wait, **options):
        try:
            demo_load(
                max_bytes_per_source=max_bytes,
                seq_len=seq_len,
                token_budget=tokens,
                wait=wait,
                log=lambda msg: self.stdout.write(f"[demo] {msg}"),
            )
        except DemoError as exc:
            raise CommandError(str(exc)) from exc

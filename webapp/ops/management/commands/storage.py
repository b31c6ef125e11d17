"""``manage.py storage``: what the data root holds, retiring an artifact, the collector.

manage.py storage report                 # measure now: bytes per kind, owner and team (stored
                                         # as the Storage page's newest report)
manage.py storage retire pool 12         # refused (naming the readers) while read
manage.py storage gc                     # dry run: what the collector would remove
manage.py storage gc --delete            # remove it
"""

from django.core.management.base import BaseCommand, CommandError

from webapp.ops import storage
from webapp.ops.models import StorageReport


class Command(BaseCommand):
    help = "Storage: report, retire an artifact, collect files no row owns (dry run first)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("report", help="measure now: bytes held per kind, owner and team")
        retire = sub.add_parser("retire", help="remove an artifact's files, keep its rows")
        retire.add_argument("kind", choices=sorted(storage.KINDS))
        retire.add_argument("id", type=int)
        gc = sub.add_parser("gc", help="files under the data root that no row owns")
        gc.add_argument("--delete", action="store_true", help="remove them (default: report)")
        gc.add_argument(
            "--min-age",
            type=float,
            default=3600.0,
            help="leave files younger than this many seconds (default 3600)",
        )

    def handle(self, *args, action, **options):
        if action == "report":
            row = StorageReport.objects.create()
            storage.storage_measure(report_id=row.pk)
            row.refresh_from_db()
            if row.state != StorageReport.State.DONE:
                raise CommandError(f"measuring failed: {row.error}")
            report = row.report
            self.stdout.write(f"data root {report['data_root']}: {report['total']} bytes")
            for title in ("by_kind", "by_owner", "by_team"):
                for name, size in report[title].items():
                    self.stdout.write(f"  {title[3:]:5} {name}: {size}")
        elif action == "retire":
            try:
                done = storage.artifact_retire(kind=options["kind"], pk=options["id"])
            except (storage.RetireRefused, ValueError) as exc:
                raise CommandError(str(exc)) from None
            except Exception as exc:
                if type(exc).__name__ == "DoesNotExist":
                    raise CommandError(str(exc)) from None
                raise
            self.stdout.write(
                f"retired {done['kind']} {done['id']}: "
                f"{done['bytes_freed']} bytes freed at {done['path']}"
            )
        else:
            report = storage.collect_garbage(delete=options["delete"], min_age=options["min_age"])
            for line in report.lines():
                self.stdout.write(line)
            if not options["delete"] and report.orphans:
                self.stdout.write("dry run: nothing removed; run again with --delete")

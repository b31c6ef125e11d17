"""``manage.py catalog <action>``: the catalog services for operators and scripts, one
subcommand per service (what the pages do, scriptable); each action is a class of
``webapp.catalog.management.actions``. Errors print one line and exit 1."""

from __future__ import annotations

import os
import re

from django.core.exceptions import ObjectDoesNotExist
from django.core.management.base import BaseCommand, CommandError

from shardcore import storage
from webapp.catalog.errors import CatalogError
from webapp.catalog.management.actions import ACTIONS
from webapp.jobs import services as jobs


class Command(BaseCommand):
    help = (
        "Register and scan sources, tokenize, build pools and mixture versions, materialize "
        "and export them, register runs, flag data, cancel, retry or reap jobs."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        for action in ACTIONS.values():
            action.add_arguments(sub.add_parser(action.name, help=action.help))

    def handle(self, *args, action: str, **o):

        try:
            out = ACTIONS[action].run(o)
        except (CatalogError, jobs.JobError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        except ObjectDoesNotExist as exc:  # an id that names no row: say which, no traceback
            raise CommandError(_missing(exc, o)) from exc
        except Exception as exc:
            if not storage.is_store_error(exc):
                raise
            endpoint = os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"
            raise CommandError(
                f"the object store ({endpoint}) did not answer: {exc}. Check that it is "
                "reachable, the bucket exists and the AWS_* credentials are right"
            ) from exc
        self.stdout.write(out)


def _missing(exc: ObjectDoesNotExist, options: dict) -> str:
    """'no training run 999' for the model whose lookup failed and the id it was given."""
    model = type(exc).__qualname__.split(".")[0]
    name = re.sub(r"(?<!^)(?=[A-Z])", " ", model).lower()
    ids = [str(v) for k, v in options.items() if k.endswith("_id") and v is not None]
    if options.get("tokenized_ids"):  # "annotate A B ...": the ids it was given
        ids = [str(v) for v in options["tokenized_ids"]]
    return f"no {name} {', '.join(ids)}".strip()

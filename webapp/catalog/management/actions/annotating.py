"""Actions on annotations: annotate a tokenized source, flag the documents where a filter
over an annotation's columns holds."""

from __future__ import annotations

import argparse
from typing import Any

from webapp.catalog.management.actions.base import Action, launched
from webapp.catalog.services import annotations as annotation_services


class Annotate(Action):
    name = "annotate"
    help = "start a job annotating a tokenized source"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("tokenized_id", type=int)
        parser.add_argument("annotator")
        parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
        parser.add_argument("--text-from", choices=("auto", "source", "tokens"), default="auto")

    def run(self, o: dict[str, Any]) -> str:
        ann = annotation_services.annotation_build(
            tokenized_id=o["tokenized_id"], annotator=o["annotator"],
            params="\n".join(o["param"]), text_from=o["text_from"],
        )  # fmt: skip
        return f"annotation {ann.pk} ({ann.annotator}): " + (
            "built already" if ann.is_ready else launched(ann.job_id)
        )


class FlagWhere(Action):
    name = "flag-where"
    help = "flag the documents where a filter over an annotation holds"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("annotation_id", type=int)
        parser.add_argument("filter", help="e.g. 'pii.emails > 0'")
        parser.add_argument("--reason", default="")

    def run(self, o: dict[str, Any]) -> str:
        flag = annotation_services.annotation_flag_where(
            annotation_id=o["annotation_id"], filter=o["filter"], reason=o["reason"]
        )
        return (
            f"flag {flag.pk}: {len(flag.document_ids)} document(s), {flag.taints.count()} taint(s)"
        )

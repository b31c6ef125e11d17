"""Actions on annotations: annotate a tokenized source, flag the documents where a filter
over an annotation's columns holds."""

from __future__ import annotations

import argparse
from typing import Any

from webapp.catalog.errors import CatalogError
from webapp.catalog.management.actions.base import Action, launched
from webapp.catalog.services import annotations as annotation_services
from webapp.catalog.services.annotation_groups import ANNOTATOR, annotation_group_build
from webapp.catalog.services.flags import flag_awaiting_documents


class Annotate(Action):
    name = "annotate"
    help = (
        "start a job annotating a tokenized source; with several (in priority order) and "
        "minhash, one job clustering near-duplicates across them"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("tokenized_ids", type=int, nargs="+", metavar="tokenized_id")
        parser.add_argument("annotator")
        parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
        parser.add_argument("--text-from", choices=("auto", "source", "tokens"), default="auto")

    def run(self, o: dict[str, Any]) -> str:
        if len(o["tokenized_ids"]) > 1:
            return _annotate_group(o)
        ann = annotation_services.annotation_build(
            tokenized_id=o["tokenized_ids"][0],
            annotator=o["annotator"],
            params="\n".join(o["param"]),
            text_from=o["text_from"],
        )
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
        if flag_awaiting_documents(flag):
            return f"flag {flag.pk}: the documents where {flag.where} are being found by a worker"
        return f"flag {flag.pk}: {flag.num_documents} document(s), {flag.taints.count()} taint(s)"


def _annotate_group(o: dict[str, Any]) -> str:
    """``annotate A B ... minhash``: one job clustering near-duplicates across the sources;
    a line per source's annotation."""
    if o["annotator"] != ANNOTATOR:
        raise CatalogError(
            f"annotate: several tokenized sources are clustered together by {ANNOTATOR} "
            f"only; annotate each with {o['annotator']!r} on its own"
        )
    if o["text_from"] != "auto":
        raise CatalogError("annotate: --text-from applies to one tokenized source")
    rows = annotation_group_build(tokenized_ids=o["tokenized_ids"], params="\n".join(o["param"]))
    state = "built already" if all(a.is_ready for a in rows) else launched(rows[0].job_id)
    return "\n".join(
        f"annotation {a.pk} ({a.annotator}) of tokenized source {a.tokenized_source_id}: {state}"
        for a in rows
    )

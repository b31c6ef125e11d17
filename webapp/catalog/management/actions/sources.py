"""Actions on sources: register, scan, flag data in one."""

from __future__ import annotations

import argparse
from typing import Any

from webapp.catalog.management.actions.base import Action
from webapp.catalog.services import flags, sources


class SourceRegister(Action):
    name = "source-register"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("uri")
        parser.add_argument("--text-field", default="text")

    def run(self, o: dict[str, Any]) -> str:
        src = sources.source_register(name=o["name"], uri=o["uri"], text_field=o["text_field"])
        return f"source {src.pk} {src.name}: {src.num_files} files, {src.num_documents} documents"


class SourceScan(Action):
    name = "source-scan"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("source_id", type=int)

    def run(self, o: dict[str, Any]) -> str:
        src = sources.source_scan(source_id=o["source_id"])
        return f"source {src.pk}: {src.num_documents} documents, {src.bad_lines} bad lines"


class Flag(Action):
    name = "flag"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("source_id", type=int)
        parser.add_argument("reason")
        parser.add_argument("--file")
        parser.add_argument("--documents", type=int, nargs="+")

    def run(self, o: dict[str, Any]) -> str:
        flag = flags.flag_create(
            reason=o["reason"],
            source_id=o["source_id"],
            file_path=o["file"],
            document_ids=o["documents"],
        )
        # An operator's command computes the taint here too (the task queued for it
        # stores the same rows again).
        flags.flag_taint_compute(flag_id=flag.pk)
        return f"flag {flag.pk}: {flag.taints.count()} taint(s)"

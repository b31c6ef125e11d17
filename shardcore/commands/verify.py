"""``shardyard verify DIR``: re-read an artifact and check it against its manifest."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shardcore import storage
from shardcore.cli import CLIError


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(
        name,
        help="check every file of an artifact against its manifest",
        description="Re-read every file listed in DIR/manifest.json: sizes, xxh3 checksums "
        "(per block, so corruption is located), and the kind's own structure checks. "
        "Exit status 1 when anything is wrong.",
    )
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--files-only", action="store_true", help="only sizes and checksums")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    # A usage error (2), not corruption (1), said before the library loads.
    if not storage.is_remote(args.directory) and not Path(args.directory).exists():
        raise CLIError(f"{args.directory}: no such file or directory")
    from shardcore.verify import verify

    report = verify(args.directory, content=not args.files_only)
    if report.ok:
        print(
            f"ok: {report.kind} at {report.directory}: {report.files_checked:,} files, "
            f"{report.bytes_checked / 1e6:.1f} MB verified"
        )
        return 0
    print(f"CORRUPT: {report.directory}: {len(report.problems)} problem(s)", file=sys.stderr)
    for problem in report.problems:
        print(f"  {problem}", file=sys.stderr)
    return 1

"""The ``shardyard`` command line. Each subcommand lives in its own module and registers
itself through ``add_parser(subparsers)``; the module is imported only when needed so that
``shardyard --help`` stays fast."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> module under shardcore.commands; each module defines add_parser() and run().
COMMANDS: dict[str, str] = {
    "tokenize": "tokenize",
    "verify": "verify",
    "pool": "pool",
    "locate": "locate",
    "mix": "mix",
    "export": "export",
    "quality": "quality",
    "materialize": "materialize",
}


def build_parser() -> argparse.ArgumentParser:
    from shardcore import __version__

    parser = argparse.ArgumentParser(
        prog="shardyard",
        description="Tokenize, pack, globally shuffle and mix pretraining data.",
    )
    parser.add_argument("--version", action="version", version=f"shardyard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        importlib.import_module(f"shardcore.commands.{module}").add_parser(sub, name)
    return parser


class CLIError(Exception):
    """A user error: printed as one line and exit status 2, never a traceback."""


def check_new_artifact(out, workers: int = 1) -> None:
    """Refuse to build into a finished artifact (artifacts are immutable) or with fewer
    than one worker, before any work starts."""
    from pathlib import Path

    from shardcore.manifest import MANIFEST_NAME

    if (Path(out) / MANIFEST_NAME).exists():
        raise CLIError(f"{out} already holds a finished artifact; choose another --out")
    if workers < 1:
        raise CLIError("--workers must be at least 1")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except CLIError as exc:
        print(f"shardyard {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

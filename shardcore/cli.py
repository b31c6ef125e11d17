"""The ``shardyard`` command line. Each subcommand lives in its own module and registers
itself through ``add_parser(subparsers)``. Only the module of the command being run is
imported (``shardyard --help`` imports none), and the modules import the library's heavy
parts (numpy, pyarrow, duckdb, tokenizers, fsspec) inside the functions that use them, so
that the command line starts in a fraction of a second; tests/unit/test_cli_startup.py
holds both."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from shardcore import __version__, limits
from shardcore.errors import InputError, ShardcoreError
from shardcore.sizes import parse_size

# name -> (module under shardcore.commands, the one line ``shardyard --help`` shows). Each
# module defines add_parser() and run(); its parser's help is the same line (a test checks).
COMMANDS: dict[str, tuple[str, str]] = {
    "tokenize": ("tokenize", "tokenize sources into Megatron IndexedDataset shards"),
    "verify": ("verify", "check every file of an artifact against its manifest"),
    "pool": (
        "pool",
        "select, globally shuffle, pack and shard tokenized sources into a pool",
    ),
    "locate": (
        "locate",
        "map a sample or token position of a pool or mixture to shard, record and offset",
    ),
    "mix": ("mix", "blend pools by token share into a mixture schedule"),
    "export": ("export", "export a mixture for Megatron-LM, OLMo-core, nanotron or JSON"),
    "quality": (
        "quality",
        "measure how evenly a pool or mixture spreads a property over training",
    ),
    "materialize": ("materialize", "write a mixture as shards in training order"),
    "annotate": (
        "annotate",
        "compute per-document columns (language, quality, duplicates...) of a tokenized source",
    ),
    "unit": ("unit", "run, finalize or inspect the units of a build saved in its output"),
    "register": (
        "register",
        "record a pool or mixture built by the command line in a server's catalog",
    ),
    "decon": (
        "decon",
        "decontamination: compile a benchmark index, report what holds benchmark items",
    ),
}


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``shardyard pool: error: argument --memory: ...``), exit
    status 2; ``--help`` still shows the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or with ``command`` of that one alone (the others are
    listed by name and summary, their modules not imported)."""

    parser = _Parser(
        prog="shardyard",
        description="Tokenize, pack, globally shuffle and mix pretraining data.",
    )
    parser.add_argument("--version", action="version", version=f"shardyard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, summary) in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(f"shardcore.commands.{module}").add_parser(sub, name)
        else:
            sub.add_parser(name, help=summary)
    return parser


def command_of(argv: Sequence[str]) -> str:
    """The command ``argv`` names ("" for none: ``shardyard``, ``--help``, ``--version``).
    The top level takes no option with a value, so it is the first word not an option."""

    for word in argv:
        if not word.startswith("-"):
            return word
    return ""


class CLIError(Exception):
    """A user error: printed as one line and exit status 2, never a traceback."""


def size_arg(text: str) -> int:
    """An argparse ``type`` for byte sizes (``shardcore.sizes``: MB = 10^6, MiB = 2^20)."""

    try:
        return parse_size(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def number_arg(name: str) -> Callable[[str], int | float]:
    """An argparse ``type`` for a number typed as ``shardcore.limits.parse`` reads it
    (``1e6``, ``1_000_000``, ``1M``), as the pages read it; its range is checked where the
    library takes it, with the same message the pages show."""

    def read(text: str) -> int | float:
        try:
            return limits.parse(name, text)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    read.__name__ = name
    return read


def check_new_artifact(out: str | os.PathLike, workers: int = 1) -> None:
    """Refuse to build into a finished artifact (artifacts are immutable) or with a number
    of workers outside ``shardcore.limits``' range, before any work starts."""

    from shardcore.manifest import is_complete

    if is_complete(out):
        raise CLIError(f"{out} already holds a finished artifact; choose another --out")
    try:
        limits.workers(workers)
    except InputError as exc:
        raise CLIError(f"--{exc}") from None


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(command_of(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return int(exc.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0

    try:
        return int(args.func(args) or 0)
    except (CLIError, ShardcoreError) as exc:
        return _fail(args.command, str(exc))
    except OSError as exc:  # a path that cannot be read or written: name it, no traceback
        where = exc.filename or ""
        return _fail(args.command, f"{where}: {exc.strerror or exc}" if where else str(exc))
    except Exception as exc:
        message = _storage_error(exc)
        if message is None:
            raise
        return _fail(args.command, message)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _storage_error(exc: Exception) -> str | None:
    """The one line for an object store's refusal (no such bucket, denied, no credentials,
    an endpoint that does not answer), naming the bucket when the store does; None for any
    other exception."""
    if type(exc).__module__.split(".")[0] not in ("botocore", "boto3"):
        return None
    error = (getattr(exc, "response", None) or {}).get("Error", {})
    bucket = error.get("BucketName")
    if bucket:
        message = error.get("Message") or error.get("Code") or str(exc)
        return f"s3://{bucket}: {message}"
    hint = ""
    if "credentials" in str(exc).lower():
        hint = " (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or ~/.aws)"
    elif "endpoint" in str(exc).lower():
        hint = " (check AWS_ENDPOINT_URL)"
    return f"object storage: {exc}{hint}"


def _fail(command: str, message: str) -> int:
    """One line on stderr, exit status 2."""
    line = " ".join(message.split())  # messages quoting input may hold newlines
    print(f"shardyard {command}: error: {line}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    # Run as ``python -m shardcore.cli``: use the module's own classes (the commands raise
    # shardcore.cli.CLIError, not __main__.CLIError).
    from shardcore.cli import main as _main

    sys.exit(_main())

"""``shardyard export DIR --format megatron|olmo|nanotron|json``: a mixture as trainer
configuration. Megatron also takes materialized mixtures; with ``--out DIR`` it writes the
stage data-args files and megatron-core's index cache keyed for the trainer's arguments."""

from __future__ import annotations

import argparse

from shardcore import atomic
from shardcore.export import FORMATS, export


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    """The options every format shares, then each format's own group (its registry entry's
    ``add_arguments``)."""

    p = sub.add_parser(name, help="export a mixture for Megatron-LM, OLMo-core, nanotron or JSON")
    p.add_argument(
        "mixture",
        metavar="DIR",
        help="mixture directory (olmo: also a pool or materialized; megatron: also materialized)",
    )
    p.add_argument("--format", required=True, choices=list(FORMATS))
    batched = ", ".join(f.label for f in FORMATS.values() if f.batch_sized)
    p.add_argument("--global-batch-size", type=int, help=f"samples per step ({batched} stages)")
    p.add_argument(
        "--out",
        help="write to this file instead of standard output; megatron (without --stage): a "
        "directory for the data-args files, the index cache and megatron.txt",
    )
    for f in FORMATS.values():
        f.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    spec = FORMATS[args.format]
    answered = spec.cli_answer(args)
    if answered is not None:
        return answered
    options = spec.cli_options(args)
    text = export(args.mixture, spec.name, **options)
    if args.out and "out" not in options:
        atomic.write_text(args.out, text)
        # Say what was written, so that a quiet success is not mistaken for nothing done.
        print(
            f"wrote the {args.format} export of {args.mixture} to {args.out} "
            f"({len(text.encode()):,} bytes)"
        )
    else:
        # Standard output; or the format wrote --out itself (megatron.txt holds this text).
        print(text, end="")
    return 0

"""``shardyard export DIR --format megatron|olmo|nanotron|json``: a mixture as trainer
configuration."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardcore.cli import CLIError


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="export a mixture for Megatron-LM, OLMo-core, nanotron or JSON")
    p.add_argument("mixture", metavar="DIR", help="mixture directory")
    p.add_argument("--format", required=True, choices=["megatron", "olmo", "nanotron", "json"])
    p.add_argument("--global-batch-size", type=int, help="samples per step (nanotron stages)")
    p.add_argument("--stage", help="megatron: write only this stage's --data-args-path list")
    p.add_argument("--out", help="write to this file instead of standard output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shardcore.errors import ShardcoreError
    from shardcore.export import export, megatron_data_args

    try:
        if args.stage and args.format == "megatron":
            text = megatron_data_args(args.mixture, args.stage) + "\n"
        else:
            text = export(args.mixture, args.format, global_batch_size=args.global_batch_size)
    except ShardcoreError as exc:
        raise CLIError(str(exc)) from None
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0

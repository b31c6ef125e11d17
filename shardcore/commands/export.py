"""``shardyard export DIR --format megatron|olmo|nanotron|json``: a mixture as trainer
configuration."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardcore.cli import CLIError


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="export a mixture for Megatron-LM, OLMo-core, nanotron or JSON")
    p.add_argument(
        "mixture", metavar="DIR", help="mixture directory (olmo: also a pool or materialized)"
    )
    p.add_argument("--format", required=True, choices=["megatron", "olmo", "nanotron", "json"])
    p.add_argument(
        "--global-batch-size", type=int, help="samples per step (OLMo-core, nanotron stages)"
    )
    p.add_argument(
        "--materialized",
        metavar="DIR",
        help="olmo: the mixture's materialized copy, read in Shardyard's exact order",
    )
    p.add_argument("--work-dir", help="olmo: OLMo-core's dataset and data loader work_dir")
    p.add_argument("--views-dir", help="nanotron: where the pools' datatrove view folders go")
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
            options = {"global_batch_size": args.global_batch_size}
            if args.format == "olmo":
                options.update(materialized=args.materialized, work_dir=args.work_dir)
            if args.format == "nanotron" and args.views_dir:
                options["views_dir"] = args.views_dir
            text = export(args.mixture, args.format, **options)
    except ShardcoreError as exc:
        raise CLIError(str(exc)) from None
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0

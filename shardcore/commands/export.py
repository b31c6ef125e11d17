"""``shardyard export DIR --format megatron|olmo|nanotron|json``: a mixture as trainer
configuration. Megatron also takes materialized mixtures; with ``--out DIR`` it writes the
stage data-args files and megatron-core's index cache keyed for the trainer's arguments."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardcore.cli import CLIError


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    from shardcore import megatron_cache as mc

    p = sub.add_parser(name, help="export a mixture for Megatron-LM, OLMo-core, nanotron or JSON")
    p.add_argument("mixture", metavar="DIR", help="mixture (or, for megatron, materialized) dir")
    p.add_argument("--format", required=True, choices=["megatron", "olmo", "nanotron", "json"])
    p.add_argument("--global-batch-size", type=int, help="samples per step (nanotron stages)")
    p.add_argument("--stage", help="megatron: write only this stage's --data-args-path list")
    p.add_argument(
        "--out",
        help="write to this file instead of standard output; megatron (without --stage): a "
        "directory for the data-args files, the index cache and megatron.txt",
    )
    g = p.add_argument_group("megatron: the trainer arguments the index cache is keyed for")
    g.add_argument("--seed", type=int, default=mc.MEGATRON_DEFAULT_SEED, help="--seed (1234)")
    g.add_argument("--seq-length", type=int, help="--seq-length (default: the mixture's)")
    g.add_argument("--split", default=mc.DEFAULT_SPLIT, help="--split (100,0,0)")
    g.add_argument(
        "--megatron-tokenizer",
        help="the trainer's tokenizer: NullTokenizer:VOCAB, HuggingFaceTokenizer:PATH or its "
        "unique_identifiers as JSON (default: from the mixture's tokenizer)",
    )
    g.add_argument(
        "--mid-level-dataset-surplus",
        type=float,
        default=mc.MEGATRON_DEFAULT_SURPLUS,
        help="--mid-level-dataset-surplus (0.005)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shardcore.errors import ShardcoreError
    from shardcore.export import export, megatron_data_args

    try:
        if args.stage and args.format == "megatron":
            text = megatron_data_args(args.mixture, args.stage) + "\n"
        elif args.format == "megatron":
            text = export(
                args.mixture,
                "megatron",
                out=args.out,
                seed=args.seed,
                seq_length=args.seq_length,
                split=args.split,
                tokenizer=args.megatron_tokenizer,
                mid_level_dataset_surplus=args.mid_level_dataset_surplus,
            )
            print(text, end="")  # megatron.txt in --out holds the same text
            return 0
        else:
            text = export(args.mixture, args.format, global_batch_size=args.global_batch_size)
    except ShardcoreError as exc:
        raise CLIError(str(exc)) from None
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0

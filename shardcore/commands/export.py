"""``shardyard export DIR --format megatron|olmo|nanotron|json``: a mixture as trainer
configuration. Megatron also takes materialized mixtures; with ``--out DIR`` it writes the
stage data-args files and megatron-core's index cache keyed for the trainer's arguments."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardcore import atomic
from shardcore import export_megatron as mc
from shardcore.cli import CLIError
from shardcore.export import FORMATS, export, megatron_data_args
from shardcore.megatron_check import review_trainer_args


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:

    p = sub.add_parser(name, help="export a mixture for Megatron-LM, OLMo-core, nanotron or JSON")
    p.add_argument(
        "mixture",
        metavar="DIR",
        help="mixture directory (olmo: also a pool or materialized; megatron: also materialized)",
    )
    p.add_argument("--format", required=True, choices=list(FORMATS))
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
    p.add_argument(
        "--nanotron-tokenizer",
        metavar="NAME_OR_DIR",
        help="nanotron: the Hugging Face tokenizer nanotron loads (hub name or local directory, "
        "same ids as the pools'); default: an hf: pool's own",
    )
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
        "--per-split",
        action="store_true",
        help="per stage a --per-split-data-args-path file (train: the stage, valid: the pools' "
        "val/ slices) instead of --data-args-path with --split",
    )
    g.add_argument(
        "--megatron-tokenizer",
        help="the trainer's tokenizer: NullTokenizer:VOCAB, HuggingFaceTokenizer:PATH or its "
        "unique_identifiers as JSON (default: from the mixture's tokenizer)",
    )
    g.add_argument(
        "--megatron-tokenizer-build",
        choices=sorted(mc.BUILD_CHOICES),
        default="all",
        help="which of Megatron-LM's tokenizer builds to key the cache for: all (default: "
        f"megatron-core {mc.SUPPORTED_MEGATRON_CORE}, with and without --legacy-tokenizer), "
        "default (pretrain_gpt's default, megatron-core's build_tokenizer) or legacy "
        "(--legacy-tokenizer, megatron-core 0.16.x)",
    )
    g.add_argument(
        "--mid-level-dataset-surplus",
        type=float,
        default=mc.MEGATRON_DEFAULT_SURPLUS,
        help="--mid-level-dataset-surplus (0.005)",
    )
    g.add_argument(
        "--check-trainer-args",
        metavar="ARGS",
        help="check Megatron-LM arguments (one quoted string) against the export in --out: "
        "prints why the order would not hold (exit status 1 if it would not) and which "
        "arguments a supported release refuses at start-up",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    if args.format == "megatron" and args.check_trainer_args is not None:
        return _check(args)
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
            per_split=args.per_split,
            tokenizer=args.megatron_tokenizer,
            tokenizer_build=args.megatron_tokenizer_build,
            mid_level_dataset_surplus=args.mid_level_dataset_surplus,
        )
        print(text, end="")  # megatron.txt in --out holds the same text
        return 0
    else:
        options = {"global_batch_size": args.global_batch_size}
        if args.format == "olmo":
            options.update(materialized=args.materialized, work_dir=args.work_dir)
        if args.format == "nanotron" and args.views_dir:
            options["views_dir"] = args.views_dir
        if args.format == "nanotron" and args.nanotron_tokenizer:
            options["tokenizer"] = args.nanotron_tokenizer
        text = export(args.mixture, args.format, **options)
    if args.out:
        atomic.write_text(args.out, text)
        # Say what was written, so that a quiet success is not mistaken for nothing done.
        print(f"wrote the {args.format} export of {args.mixture} to {args.out} "
              f"({len(text.encode()):,} bytes)")  # fmt: skip
    else:
        print(text, end="")
    return 0


def _check(args: argparse.Namespace) -> int:

    if not args.out or not (Path(args.out) / "export.json").is_file():
        raise CLIError("--check-trainer-args: give the export's directory as --out")
    review = review_trainer_args(args.out, args.check_trainer_args)
    if not review.problems:
        print("exact: Megatron reads the mixture's samples in Shardyard's order")
    else:
        print("ORDER NOT GUARANTEED:")
        for p in review.problems:
            print(f"  - {p}")
    for note in review.notes:
        print(f"  note: {note}")
    return 1 if review.problems else 0

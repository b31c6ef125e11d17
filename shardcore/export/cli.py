"""Each trainer export's part of ``shardyard export``: the argument group it adds to the
command's parser, and how the parsed arguments become the options of its render.

The registry (``shardcore.export.FORMATS``) names these functions on each format's entry, so
that the command (``shardcore.commands.export``) loops over the formats and looks one up by
name, and a new format brings its options without an edit to the command. Argument names are
global to the parser (argparse has one namespace): a format's own options carry its name
(``--nanotron-tokenizer``) where another format could want the same word.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from shardcore.errors import InputError
from shardcore.export import megatron as mc
from shardcore.export.megatron.check import review_trainer_args


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """A format without options of its own (JSON) adds nothing."""


def no_options(args: argparse.Namespace) -> dict[str, Any]:
    return {}


def no_answer(args: argparse.Namespace) -> int | None:
    return None


def megatron_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument_group("megatron").add_argument(
        "--stage", help="megatron: write only this stage's --data-args-path list"
    )
    g = parser.add_argument_group("megatron: the trainer arguments the index cache is keyed for")
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
        "--fit",
        metavar="DIR",
        help="megatron: where a stage lists more shard prefixes than megatron-core holds "
        "(32,766), materialize the mixture into DIR in shards large enough and export that "
        "copy (a rerun completes an interrupted copy)",
    )
    g.add_argument(
        "--check-trainer-args",
        metavar="ARGS",
        help="check Megatron-LM arguments (one quoted string) against the export in --out: "
        "prints why the order would not hold (exit status 1 if it would not) and which "
        "arguments a supported release refuses at start-up",
    )


def megatron_options(args: argparse.Namespace) -> dict[str, Any]:
    """With ``--stage``: that stage's data-args list alone, which ``--out`` names as a file.
    Without: the full export, whose ``--out`` is the directory the export writes itself
    (data-args files, index cache, megatron.txt)."""
    if args.stage:
        return {"stage": args.stage}
    return {
        "out": args.out,
        "seed": args.seed,
        "seq_length": args.seq_length,
        "split": args.split,
        "per_split": args.per_split,
        "tokenizer": args.megatron_tokenizer,
        "tokenizer_build": args.megatron_tokenizer_build,
        "mid_level_dataset_surplus": args.mid_level_dataset_surplus,
        "fit": args.fit,
    }


def megatron_check(args: argparse.Namespace) -> int | None:
    """``--check-trainer-args``: review Megatron-LM arguments against the export in
    ``--out`` instead of exporting; exit status 1 when the order would not hold."""
    if args.check_trainer_args is None:
        return None
    if not args.out or not (Path(args.out) / "export.json").is_file():
        raise InputError("--check-trainer-args: give the export's directory as --out")
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


def olmo_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("olmo")
    g.add_argument(
        "--materialized",
        metavar="DIR",
        help="olmo: the mixture's materialized copy, read in Shardyard's exact order",
    )
    g.add_argument("--work-dir", help="olmo: OLMo-core's dataset and data loader work_dir")


def olmo_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "global_batch_size": args.global_batch_size,
        "materialized": args.materialized,
        "work_dir": args.work_dir,
    }


def nanotron_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("nanotron")
    g.add_argument("--views-dir", help="nanotron: where the pools' datatrove view folders go")
    g.add_argument(
        "--nanotron-tokenizer",
        metavar="NAME_OR_DIR",
        help="nanotron: the Hugging Face tokenizer nanotron loads (hub name or local directory, "
        "same ids as the pools'); default: an hf: pool's own",
    )


def nanotron_options(args: argparse.Namespace) -> dict[str, Any]:
    # Unset options stay out, so that the export's own defaults apply.
    options: dict[str, Any] = {"global_batch_size": args.global_batch_size}
    if args.views_dir:
        options["views_dir"] = args.views_dir
    if args.nanotron_tokenizer:
        options["tokenizer"] = args.nanotron_tokenizer
    return options

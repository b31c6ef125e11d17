"""Checking a Megatron-LM command line against an export (``check_trainer_args``): the
arguments that key the cache (seed, sequence length, split, tokenizer) equal the export's, and
the data arguments name one of its stage files, so that the trainer loads the written indices
instead of building its own."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shardcore.megatron_args import (
    BUILDS,
    CACHE_DIR,
    CORE_BUILDS,
    MEGATRON_DEFAULT_SEED,
    MEGATRON_DEFAULT_SURPLUS,
    SUPPORTED_MEGATRON_CORE,
    TOKENIZER_TYPES,
    UNMODELED_HF_FLAGS,
    TrainerTokenizer,
)

# --------------------------------------------------------------------------- checking


def _flags(argv: Sequence[str]) -> dict[str, str | None]:
    """Megatron-LM style ``--name value`` / ``--flag`` arguments; the last one wins."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            name, eq, val = a.partition("=")
            if eq:
                out[name] = val
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                # --data-path takes many values: keep them all, space-separated.
                vals = []
                while i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                    vals.append(argv[i + 1])
                    i += 1
                out[name] = " ".join(vals)
            else:
                out[name] = None
        i += 1
    return out


def _tokenizer_of_argv(args: Mapping[str, str | None]) -> tuple[TrainerTokenizer | None, list]:
    """The trainer's tokenizer arguments in Megatron-LM arguments ``args`` (``_flags``)."""
    problems = []
    kind = args.get("--tokenizer-type")
    if kind not in TOKENIZER_TYPES:
        return None, [
            f"--tokenizer-type {kind}: the export's cache is keyed for a "
            f"{' or '.join(TOKENIZER_TYPES)}"
            if kind
            else "--tokenizer-type: missing"
        ]

    def integer(flag: str, default: int | None) -> int | None:
        value = args.get(flag)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            problems.append(f"{flag} {value!r} is not a whole number")
            return default

    pad_id = integer("--null-tokenizer-pad-id", -1) if kind == "NullTokenizer" else -1
    tok = TrainerTokenizer(
        str(kind),
        vocab_size=integer("--vocab-size", None) if kind == "NullTokenizer" else None,
        model=args.get("--tokenizer-model") if kind == "HuggingFaceTokenizer" else None,
        eod_id=integer("--null-tokenizer-eod-id", None) if kind == "NullTokenizer" else None,
        pad_id=-1 if pad_id is None else pad_id,
        trust_remote_code="--trust-remote-code" in args,
        hf_use_fast="--tokenizer-hf-use-fast" in args,
        hf_include_special="--tokenizer-hf-include-special-tokens" in args,
        hf_no_use_fast="--tokenizer-hf-no-use-fast" in args,
        hf_no_include_special="--tokenizer-hf-no-include-special-tokens" in args,
    )
    if kind == "HuggingFaceTokenizer":
        problems += [
            f"{flag}: changes the tokenizer's identity in ways the export does not model; the "
            "cache is keyed without it"
            for flag in UNMODELED_HF_FLAGS
            if flag in args
        ]
    return tok, problems


def _check_tokenizer(record: Mapping[str, Any], args: Mapping[str, str | None]) -> list[str]:
    """Why the dataset tokenizer Megatron-LM builds from ``args`` would miss the cache: on
    every supported megatron-core release that takes these arguments, the identity it builds
    must be one the export keyed (``record["identities"]``)."""
    if "identities" not in record:  # written before the cache was keyed per release
        return [
            "the export's cache is keyed for Megatron-LM's legacy tokenizer only and names no "
            "release: export again (shardyard export --format megatron --out DIR) to key it "
            f"for megatron-core {SUPPORTED_MEGATRON_CORE}"
        ]
    want = record["arguments"]["tokenizer"]
    keyed = [json.dumps(i["tokenizer"], sort_keys=True) for i in record["identities"]]
    keyed_builds = {b for i in record["identities"] for b in i["builds"]}
    tok, problems = _tokenizer_of_argv(args)
    if tok is None:
        return problems
    # Name the argument that differs from the export's tokenizer first.
    for flag, got, expected in (
        ("--tokenizer-type", tok.type, want["type"]),
        ("--vocab-size", tok.vocab_size, want["vocab_size"]),
        ("--tokenizer-model", tok.model, want["model"]),
        ("--null-tokenizer-eod-id", tok.eod_id, want["eod_id"]),
        ("--null-tokenizer-pad-id", tok.pad_id, want["pad_id"]),
        ("--trust-remote-code", tok.trust_remote_code, want["trust_remote_code"]),
    ):
        if got != expected:
            note = ""
            if (
                flag == "--tokenizer-model"
                and got
                and expected
                and (os.path.abspath(str(got)) == os.path.abspath(str(expected)))
            ):
                note = " (the key holds the path as written)"
            problems.append(f"{flag} {got} differs from the export's {expected}{note}")
    if problems:
        return problems
    legacy = "--legacy-tokenizer" in args
    if legacy and "legacy-0.16" not in keyed_builds:
        return [
            "--legacy-tokenizer: the export's cache is keyed only for megatron-core's "
            "build_tokenizer (pretrain_gpt's default); run without --legacy-tokenizer, or "
            "export with --megatron-tokenizer-build all or legacy"
        ]
    if not legacy and not keyed_builds & set(CORE_BUILDS):
        return [
            "--legacy-tokenizer: missing; the export's cache is keyed only for Megatron-LM's "
            "legacy tokenizer (megatron-core 0.16.x run with --legacy-tokenizer); without it "
            "pretrain_gpt builds megatron-core's tokenizer, whose identity has no cache entry"
        ]
    builds = ["legacy-0.16"] if legacy else list(CORE_BUILDS)
    taken = [(b, tok.identity(b)) for b in builds if tok.identity(b) is not None]
    if not taken:
        return [f"{tok.cli()}: no supported megatron-core release ({SUPPORTED_MEGATRON_CORE}) "
                "takes these tokenizer arguments"]  # fmt: skip
    for b, ids in taken:
        if json.dumps(ids, sort_keys=True) not in keyed:
            problems.append(
                f"tokenizer ({tok.cli()}{' --legacy-tokenizer' if legacy else ''}): "
                f"{BUILDS[b]} builds the identity {json.dumps(ids)}, which the export's cache "
                "has no entry for"
            )
    return problems


def check_trainer_args(export_dir: str | os.PathLike, argv: str | Sequence[str]) -> list[str]:
    """Why Megatron-LM run with ``argv`` would not read the export in ``export_dir`` in
    Shardyard's order; an empty list when it does (every keyed argument matches a stage)."""

    record = json.loads((Path(export_dir) / "export.json").read_text())
    if not record.get("exact"):
        return ["the export wrote no index cache: " + "; ".join(record.get("problems") or [])]
    want = record["arguments"]
    args = _flags(shlex.split(argv) if isinstance(argv, str) else list(argv))
    problems = []

    def differs(flag: str, got: Any, expected: Any) -> None:
        if got != expected:
            problems.append(f"{flag} {got} differs from the export's {expected}")

    def number(flag: str, default: Any, kind=int) -> Any:
        value = args.get(flag)
        if value is None:
            return default
        try:
            return kind(value)
        except ValueError:
            problems.append(f"{flag} {value!r} is not a number")
            return None

    differs("--seed", number("--seed", MEGATRON_DEFAULT_SEED), want["seed"])
    differs("--seq-length", number("--seq-length", None), want["seq_length"])
    per_split = want["split"] is None
    if per_split:
        if "--split" in args:
            problems.append("--split: the export is per split (no --split)")
    elif "--split" in args or "--data-path" in args:
        # With --data-path, Megatron-LM's default split keeps 3.1% of every prefix for
        # validation and test.
        differs("--split", args.get("--split", "969, 30, 1"), want["split"])
    else:
        problems.append(
            f"--split: missing; with --data-args-path megatron-core refuses a blend without a "
            f"split (give --split {want['split']})"
        )
    differs(
        "--mid-level-dataset-surplus",
        number("--mid-level-dataset-surplus", MEGATRON_DEFAULT_SURPLUS, float),
        want["mid_level_dataset_surplus"],
    )
    problems += _check_tokenizer(record, args)
    cache = str(Path(export_dir).resolve() / CACHE_DIR)
    got_cache = args.get("--data-cache-path")
    differs("--data-cache-path", str(Path(got_cache).resolve()) if got_cache else None, cache)
    if args.get("--dataloader-type") == "cyclic":
        problems.append("--dataloader-type cyclic reads the samples in a random order")
    file_flag = "--per-split-data-args-path" if per_split else "--data-args-path"
    list_flag = "--train-data-path" if per_split else "--data-path"
    wrong = ("--data-args-path", "--data-path") if per_split else (
        "--per-split-data-args-path", "--train-data-path")  # fmt: skip
    for flag in (*wrong, "--mock-data"):
        if flag in args:
            problems.append(f"{flag}: the export's cache is keyed for {file_flag}")

    def train_list(stage_file: str) -> list[str]:
        text = Path(stage_file).read_text()
        return (json.loads(text)["train"] if per_split else text).split()

    stage = None
    file_arg, list_arg = args.get(file_flag), args.get(list_flag)
    if file_arg:
        path = str(Path(file_arg).resolve())
        stage = next((s for s in record["stages"] if s["data_args"] == path), None)
        if stage is None:
            problems.append(f"{file_flag} {path} is none of the export's stage files")
    elif list_arg:
        given = list_arg.split()
        for s in record["stages"]:
            if train_list(s["data_args"]) == given:
                stage = s
        if stage is None:
            problems.append(f"{list_flag} is none of the export's stage lists")
    else:
        problems.append(f"no {file_flag} or {list_flag}")
    if stage is not None:
        samples = number("--train-samples", None)
        if samples is None and args.get("--train-iters") and args.get("--global-batch-size"):
            samples = number("--train-iters", 0) * number("--global-batch-size", 0)
        differs("--train-samples", samples, stage["train_samples"])
    return problems

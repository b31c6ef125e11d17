"""Checking a Megatron-LM command line against an export (``review_trainer_args``): the
arguments that key the cache (seed, sequence length, split, tokenizer) equal the export's, the
data arguments give one of its stage blends (as megatron-core reads a blend: prefixes and
normalized weights), and pretrain_gpt builds megatron-core's GPTDataset, so that the trainer
loads the written indices instead of building its own. Arguments that keep the order but
that some supported release refuses at start-up are notes, with the release."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardcore.export.megatron.args import (
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

# Arguments with which pretrain_gpt.py builds another dataset class than megatron-core's
# GPTDataset (Megatron-LM 0.16-0.19, ``pretrain_gpt.train_valid_test_datasets_provider``).
OTHER_DATASETS = {
    "--sft": (
        "pretrain_gpt.py then builds Megatron-LM's SFTDataset, which opens each data prefix "
        "as a JSONL file of chat conversations (HuggingFace datasets) and packs them itself: "
        "it reads neither the export's token shards nor its index cache"
    ),
    "--fim-data": (
        "pretrain_gpt.py then builds Megatron-LM's GPTFIMDataset, whose indices megatron-core "
        "keys by that class's name (the export's cache has no entry for it: it builds and "
        "shuffles its own) and which rearranges the tokens of a share (--fim-rate) of the "
        "samples into fill-in-the-middle order: the samples are not the mixture's"
    ),
}
# The last Megatron-LM release with --legacy-tokenizer; 0.17 removed it, and its argument
# parser stops at start-up on an argument it does not know.
LEGACY_TOKENIZER_LAST = "0.16.x"


@dataclass
class TrainerArgsReview:
    """What ``review_trainer_args`` found: ``problems`` break the order (none: exact);
    ``notes`` keep it but stop the trainer at start-up on some supported release."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _blend(values: Sequence[str]) -> tuple[list[str], list[float] | None]:
    """A data list as megatron-core reads it (``get_blend_from_list``, then the builder's
    ``normalize``): (prefixes, weights each divided by their float64 sum), or (the list,
    None) when it holds no weights. Two lists with equal blends key the same cache."""
    values = list(values)
    if len(values) % 2 == 0 and values:
        try:
            weights = [float(w) for w in values[0::2]]
        except ValueError:
            return values, None
        w = np.array(weights, dtype=np.float64)
        return values[1::2], (w / np.sum(w)).tolist()
    return values, None


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
        return [
            f"{tok.cli()}: no supported megatron-core release ({SUPPORTED_MEGATRON_CORE}) "
            "takes these tokenizer arguments"
        ]
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
    Shardyard's order; an empty list when it does (``review_trainer_args``'s problems)."""
    return review_trainer_args(export_dir, argv).problems


def review_trainer_args(
    export_dir: str | os.PathLike, argv: str | Sequence[str]
) -> TrainerArgsReview:
    """Why Megatron-LM run with ``argv`` would not read the export in ``export_dir`` in
    Shardyard's order (no problems when every keyed argument matches a stage), and which of
    its arguments some supported release refuses at start-up."""

    record = json.loads((Path(export_dir) / "export.json").read_text())
    if not record.get("exact"):
        return TrainerArgsReview(
            ["the export wrote no index cache: " + "; ".join(record.get("problems") or [])]
        )
    review = _Review(record, _flags(shlex.split(argv) if isinstance(argv, str) else list(argv)))
    review.check_numbers_and_split()
    review.problems += _check_tokenizer(record, review.args)
    review.check_data_flags(export_dir)
    review.note_legacy_tokenizer()
    stage = review.given_stage()
    if stage is not None:
        args, number = review.args, review.number
        samples = number("--train-samples", None)
        if samples is None and args.get("--train-iters") and args.get("--global-batch-size"):
            samples = number("--train-iters", 0) * number("--global-batch-size", 0)
        review.differs("--train-samples", samples, stage["train_samples"])
    return TrainerArgsReview(review.problems, review.notes)


class _Review:
    """The review of one trainer command line against one export, step by step: each step
    adds its problems and notes, in the order the review reports them."""

    def __init__(self, record: Mapping[str, Any], args: Mapping[str, str | None]):
        self.record, self.args = record, args
        self.want = record["arguments"]
        self.per_split = self.want["split"] is None
        self.file_flag = "--per-split-data-args-path" if self.per_split else "--data-args-path"
        self.list_flag = "--train-data-path" if self.per_split else "--data-path"
        self.problems: list[str] = []
        self.notes: list[str] = []

    def differs(self, flag: str, got: Any, expected: Any) -> None:
        if got != expected:
            self.problems.append(f"{flag} {got} differs from the export's {expected}")

    def number(self, flag: str, default: Any, kind: type[int] | type[float] = int) -> Any:
        value = self.args.get(flag)
        if value is None:
            return default
        try:
            return kind(value)
        except ValueError:
            self.problems.append(f"{flag} {value!r} is not a number")
            return None

    def check_numbers_and_split(self) -> None:
        """The seed, the sequence length, the split and the surplus the cache is keyed by."""
        args, want, differs, number = self.args, self.want, self.differs, self.number
        differs("--seed", number("--seed", MEGATRON_DEFAULT_SEED), want["seed"])
        differs("--seq-length", number("--seq-length", None), want["seq_length"])
        if self.per_split:
            if "--split" in args:
                self.problems.append("--split: the export is per split (no --split)")
        elif "--split" in args or "--data-path" in args:
            # With --data-path, Megatron-LM's default split keeps 3.1% of every prefix for
            # validation and test.
            differs("--split", args.get("--split", "969, 30, 1"), want["split"])
        else:
            self.problems.append(
                f"--split: missing; with --data-args-path megatron-core refuses a blend without "
                f"a split (give --split {want['split']})"
            )
        differs(
            "--mid-level-dataset-surplus",
            number("--mid-level-dataset-surplus", MEGATRON_DEFAULT_SURPLUS, float),
            want["mid_level_dataset_surplus"],
        )

    def check_data_flags(self, export_dir: str | os.PathLike) -> None:
        """The cache's path, the dataloader, and the data arguments that read another blend
        or another dataset than the export's."""
        args, problems, per_split = self.args, self.problems, self.per_split
        cache = str(Path(export_dir).resolve() / CACHE_DIR)
        got_cache = args.get("--data-cache-path")
        self.differs(
            "--data-cache-path", str(Path(got_cache).resolve()) if got_cache else None, cache
        )
        if args.get("--dataloader-type") == "cyclic":
            problems.append("--dataloader-type cyclic reads the samples in a random order")
        wrong = (
            ("--data-args-path", "--data-path")
            if per_split
            else ("--per-split-data-args-path", "--train-data-path")
        )
        for flag in (*wrong, "--mock-data"):
            if flag in args:
                problems.append(f"{flag}: the export's cache is keyed for {self.file_flag}")

        for flag, why in OTHER_DATASETS.items():
            if flag in args:
                problems.append(f"{flag}: {why}")
        if "--dataloader-fast-cache-load" in args:
            if per_split:
                self.notes.append(
                    "--dataloader-fast-cache-load: megatron-core then builds no index and loads "
                    "every split's from --data-cache-path; the export wrote the training "
                    "split's, not the validation split's (the pools' val/ slices, which "
                    "megatron-core indexes on a run without this argument), so the first run "
                    "with it stops at start-up (FileNotFoundError: "
                    "...-valid-document_index.npy); run once without it (the training order is "
                    "the same), then with it"
                )
            else:
                problems.append(
                    "--dataloader-fast-cache-load: megatron-core 0.16-0.19 refuse it with a "
                    "--data-path or --data-args-path blend at start-up (AssertionError: "
                    '"--dataloader-fast-cache-load and --data-path cannot be used together"); '
                    "run without it, or export with --per-split and give "
                    "--per-split-data-args-path"
                )

    def note_legacy_tokenizer(self) -> None:
        if "--legacy-tokenizer" not in self.args:
            return
        builds = {b for i in self.record.get("identities", []) for b in i["builds"]}
        self.notes.append(
            f"--legacy-tokenizer: only Megatron-LM {LEGACY_TOKENIZER_LAST} has it; 0.17 and "
            "later stop at start-up (pretrain_gpt.py: error: unrecognized arguments: "
            "--legacy-tokenizer)"
            + (
                "; there, run without it (the cache is keyed for megatron-core's tokenizer too)"
                if builds & set(CORE_BUILDS)
                else "; for those, export with --megatron-tokenizer-build default and run "
                "without it"
            )
        )

    def train_list(self, text: str) -> list[str]:
        return (json.loads(text)["train"] if self.per_split else text).split()

    def blend_of(self, stage: Mapping[str, Any]) -> tuple[list[str], list[float] | None]:
        return _blend(self.train_list(Path(stage["data_args"]).read_text()))

    def given_stage(self) -> Mapping[str, Any] | None:
        """The export's stage the command line's blend reads (by its file or its list);
        else None, with the reason in ``problems``."""
        file_flag, list_flag = self.file_flag, self.list_flag
        file_arg, list_arg = self.args.get(file_flag), self.args.get(list_flag)
        if file_arg:
            path = Path(file_arg).resolve()
            stage = next((s for s in self.record["stages"] if s["data_args"] == str(path)), None)
            if stage is not None:
                return stage
            try:
                given = self.train_list(path.read_text())
            except (OSError, ValueError, KeyError, AttributeError) as exc:
                self.problems.append(
                    f"{file_flag} {path} is none of the export's stage files, and its list "
                    f"cannot be read ({type(exc).__name__}: {exc})"
                )
                return None
            return self.matching(given, f"{file_flag} {path}")
        if list_arg:
            return self.matching(list_arg.split(), list_flag)
        self.problems.append(f"no {file_flag} or {list_flag}")
        return None

    def matching(self, given: list[str], what: str) -> Mapping[str, Any] | None:
        """The stage whose blend ``given`` is (megatron-core reads prefixes and normalized
        weights, so any list in the same proportions that normalizes to the same numbers
        is that stage); else None, with the reason in ``problems``."""
        blend = _blend(given)
        for s in self.record["stages"]:
            if self.blend_of(s) == blend:
                return s
        for s in self.record["stages"]:
            prefixes, weights = self.blend_of(s)
            if blend[0] == prefixes and weights and blend[1] and np.allclose(weights, blend[1]):
                i = next(
                    i for i, (a, b) in enumerate(zip(weights, blend[1], strict=True)) if a != b
                )
                self.problems.append(
                    f"{what}: its weights are in the proportions of stage {s['stage']}'s, but "
                    "megatron-core's normalization (each weight over their float64 sum) "
                    f"rounds them to other numbers ({prefixes[i]}: {blend[1][i]!r} where the "
                    f"stage has {weights[i]!r}), which is another blend key: megatron-core "
                    f"would build its own blend. Give the weights of {s['data_args']}"
                )
                return None
        self.problems.append(f"{what} is none of the export's stage lists")
        return None

"""The Megatron-LM arguments the export's cache keys depend on: the supported megatron-core
releases, Megatron-LM's defaults for the keyed arguments, and the trainer's tokenizer, whose
identity (``unique_identifiers``) each release builds differently (``BUILDS``). The index
cache and how it is keyed: ``shardcore.export.megatron``."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardcore.errors import InputError

# megatron-core versions whose tokenizer builds the export keys the cache for (``BUILDS``),
# and the releases the tests and bench/megatron/newest.py ran the printed command against.
SUPPORTED_MEGATRON_CORE = "0.16.x-0.19.x"
TESTED_MEGATRON_CORE = ("0.16.0", "0.17.1", "0.18.2", "0.19.2")
# The tested releases of each tokenizer build (a ``BUILDS`` key).
TESTED_BY_BUILD = {
    "legacy-0.16": ("0.16.0",),
    "core-0.16": ("0.16.0",),
    "core-0.17": ("0.17.1",),
    "core-0.18": ("0.18.2", "0.19.2"),
}
# Megatron-LM's defaults for the arguments that key the cache.
MEGATRON_DEFAULT_SEED = 1234
MEGATRON_DEFAULT_SURPLUS = 0.005
# Pools keep their validation slice apart, so the whole of every prefix is training data.
DEFAULT_SPLIT = "100,0,0"
# The directory of the export that Megatron-LM gets as --data-cache-path.
CACHE_DIR = "cache"

# --------------------------------------------------------------------------- tokenizer

# How Megatron-LM's pretrain_gpt.py builds the dataset's tokenizer, whose identity
# (``unique_identifiers``) is part of every cache key. From 0.16 it calls megatron-core's
# ``build_tokenizer`` unless ``--legacy-tokenizer`` is given (0.16 only: 0.17 removed the
# flag); the identity that builds differs between releases.
BUILDS: dict[str, str] = {
    "legacy-0.16": "megatron-core 0.16.x with --legacy-tokenizer (Megatron-LM's legacy tokenizers)",
    "core-0.16": "megatron-core 0.16.x (megatron.core.tokenizers.text.utils.build_tokenizer)",
    "core-0.17": "megatron-core 0.17.x (megatron.core.tokenizers.utils.build_tokenizer)",
    "core-0.18": "megatron-core 0.18.x-0.19.x (NullTokenizer identity with eod_id, pad_id)",
}
CORE_BUILDS = ("core-0.16", "core-0.17", "core-0.18")
BUILD_CHOICES = {"all": tuple(BUILDS), "default": CORE_BUILDS, "legacy": ("legacy-0.16",)}
DEFAULT_TEXT = "megatron.core.tokenizers.text.models.default_tokenizer.DefaultTokenizerText"
TOKENIZER_TYPES = ("NullTokenizer", "HuggingFaceTokenizer")
# Megatron-LM arguments that change a HuggingFace tokenizer's identity and that the export
# does not model (a NullTokenizer ignores them).
UNMODELED_HF_FLAGS = (
    "--tokenizer-special-tokens",
    "--vocab-file",
    "--merge-file",
    "--tokenizer-metadata",
    "--chat-template",
)


@dataclass(frozen=True)
class TrainerTokenizer:
    """The trainer's tokenizer as Megatron-LM arguments (only those that enter the dataset
    tokenizer's identity), and the identity each megatron-core build gives it."""

    type: str  # --tokenizer-type: NullTokenizer or HuggingFaceTokenizer
    vocab_size: int | None = None  # --vocab-size (NullTokenizer)
    model: str | None = None  # --tokenizer-model (HuggingFaceTokenizer), as written
    eod_id: int | None = None  # --null-tokenizer-eod-id (0.18+)
    pad_id: int = -1  # --null-tokenizer-pad-id (0.18+; -1 is its default)
    trust_remote_code: bool = False  # --trust-remote-code
    hf_use_fast: bool = False  # --tokenizer-hf-use-fast (0.16, 0.17: deprecated, no effect)
    hf_include_special: bool = False  # --tokenizer-hf-include-special-tokens (idem)
    hf_no_use_fast: bool = False  # --tokenizer-hf-no-use-fast (0.17+)
    hf_no_include_special: bool = False  # --tokenizer-hf-no-include-special-tokens (0.17+)

    def cli(self) -> str:
        """The Megatron-LM arguments that build this tokenizer."""
        if self.type == "NullTokenizer":
            parts = [f"--tokenizer-type NullTokenizer --vocab-size {self.vocab_size}"]
            if self.eod_id is not None:
                parts.append(f"--null-tokenizer-eod-id {self.eod_id}")
            if self.pad_id != -1:
                parts.append(f"--null-tokenizer-pad-id {self.pad_id}")
            return " ".join(parts)
        parts = [f"--tokenizer-type HuggingFaceTokenizer --tokenizer-model {self.model}"]
        for flag, on in (
            ("--trust-remote-code", self.trust_remote_code),
            ("--tokenizer-hf-use-fast", self.hf_use_fast),
            ("--tokenizer-hf-include-special-tokens", self.hf_include_special),
            ("--tokenizer-hf-no-use-fast", self.hf_no_use_fast),
            ("--tokenizer-hf-no-include-special-tokens", self.hf_no_include_special),
        ):
            if on:
                parts.append(flag)
        return " ".join(parts)

    def identity(self, build: str) -> dict[str, Any] | None:
        """The ``unique_identifiers`` of the tokenizer megatron-core ``build`` (a ``BUILDS``
        key) makes from these arguments; None when that release does not take them (an
        argument it does not have)."""
        new_null = self.eod_id is not None or self.pad_id != -1  # 0.18+ arguments
        old_hf = self.hf_use_fast or self.hf_include_special  # removed in 0.18
        new_hf = self.hf_no_use_fast or self.hf_no_include_special  # added in 0.17
        if self.type == "NullTokenizer":
            vocab = str(self.vocab_size)
            if build == "core-0.18":
                ids: dict[str, Any] = {
                    "class": DEFAULT_TEXT,
                    "tokenizer_path": None,
                    "vocab_size": vocab,
                }
                if self.eod_id is not None:
                    ids["eod_id"] = str(self.eod_id)
                ids["pad_id"] = str(self.pad_id)
                return ids
            if new_null:
                return None
            if build == "legacy-0.16":
                return _legacy_identity("_NullTokenizer", [None], {"vocab_size": self.vocab_size})
            return {"class": DEFAULT_TEXT, "tokenizer_path": None, "vocab_size": vocab}
        if new_null:
            return None
        if build == "legacy-0.16":
            return None if new_hf else _legacy_identity("_HuggingFaceTokenizer", [self.model], {})
        ids = {"class": DEFAULT_TEXT, "tokenizer_path": self.model}
        if build == "core-0.18":
            if old_hf:
                return None
            ids["chat_template"] = "None"
        if build == "core-0.16":
            if new_hf:
                return None
            use_fast, include = self.hf_use_fast, self.hf_include_special
        else:
            use_fast, include = not self.hf_no_use_fast, not self.hf_no_include_special
        ids.update(
            {
                "vocab_file": "None",
                "merges_file": "None",
                "additional_special_tokens": "[]",
                "use_fast": str(use_fast),
                "trust_remote_code": str(self.trust_remote_code),
                "include_special_tokens": str(include),
            }
        )
        return ids


@dataclass(frozen=True)
class MegatronArgs:
    """The trainer arguments one cache key set is computed for, with Megatron-LM's
    defaults; ``tokenizer`` is the dataset tokenizer's megatron ``unique_identifiers``."""

    seed: int = MEGATRON_DEFAULT_SEED
    seq_length: int | None = None  # None: the mixture's seq_len
    split: str | None = DEFAULT_SPLIT  # None: per-split blends (--per-split-data-args-path)
    tokenizer: dict[str, Any] = field(default_factory=dict)  # megatron unique_identifiers
    tokenizer_args: str = ""  # the Megatron-LM arguments that build that tokenizer
    mid_level_dataset_surplus: float = MEGATRON_DEFAULT_SURPLUS

    def cli(self, seq_len: int) -> str:
        parts = [f"--seq-length {self.seq_length or seq_len}", f"--seed {self.seed}"]
        if self.split is not None:
            parts.append(f"--split {self.split}")
        if self.mid_level_dataset_surplus != MEGATRON_DEFAULT_SURPLUS:
            parts.append(f"--mid-level-dataset-surplus {self.mid_level_dataset_surplus!r}")
        if self.tokenizer_args:
            parts.append(self.tokenizer_args)
        return " ".join(parts)


def _legacy_identity(cls_name: str, paths: Sequence[Any], options: Mapping[str, Any]) -> dict:
    """The ``unique_identifiers`` of a Megatron-LM (legacy) tokenizer class ``cls_name``
    built as ``cls(*paths, **options)``: by megatron-core's ``MegatronLegacyTokenizer`` when
    installed, else as it does (class name, path list, options as strings)."""
    try:
        from megatron.core.datasets.megatron_tokenizer import MegatronLegacyTokenizer
    except Exception:  # not installed, or a release without it: megatron-core 0.16's rule
        ids: dict[str, Any] = {"class": cls_name, "tokenizer_path": list(paths)}
        ids.update({k: str(v) for k, v in options.items()})
        return ids
    stub = property(lambda self: None)
    cls = type(
        cls_name,
        (MegatronLegacyTokenizer,),
        {"tokenize": lambda self, text: [], "vocab": stub, "inv_vocab": stub, "vocab_size": stub},
    )
    log = logging.getLogger("megatron.core.datasets.megatron_tokenizer")
    level = log.level
    log.setLevel(logging.ERROR)  # its deprecation warning is about Megatron-LM, not us
    try:
        return dict(cls(*paths, **options).unique_identifiers)
    finally:
        log.setLevel(level)


def _from_identity(ids: Mapping[str, Any]) -> tuple[TrainerTokenizer, str]:
    """(the arguments, the build) that make megatron ``unique_identifiers`` ``ids``."""
    cls = ids.get("class")
    path = ids.get("tokenizer_path")
    if cls in ("_NullTokenizer", "_HuggingFaceTokenizer"):
        path = path[0] if isinstance(path, list) and len(path) == 1 else None
    candidates: list[TrainerTokenizer] = []
    if cls in ("_NullTokenizer", DEFAULT_TEXT) and path is None and "vocab_size" in ids:
        try:
            vocab = int(ids["vocab_size"])
            eod = None if ids.get("eod_id") is None else int(ids["eod_id"])
            pad = int(ids.get("pad_id", -1))
        except (TypeError, ValueError):
            vocab = None
        if vocab is not None:
            candidates.append(TrainerTokenizer("NullTokenizer", vocab, eod_id=eod, pad_id=pad))
    elif cls in ("_HuggingFaceTokenizer", DEFAULT_TEXT) and isinstance(path, str):
        for bits in range(32):  # every combination of the HF flags, fewest first
            flags = [bool(bits >> k & 1) for k in range(5)]
            candidates.append(
                TrainerTokenizer(
                    "HuggingFaceTokenizer",
                    model=path,
                    trust_remote_code=flags[0],
                    hf_use_fast=flags[1],
                    hf_include_special=flags[2],
                    hf_no_use_fast=flags[3],
                    hf_no_include_special=flags[4],
                )
            )
        candidates.sort(key=lambda t: t.cli().count("--"))
    want = json.dumps(dict(ids), sort_keys=True)
    for tok in candidates:
        for build in BUILDS:
            got = tok.identity(build)
            if got is not None and json.dumps(got, sort_keys=True) == want:
                return tok, build
    raise InputError(
        f"--megatron-tokenizer: the identity {json.dumps(dict(ids))} is none that Megatron-LM "
        f"builds from a NullTokenizer or HuggingFaceTokenizer on megatron-core "
        f"{SUPPORTED_MEGATRON_CORE}, so no command line would read the cache; give "
        "NullTokenizer:VOCAB or HuggingFaceTokenizer:PATH"
    )


def trainer_tokenizer(
    spec: str | Mapping[str, Any] | None, mixture_tokenizer: Mapping[str, Any] | None
) -> tuple[TrainerTokenizer, str | None]:
    """(the trainer's tokenizer arguments, the build a JSON identity names or None).

    ``spec``: ``NullTokenizer:VOCAB`` (``--tokenizer-type NullTokenizer --vocab-size VOCAB``),
    ``HuggingFaceTokenizer:PATH`` (``--tokenizer-model PATH``), or a JSON object: the
    tokenizer's ``unique_identifiers`` as megatron-core serializes them, which must be one
    that some supported release builds from Megatron-LM arguments (those arguments are then
    printed). Default: the mixture's tokenizer, ``hf:PATH`` as HuggingFaceTokenizer PATH,
    anything else as NullTokenizer of its vocabulary size (samples are pre-tokenized; only
    the EOD id, used by ``--eod-mask-loss`` and the reset options, depends on the tokenizer).
    """
    if isinstance(spec, Mapping):
        return _from_identity(spec)
    if spec is None:
        tok = dict(mixture_tokenizer or {})
        name = str(tok.get("spec") or "")
        if name.startswith("hf:"):
            spec = f"HuggingFaceTokenizer:{name[3:]}"
        elif tok.get("vocab_size"):
            spec = f"NullTokenizer:{int(tok['vocab_size'])}"
        else:
            raise InputError(
                "tokenizer: the mixture names no vocabulary size; give the trainer's tokenizer "
                "(NullTokenizer:VOCAB, HuggingFaceTokenizer:PATH or its unique_identifiers JSON)"
            )
    spec = str(spec).strip()
    if spec.startswith("{"):
        try:
            ids = json.loads(spec, object_pairs_hook=OrderedDict)
        except json.JSONDecodeError as exc:
            raise InputError(f"--megatron-tokenizer: not a JSON object: {exc}") from None
        if not isinstance(ids, Mapping) or "class" not in ids:
            raise InputError("--megatron-tokenizer: the JSON identity needs a 'class' field")
        return _from_identity(ids)
    kind, _, arg = spec.partition(":")
    if kind == "NullTokenizer":
        try:
            vocab = int(arg)
        except ValueError:
            raise InputError(
                f"--megatron-tokenizer: NullTokenizer needs a vocabulary size, got {arg!r}"
            ) from None
        return TrainerTokenizer("NullTokenizer", vocab), None
    if kind == "HuggingFaceTokenizer":
        if not arg or any(c.isspace() for c in arg):
            raise InputError(
                f"--megatron-tokenizer: HuggingFaceTokenizer needs a path or name without "
                f"spaces, got {arg!r}"
            )
        return TrainerTokenizer("HuggingFaceTokenizer", model=arg), None
    raise InputError(
        f"--megatron-tokenizer: unknown {spec!r}; give NullTokenizer:VOCAB, "
        "HuggingFaceTokenizer:PATH or the tokenizer's unique_identifiers as a JSON object"
    )


def tokenizer_identity(
    spec: str | Mapping[str, Any] | None,
    mixture_tokenizer: Mapping[str, Any] | None,
    build: str = "legacy-0.16",
) -> tuple[dict[str, Any], str]:
    """(megatron ``unique_identifiers``, Megatron-LM arguments) of the trainer's tokenizer
    as ``build`` makes it (a JSON ``spec``: its own identity and build)."""
    tok, named = trainer_tokenizer(spec, mixture_tokenizer)
    ids = tok.identity(named or build)
    if ids is None:
        raise InputError(f"--megatron-tokenizer: {BUILDS[build]} does not take {tok.cli()}")
    return ids, tok.cli() + (" --legacy-tokenizer" if (named or build) == "legacy-0.16" else "")


def tokenizer_builds(
    tok: TrainerTokenizer, choice: str = "all", named: str | None = None
) -> list[tuple[dict[str, Any], list[str]]]:
    """The distinct identities (with the builds that make each) to key the cache for:
    every build of ``BUILD_CHOICES[choice]`` that takes ``tok``'s arguments, and ``named``
    (the build of a JSON identity) in any case."""
    if choice not in BUILD_CHOICES:
        raise InputError(
            f"--megatron-tokenizer-build: {choice!r} is not one of {sorted(BUILD_CHOICES)}"
        )
    builds = [b for b in BUILDS if b in BUILD_CHOICES[choice] or b == named]
    out: list[tuple[dict[str, Any], list[str]]] = []
    for b in builds:
        ids = tok.identity(b)
        if ids is None:
            continue
        for known, names in out:
            if known == ids:
                names.append(b)
                break
        else:
            out.append((ids, [b]))
    if not out:
        raise InputError(
            f"--megatron-tokenizer-build {choice}: no such megatron-core release takes "
            f"{tok.cli()} ({', '.join(BUILDS[b] for b in BUILD_CHOICES[choice])})"
        )
    return out

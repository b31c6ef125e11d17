"""megatron-core's dataset index cache, written for a mixture, so that Megatron-LM trains on
Shardyard's samples in Shardyard's order.

Megatron blends datasets itself: per ``--data-path`` prefix a ``GPTDataset`` re-shuffles the
prefix's sequences, cuts ``--seq-length`` + 1 token windows and shuffles them (document,
sample and shuffle indices), and a ``BlendedDataset`` picks the prefix of every sample (dataset
index, dataset-sample index). Each index is loaded from ``--data-cache-path`` instead of being
built when files named by the MD5 of a JSON "description" exist there. The description holds
the trainer's arguments (seed, sequence length, split, tokenizer identity), the prefix, the
sample count megatron-core asks of it and, for the blend, the normalized weights and size. So
an export that knows those arguments can write the indices under the names Megatron looks
for, with our order in them:

- per prefix (a pool shard, or a shard of a materialized mixture), the shard's records in the
  order the mixture reads them (``L``, repeats included): document index ``L`` (int32),
  sample index two rows per entry k, ``(k, 0)`` then ``(k, seq_len)``, so that the sample
  starting at row 2k is exactly record ``L[k]`` (seq_len + 1 tokens, one sequence of the
  shard), and a shuffle index of the even rows ``0, 2, 4, ...``: sample j is ``L[j]``;
- the blend: sample i goes to the prefix holding mixture sample i, at that prefix's running
  count. Megatron's blend is ``sum(ceil(train_samples * w))`` long (>= train_samples): the rows
  past ``train_samples``, which training never reads, repeat the first ones.

The per-sample work runs in chunks of samples (``shardcore.megatron_stream``): the stage
lists are counted in one pass over the schedule, the index files written by ranges, in
memory bounded by a chunk and the number of prefixes. A stage listing more prefixes than
megatron-core's int16 blend index holds is refused before anything is written, with the
shard size that fits (``check_prefixes``).

Multi-stage mixtures get one data-args file per stage. Stage k's file lists every shard read
by samples ``[0, end_k)`` and is run with ``--train-samples end_k``, so its cache covers every
sample up to the end of the stage (a run resumed from the previous stage's checkpoint, at any
consumed-sample count, reads exactly the mixture). Its weights are the stage's sample counts
per shard (a shard the stage does not read gets a negligible 1e-6): without the cache,
Megatron would at least blend the stage's shares.

Validation: pools keep a validation slice apart, so the default is ``--split 100,0,0``
(every shard all training). ``per_split`` exports ``--per-split-data-args-path`` files
instead (train: the stage's list; valid: the pools' ``val/`` shards, which Megatron indexes
itself); then the keys hold no split (``blend_per_split``), and a stage of one prefix is
that prefix's GPTDataset alone, without a BlendedDataset.

The keys come from megatron-core's own code when it is installed (its ``GPTDatasetConfig``,
``GPTDataset`` / ``BlendedDataset`` description code, ``normalize`` and sizing), else from a
replica of megatron-core 0.16's, which a test holds equal to the real one (the
descriptions are the same through 0.19 but for the tokenizer identity).

The tokenizer identity in every key depends on the megatron-core release and on
``--legacy-tokenizer`` (``BUILDS``), so the cache is keyed for each identity the supported
releases build from the printed tokenizer arguments, the index arrays written once and
hard-linked under the other keys. Checked, every sample equal and no index built, with
``TESTED_MEGATRON_CORE``: 0.16.0 in the tests (with and without --legacy-tokenizer),
0.17.1, 0.18.2 and 0.19.2 by bench/megatron/newest.py (Python 3.12).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shlex
import shutil
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from shardcore import atomic, megatron_stream
from shardcore import manifest as mf
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
# Weight of a shard a stage does not read (its earlier samples still need the prefix).
ABSENT_WEIGHT = 1e-6
MAX_PREFIXES = 32766  # BlendedDataset: len(datasets) < 32767 (int16 dataset index)
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
    "--tokenizer-special-tokens", "--vocab-file", "--merge-file", "--tokenizer-metadata",
    "--chat-template",
)  # fmt: skip


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
                    "class": DEFAULT_TEXT, "tokenizer_path": None, "vocab_size": vocab
                }  # fmt: skip
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


# --------------------------------------------------------------------------- keys


@dataclass
class CacheKeys:
    """Descriptions and hashes megatron-core computes for one blend."""

    gpt: list[tuple[str, str]]  # per prefix: (description, md5)
    blended: tuple[str, str] | None  # None: one prefix of a per-split blend, no BlendedDataset
    num_samples: list[int]  # per prefix: samples megatron-core asks of its GPTDataset
    size: int  # samples of the BlendedDataset
    via: str  # "megatron-core X" or "replica of megatron-core 0.16"


def _supported(version: str) -> bool:
    """Whether megatron-core ``version`` is one whose tokenizer builds ``BUILDS`` knows."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return m is not None and (0, 16) <= (int(m[1]), int(m[2])) <= (0, 19)


def megatron_core_version() -> str | None:
    try:
        return metadata.version("megatron-core")
    except Exception:
        return None


class _Identity:
    """Stands for the trainer's tokenizer where megatron-core only reads its identity."""

    vocab_size = None  # GPTDatasetConfig: no token dtype code (not part of any key)

    def __init__(self, ids: Mapping[str, Any]):
        self.unique_identifiers = OrderedDict(ids)


def _check_split(matrix: Sequence[Any], split: str) -> None:
    train = matrix[0]
    if train is None or float(train[0]) != 0.0 or float(train[1]) != 1.0 or any(matrix[1:]):
        raise InputError(
            f"split: {split!r} keeps part of every prefix for validation or test; pools hold "
            f"their validation slice apart, so the order is exact only with --split "
            f"{DEFAULT_SPLIT} (all of each prefix for training)"
        )


def _keys_core(prefixes, weights, train_samples, args, seq_length) -> CacheKeys:
    from megatron.core.datasets.blended_dataset import BlendedDataset
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        _get_size_per_split_per_dataset,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.utils import Split, normalize

    blend = (list(prefixes), [float(w) for w in weights])
    config = GPTDatasetConfig(
        random_seed=int(args.seed),
        sequence_length=int(seq_length),
        blend=blend if args.split is not None else None,
        blend_per_split=None if args.split is not None else [blend, None, None],
        split=args.split,
        tokenizer=_Identity(args.tokenizer),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        mid_level_dataset_surplus=float(args.mid_level_dataset_surplus),
    )
    if args.split is not None:
        _check_split(config.split_matrix, args.split)
    # As BlendedMegatronDatasetBuilder: weights normalized once, sizes per prefix from them.
    w1 = normalize(blend[1])
    sizes = [int(train_samples), 0, 0]
    if args.split is None and len(prefixes) == 1:
        # A per-split blend of one prefix is that prefix's GPTDataset alone, of train_samples.
        ds = type(
            "GPTDataset",
            (GPTDataset,),
            {"_build_document_sample_shuffle_indices": lambda self: (None, None, None)},
        )(None, prefixes[0], None, int(train_samples), Split.train, config)
        return CacheKeys(
            [(ds.unique_description, ds.unique_description_hash)],
            None,
            [int(train_samples)],
            int(train_samples),
            f"megatron-core {megatron_core_version()}",
        )
    target = _get_size_per_split_per_dataset(w1, sizes)
    buffer = _get_size_per_split_per_dataset(w1, sizes, surplus=config.mid_level_dataset_surplus)
    # megatron-core's own classes compute the descriptions; only index building is skipped.
    key_gpt = type(
        "GPTDataset",
        (GPTDataset,),
        {"_build_document_sample_shuffle_indices": lambda self: (None, None, None)},
    )
    key_blend = type(
        "BlendedDataset", (BlendedDataset,), {"_build_indices": lambda self: (None, None)}
    )
    datasets = [
        key_gpt(None, p, None, buffer[d][0], Split.train, config) for d, p in enumerate(prefixes)
    ]
    size = int(sum(t[0] for t in target))
    log = logging.getLogger("megatron.core.datasets.blended_dataset")
    level = log.level
    log.setLevel(logging.ERROR)  # "BlendedDataset for a single MegatronDataset": expected
    try:
        blended = key_blend(datasets, w1, size, config)
    finally:
        log.setLevel(level)
    return CacheKeys(
        gpt=[(ds.unique_description, ds.unique_description_hash) for ds in datasets],
        blended=(blended.unique_description, blended.unique_description_hash),
        num_samples=[int(b[0]) for b in buffer],
        size=size,
        via=f"megatron-core {megatron_core_version()}",
    )


def _normalize(weights: Sequence[float]) -> list[float]:
    w = np.array(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def _split_matrix(split: str) -> list[Any]:
    vec = [float(x) for x in re.findall(r"[.0-9]+", split)]
    vec = vec + [0.0] * (3 - len(vec))
    if len(vec) != 3 or any(v < 0 for v in vec) or sum(vec) <= 0:
        raise InputError(f"split: {split!r} is not three non-negative numbers")
    vec = _normalize(vec)
    ends: list[Any] = [0]
    for v in vec:
        ends.append(ends[-1] + v)
    matrix: list[Any] = []
    for a, b in zip(ends[:-1], ends[1:], strict=True):
        matrix.append(None if b <= a else (a, b))
    return matrix


def _md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def _keys_replica(prefixes, weights, train_samples, args, seq_length) -> CacheKeys:
    matrix = None
    if args.split is not None:
        matrix = _split_matrix(args.split)
        _check_split(matrix, args.split)
    w1 = _normalize(weights)
    surplus = float(args.mid_level_dataset_surplus)
    target = [int(math.ceil(train_samples * w)) for w in w1]
    buffer = [int(math.ceil(math.ceil(train_samples * w) * (1 + surplus))) for w in w1]
    single = args.split is None and len(prefixes) == 1
    if single:
        buffer = [int(train_samples)]
    idents = []
    for p, n in zip(prefixes, buffer, strict=True):
        ids: OrderedDict[str, Any] = OrderedDict()
        ids["class"] = "GPTDataset"
        ids["dataset_path"] = p
        ids["num_samples"] = n
        ids["index_split"] = "train"
        ids["random_seed"] = int(args.seed)
        ids["sequence_length"] = int(seq_length)
        ids["split"] = args.split
        ids["split_matrix"] = matrix
        ids["tokenizer"] = OrderedDict(args.tokenizer)
        idents.append(ids)
    gpt = []
    for ids in idents:
        text = json.dumps(ids, indent=4)
        gpt.append((text, _md5(text)))
    if single:
        return CacheKeys(gpt, None, buffer, int(train_samples), "replica of megatron-core 0.16")
    size = int(sum(target))
    blend: OrderedDict[str, Any] = OrderedDict()
    blend["class"] = "BlendedDataset"
    blend["datasets"] = idents
    blend["split"] = "train"
    blend["weights"] = _normalize(w1)  # BlendedDataset normalizes the builder's weights again
    blend["size"] = size
    text = json.dumps(blend, indent=4)
    return CacheKeys(gpt, (text, _md5(text)), buffer, size, "replica of megatron-core 0.16")


def cache_keys(
    prefixes: Sequence[str],
    weights: Sequence[float],
    train_samples: int,
    args: MegatronArgs,
    seq_length: int,
    *,
    use_megatron: bool | None = None,
) -> CacheKeys:
    """The names megatron-core gives the indices of this blend, for these arguments.
    ``use_megatron``: None (megatron-core's code if importable), True or False."""
    if use_megatron is None:
        try:
            import megatron.core.datasets.gpt_dataset  # noqa: F401

            use_megatron = True
        except Exception:  # not installed or unusable here: the replica
            use_megatron = False
    fn = _keys_core if use_megatron else _keys_replica
    return fn(list(prefixes), list(weights), int(train_samples), args, int(seq_length))


# --------------------------------------------------------------------------- writing


def gpt_indices(
    records: np.ndarray, num_samples: int, seq_len: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Document, sample and shuffle index making GPTDataset sample j the sequence
    ``records[j]`` (seq_len + 1 tokens). Padded by repeating ``records`` so that the dataset
    holds at least the ``num_samples`` megatron-core asks of it."""
    records = np.asarray(records)
    n = max(records.size, -(-(int(num_samples) + 1) // 2), 1)
    docs = np.resize(records, n).astype(np.int32)  # np.resize repeats cyclically
    wide = max(2 * n, seq_len + 1) > np.iinfo(np.int32).max
    sample = np.empty((2 * n, 2), dtype=np.int64 if wide else np.int32)
    sample[0::2, 0] = np.arange(n)
    sample[0::2, 1] = 0
    sample[1::2, 0] = np.arange(n)
    sample[1::2, 1] = seq_len
    total = 2 * n - 1  # the dataset's length: sample_index rows - 1
    dtype = np.int64 if total >= np.iinfo(np.uint32).max - 1 else np.uint32
    shuffle = np.empty(total, dtype=dtype)
    shuffle[:n] = np.arange(n, dtype=dtype) * 2
    shuffle[n:] = np.arange(n - 1, dtype=dtype) * 2  # never read: valid rows all the same
    return docs, sample, shuffle


def _link(src: Path, dst: Path) -> None:
    """``dst`` as a hard link to ``src`` (the same index arrays under another key), a copy
    where the file system has no hard links; replaced atomically."""
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def write_cache(
    cache_dir: str | os.PathLike,
    prefixes: Sequence[str],
    weights: Sequence[float],
    source: megatron_stream.SampleSource,
    used: np.ndarray,
    total: int,
    seq_len: int,
    args: MegatronArgs,
    *,
    identities: Sequence[Mapping[str, Any]] | None = None,
    use_megatron: bool | None = None,
) -> dict[str, Any]:
    """Write megatron-core's indices so that, trained with ``args`` and ``--train-samples
    total`` on the blend (``weights``, ``prefixes``: the ``used`` prefixes of ``source``),
    Megatron's sample i is sample i of ``source`` (its sequence in its prefix), streamed
    in chunks (``shardcore.megatron_stream``: memory bounded by a chunk and the number of
    prefixes). ``identities``: the tokenizer identities to key the indices for (default
    ``args.tokenizer``); the indices do not depend on it, so the first key set holds the
    arrays and the others hard links to them. Returns what was written (hashes per
    identity, files, how keys were computed)."""
    total = int(total)
    if total == 0:
        raise InputError("train_samples: nothing to write for an empty range")
    if len(prefixes) > MAX_PREFIXES:
        raise InputError(
            f"prefixes: {len(prefixes)} shards, Megatron blends at most {MAX_PREFIXES}; build "
            "the pools with larger shards or materialize the mixture"
        )
    for p in prefixes:
        if any(c.isspace() for c in p):
            raise InputError(f"prefix {p!r}: Megatron splits data-args on whitespace")
    idents = [dict(i) for i in identities] if identities else [dict(args.tokenizer)]
    key_sets = [
        cache_keys(
            prefixes, weights, total, replace(args, tokenizer=ids), seq_len,
            use_megatron=use_megatron,
        )
        for ids in idents
    ]  # fmt: skip
    first = key_sets[0]
    if any((k.num_samples, k.size) != (first.num_samples, first.size) for k in key_sets):
        raise RuntimeError("megatron-core sized the blend differently per tokenizer")
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    gpt_suffixes = ("document_index", "sample_index", "shuffle_index")
    blend_suffixes = ("dataset_index", "dataset_sample_index")

    def index_sets(keys: CacheKeys) -> list[tuple[tuple[str, str], str, tuple[str, ...]]]:
        out: list[tuple[tuple[str, str], str, tuple[str, ...]]] = [
            (keys.gpt[k], "GPTDataset", gpt_suffixes) for k in range(len(prefixes))
        ]
        if keys.blended is not None:
            out.append((keys.blended, "BlendedDataset", blend_suffixes))
        return out

    first_bases = [f"{md5}-{cls}-train" for (_, md5), cls, _ in index_sets(first)]
    megatron_stream.write_indices(
        cache,
        first_bases[: len(prefixes)],
        first_bases[-1] if first.blended is not None else None,
        first.size,
        first.num_samples,
        source,
        np.asarray(used),
        total,
        seq_len,
    )
    written = []
    for n, (ids, keys) in enumerate(zip(idents, key_sets, strict=True)):
        files = []
        for j, ((desc, md5), cls, suffixes) in enumerate(index_sets(keys)):
            base = f"{md5}-{cls}-train"
            for suffix in suffixes:
                if n > 0 and first_bases[j] != base:  # the first identity's arrays
                    _link(cache / f"{first_bases[j]}-{suffix}.npy", cache / f"{base}-{suffix}.npy")
            # The description last: megatron-core then finds a complete set.
            atomic.write_text(cache / f"{base}-description.txt", desc)
            files.append(base)
        written.append(
            {
                "tokenizer": ids,
                "gpt": [h for _, h in keys.gpt],
                "blended": None if keys.blended is None else keys.blended[1],
                "files": files,
            }
        )
    return {
        "keys_via": first.via,
        "size": first.size,
        "train_samples": total,
        "keys": written,
    }


# --------------------------------------------------------------------------- mixtures


@dataclass
class StageBlend:
    """One stage's data-args list and, per sample up to the stage's end, its prefix and
    sequence in that prefix."""

    name: str
    first: int
    end: int
    prefixes: list[str]
    weights: list[float]
    source: megatron_stream.SampleSource  # per sample: its prefix and sequence in it
    used: np.ndarray  # the source's prefixes listed, in the order of ``prefixes``


def _shard_prefixes(
    root: str | os.PathLike, manifest: Mapping[str, Any]
) -> tuple[list[str], np.ndarray]:
    return megatron_stream.shard_prefixes(root, manifest)


def stage_blends(path: str | os.PathLike) -> tuple[dict[str, Any], list[StageBlend]]:
    """Per stage: the shards read by samples [0, stage end), weighted by the stage's samples
    from each (``ABSENT_WEIGHT`` for a shard only earlier stages read). One pass over the
    schedule in chunks (``shardcore.megatron_stream``)."""

    manifest = mf.read_manifest(path)
    source = megatron_stream.SampleSource(path, manifest)
    stages = manifest["stages"]
    bounds = [0] + [int(st["first_sample"]) + int(st["num_samples"]) for st in stages]
    per_stage = megatron_stream.stage_counts(source, bounds)
    upto = np.zeros(len(source.prefixes), dtype=np.int64)
    out = []
    for st, here_all in zip(stages, per_stage, strict=True):
        upto = upto + here_all
        first, end = int(st["first_sample"]), int(st["first_sample"]) + int(st["num_samples"])
        used = np.flatnonzero(upto > 0)
        here = here_all[used]
        weights = [float(c) if c > 0 else ABSENT_WEIGHT for c in here.tolist()]
        out.append(
            StageBlend(
                name=str(st["name"]),
                first=first,
                end=end,
                prefixes=[source.prefixes[i] for i in used.tolist()],
                weights=weights,
                source=source,
                used=used,
            )
        )
    return manifest, out


def check_prefixes(manifest: Mapping[str, Any], blends: Sequence[StageBlend], path) -> None:
    """Refuse, before writing anything, a stage whose blend lists more shard prefixes than
    megatron-core's int16 dataset index holds (``MAX_PREFIXES``), saying what fits: pools
    rebuilt with shards that many times larger, or a materialized copy with shards of at
    least the size that brings the stage's samples under the limit."""

    worst = max(blends, key=lambda b: len(b.prefixes), default=None)
    if worst is None or len(worst.prefixes) <= MAX_PREFIXES:
        return
    factor = -(-len(worst.prefixes) // MAX_PREFIXES)
    itemsize = np.dtype(manifest.get("dtype") or "int32").itemsize
    stage_bytes = worst.end * (int(manifest["seq_len"]) + 1) * itemsize
    copy_mb = -(-stage_bytes // (MAX_PREFIXES * (1 << 20)))
    pools = manifest.get("pools") or []
    sizes = []
    for pool in pools:
        pm = mf.read_manifest(pool["path"])
        shards = len(pm.get("shards") or []) or 1
        sizes.append(int(pm.get("num_records", 0)) * int(pm.get("record_tokens", 0)) * itemsize
                      / shards)  # fmt: skip
    now = f" (about {max(sizes) / 2**20:,.0f} MiB now)" if sizes and max(sizes) > 0 else ""
    raise InputError(
        f"{path}: stage {worst.name!r} reads {len(worst.prefixes):,} shard prefixes; "
        f"megatron-core's int16 blend index holds at most {MAX_PREFIXES:,} per stage. Either "
        f"rebuild its pools with shards {factor}x larger{now} (shardyard pool --shard-size), "
        f"or materialize the mixture with shards of at least {copy_mb:,} MiB (shardyard "
        f"materialize --shard-mb {copy_mb}) and export the materialized copy"
    )


def data_args(blend: StageBlend) -> str:
    """The ``w1 prefix1 w2 prefix2 ...`` list of a ``--data-args-path`` file, a pair a line
    (Megatron-LM splits the file on whitespace)."""
    return "".join(f"{w!r} {p}\n" for w, p in zip(blend.weights, blend.prefixes, strict=True))


def _file_name(stage: str, per_split: bool = False) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", stage)
    return f"per-split-{safe}.json" if per_split else f"data-args-{safe}.txt"


def valid_args(manifest: Mapping[str, Any], stage: int) -> str | None:
    """The pools' validation slices (``val/`` of each pool the stage reads), weighted by
    the stage's samples from the pool, as a ``w prefix ...`` list; None if none has one."""

    pools = manifest.get("pools")
    if pools is None and manifest.get("mixture"):  # a materialized mixture: its mixture's
        pools = mf.read_manifest(manifest["mixture"])["pools"]
    st = manifest["stages"][stage]
    pairs = []
    for pool, n in zip(pools or [], st.get("samples_per_pool") or [], strict=False):
        if n <= 0:
            continue
        val = mf.read_manifest(pool["path"]).get("val")
        if not val:
            continue
        root = os.path.join(pool["path"], val["path"])
        prefixes, cum = _shard_prefixes(root, mf.read_manifest(root))
        total = int(cum[-1])
        for prefix, records in zip(prefixes, np.diff(cum).tolist(), strict=True):
            if records:
                pairs.append(f"{float(n * records / total)!r} {prefix}")
    return " ".join(pairs) or None


def export_megatron(
    path: str | os.PathLike,
    out: str | os.PathLike | None = None,
    *,
    seed: int = MEGATRON_DEFAULT_SEED,
    seq_length: int | None = None,
    split: str = DEFAULT_SPLIT,
    per_split: bool = False,
    tokenizer: str | Mapping[str, Any] | None = None,
    tokenizer_build: str = "all",
    mid_level_dataset_surplus: float = MEGATRON_DEFAULT_SURPLUS,
    use_megatron: bool | None = None,
    **_: Any,
) -> str:
    """Megatron-LM arguments for a mixture or materialized mixture. With ``out``: also the
    stage data-args files and megatron-core's index cache (``out/cache``) keyed for these
    arguments, and the text as ``out/megatron.txt``. Returns the text. ``per_split``: per
    stage a ``--per-split-data-args-path`` JSON file instead (train: the stage's list,
    valid: the pools' validation slices) and no ``--split``. ``tokenizer_build``: the
    cache is keyed for the tokenizer identity of every build in ``BUILD_CHOICES[...]``
    ("all": megatron-core 0.16.x with and without --legacy-tokenizer and 0.17.x-0.19.x;
    "default": without --legacy-tokenizer; "legacy": 0.16.x with --legacy-tokenizer only)."""
    manifest, blends = stage_blends(path)
    seq_len = int(manifest["seq_len"])
    check_prefixes(manifest, blends, path)  # before anything is written
    tok, named = trainer_tokenizer(tokenizer, manifest.get("tokenizer"))
    identities = tokenizer_builds(tok, tokenizer_build, named)
    legacy_only = all(b == "legacy-0.16" for _, names in identities for b in names)
    args = MegatronArgs(
        seed=int(seed),
        seq_length=int(seq_length) if seq_length else None,
        split=None if per_split else str(split),
        tokenizer=identities[0][0],
        tokenizer_args=tok.cli() + (" --legacy-tokenizer" if legacy_only else ""),
        mid_level_dataset_surplus=float(mid_level_dataset_surplus),
    )
    trainer_seq = args.seq_length or seq_len
    problems = []
    if trainer_seq != seq_len:
        problems.append(
            f"--seq-length {trainer_seq} differs from the mixture's seq_len {seq_len}: "
            "Megatron would cut other windows"
        )
    if args.split is not None:
        try:
            _check_split(_split_matrix(args.split), args.split)
        except InputError as exc:
            problems.append(str(exc))
    out_dir = Path(out).resolve() if out is not None else None
    cache = out_dir / CACHE_DIR if out_dir is not None else None
    written: list[dict[str, Any]] = []
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for k, b in enumerate(blends):
            name = out_dir / _file_name(b.name, per_split)
            if per_split:
                lists = {"train": data_args(b), "valid": valid_args(manifest, k), "test": None}
                atomic.write_text(name, json.dumps(lists, indent=1))
            else:
                atomic.write_text(name, data_args(b))
            if not problems:
                info = write_cache(
                    out_dir / CACHE_DIR,
                    b.prefixes,
                    b.weights,
                    b.source,
                    b.used,
                    b.end,
                    seq_len,
                    args,
                    identities=[ids for ids, _ in identities],
                    use_megatron=use_megatron,
                )
                written.append({"stage": b.name, "data_args": str(name), **info})
    text = _text(
        manifest, path, blends, args, seq_len, out_dir, cache, problems, written, identities
    )
    if out_dir is not None:
        atomic.write_text(out_dir / "megatron.txt", text)
        record = {
            "source": str(Path(path).resolve()),
            "fingerprint": manifest.get("fingerprint"),
            "arguments": {
                "seed": args.seed,
                "seq_length": trainer_seq,
                "split": args.split,
                "per_split": args.split is None,
                "tokenizer": asdict(tok),
                "legacy_tokenizer": legacy_only,
                "tokenizer_build": tokenizer_build,
                "mid_level_dataset_surplus": args.mid_level_dataset_surplus,
            },
            "identities": [{"tokenizer": ids, "builds": names} for ids, names in identities],
            "exact": not problems,
            "problems": problems,
            "stages": written,
            "supported_megatron_core": SUPPORTED_MEGATRON_CORE,
            "tested_megatron_core": list(TESTED_MEGATRON_CORE),
        }
        atomic.write_text(out_dir / "export.json", json.dumps(record, indent=1, sort_keys=True))
    return text


def _checked_lines(builds: set[str]) -> list[str]:
    """megatron.txt's lines on the releases the keyed ``builds`` were checked with, and on
    the supported releases whose build has no key (there the printed line misses the cache
    or is not accepted)."""
    if builds == set(BUILDS):
        return [
            f"# Checked with megatron-core {', '.join(TESTED_MEGATRON_CORE)}: every sample "
            "equal, no index built",
            "#   (0.16.0 with and without --legacy-tokenizer; 0.17.1, 0.18.2, 0.19.2 by",
            "#   bench/megatron/newest.py).",
        ]
    checked = [v for v in TESTED_MEGATRON_CORE if any(v in TESTED_BY_BUILD[b] for b in builds)]
    how = []
    if "core-0.16" in builds or "legacy-0.16" in builds:
        how.append(
            "0.16.0 "
            + {
                2: "with and without --legacy-tokenizer",
                1: "with --legacy-tokenizer"
                if "legacy-0.16" in builds
                else "without --legacy-tokenizer",
            }[len(builds & {"core-0.16", "legacy-0.16"})]
        )
    later = [v for v in checked if v != "0.16.0"]
    if later:
        how.append(f"{', '.join(later)} by bench/megatron/newest.py")
    lines = [
        f"# Checked with megatron-core {', '.join(checked)}: every sample equal, no index built",
        f"#   ({'; '.join(how)}).",
    ]
    if builds != {"legacy-0.16"}:  # (a --legacy-tokenizer line says so itself)
        for b in CORE_BUILDS:
            if b not in builds:
                lines += [
                    f"# NOT keyed for {BUILDS[b]}:",
                    "#   there the arguments below miss the cache (megatron-core builds its own",
                    "#   indices) or are not accepted.",
                ]
    return lines


def _text(
    manifest, path, blends, args, seq_len, out_dir, cache, problems, written, identities
) -> str:
    what = "materialized mixture" if manifest.get("kind") == "materialized" else "mixture"
    lines = [
        f"# Megatron-LM arguments for {what} {manifest.get('fingerprint')} "
        f"({blends[-1].end} samples of {seq_len} + 1 tokens)",
        f"# source: {Path(path).resolve()}",
    ]
    common = args.cli(seq_len)
    if cache is not None:
        common += f" --data-cache-path {cache}"
    if problems:
        lines += ["# ORDER NOT GUARANTEED: no index cache written, because"]
        lines += [f"#   - {p}" for p in problems]
        lines += ["# Megatron builds its own indices: its samples are not Shardyard's samples."]
    elif cache is None:
        lines += [
            "# ORDER NOT GUARANTEED: no output directory, so no index cache was written.",
            "# Export with an output directory (shardyard export --format megatron --out DIR)",
            "# for megatron-core's index cache; without it Megatron re-shuffles and blends",
            "# on its own (the shares below hold, the order does not), and without",
            "# --data-cache-path it writes its indices into each prefix's directory.",
        ]
    else:
        via = written[0]["keys_via"] if written else "?"
        installed = megatron_core_version()
        lines += [
            f"# Index cache: {cache} (megatron-core's GPTDataset and BlendedDataset indices;",
            f"#   keys computed by {via}).",
            "# Keyed for the dataset tokenizer that Megatron-LM's pretrain_gpt.py builds from",
            "# the tokenizer arguments below, on each of (one set of index arrays, hard-linked):",
        ]
        for _, names in identities:
            lines += [f"#   - {BUILDS[b]}" for b in names]
        builds = {b for _, names in identities for b in names}
        lines += _checked_lines(builds)
        if "legacy-0.16" in builds and builds != {"legacy-0.16"}:
            lines += ["# On megatron-core 0.16.x, adding --legacy-tokenizer reads the same cache."]
        elif builds == {"legacy-0.16"}:
            lines += ["# Keyed for --legacy-tokenizer only: megatron-core 0.16.x, which has it."]
        else:
            lines += ["# Not keyed for --legacy-tokenizer: run without it."]
        if installed and not _supported(installed):
            lines += [
                f"# WARNING: megatron-core {installed} is installed; the keys are known for "
                f"{SUPPORTED_MEGATRON_CORE} only."
            ]
        lines += [
            "# With exactly the arguments below, megatron-core loads these indices instead of",
            "# building its own, and sample i of Megatron's training data is the mixture's",
            "# sample i (read in order by the default --dataloader-type single sampler).",
            "# The order is NOT guaranteed if any keyed argument differs: --seed, --seq-length,",
            "# --split, the tokenizer, --train-samples, --mid-level-dataset-surplus, the",
            "# data-args list, or the pools' paths. megatron-core then builds indices of its",
            "# own in --data-cache-path (its log says 'Build and save' instead of 'Load').",
            "# --dataloader-type cyclic reads in a random order; --dataloader-fast-cache-load and",
            "# --dataloader-defer-npy-index-mmap are untested.",
        ]
    lines += ["", f"# arguments common to every stage: {common}"]
    for k, b in enumerate(blends):
        lines.append("")
        lines.append(
            f"# stage {b.name}: samples [{b.first}, {b.end}), {len(b.prefixes)} prefixes"
            + (f"; resume from stage {blends[k - 1].name}'s checkpoint" if k else "")
        )
        pairs = " ".join(f"{w!r} {p}" for w, p in zip(b.weights, b.prefixes, strict=True))
        per_split = args.split is None
        flag = "--per-split-data-args-path" if per_split else "--data-args-path"
        if out_dir is not None:
            lines.append(
                f"{common} {flag} {out_dir / _file_name(b.name, per_split)} --train-samples {b.end}"
            )
            lines.append(f"# the same train list inline, in place of {flag}:")
        else:
            lines.append(f"{common} --train-samples {b.end}")
        if per_split:
            lines.append(f"--train-data-path {pairs}")
            valid = valid_args(manifest, k)
            if valid:
                lines.append(f"--valid-data-path {valid}")
        else:
            lines.append(f"--data-path {pairs}")
    lines += [
        "",
        "# --train-samples is each stage's end: a later stage resumes from the checkpoint",
        "# (its consumed samples) and stops at its own end. Give the learning-rate schedule",
        "# in samples (--lr-decay-samples, --lr-warmup-samples) so that it spans all stages.",
    ]
    return "\n".join(lines) + "\n"


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

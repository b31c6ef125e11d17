"""How Megatron-LM's ``pretrain_gpt.py`` builds its training dataset from a command line,
for the tests and bench/megatron/newest.py.

Megatron-LM itself (``pretrain_gpt.py``, ``megatron.training``) is not a package: PyPI has
only megatron-core. So this module mirrors, from reading Megatron-LM's sources at the tags
core_v0.16.0 and core_r0.19.0 (0.19.x), the steps between the command line and
megatron-core, and calls megatron-core for everything else:

- the argparse definitions of the arguments that reach the dataset (names, types,
  defaults, choices; an unknown argument is an error, as in ``parse_args``), per release:
  ``--legacy-tokenizer`` and ``--tokenizer-hf-use-fast`` exist in 0.16 only,
  ``--null-tokenizer-eod-id`` / ``--null-tokenizer-pad-id`` (default -1) from 0.18;
- ``validate_args``: ``--split`` defaults to "969, 30, 1" with ``--data-path`` only;
- ``get_train_valid_test_num_samples`` with ``--train-samples``;
- ``core_gpt_dataset_config_from_args``: the tokenizer from megatron-core's own
  ``build_tokenizer`` (``megatron.core.tokenizers.text.utils.build_tokenizer`` in 0.16,
  ``megatron.core.tokenizers.utils.build_tokenizer`` from 0.17) unless 0.16 is given
  ``--legacy-tokenizer``, then Megatron-LM's legacy ``_NullTokenizer`` (a subclass of
  megatron-core's ``MegatronLegacyTokenizer``, whose identity code is megatron-core's);
  the blend from ``get_blend_and_blend_per_split``; the ``GPTDatasetConfig`` fields as
  pretrain_gpt passes them;
- ``BlendedMegatronDatasetBuilder(dataset_type, sizes, is_built_on_rank, config).build()``,
  where ``train_valid_test_datasets_provider`` picks ``dataset_type``: megatron-core's
  GPTDataset, or with ``--fim-data`` Megatron-LM's GPTFIMDataset (a GPTDataset subclass;
  mirrored by its class name only, which is what megatron-core keys its indices by, not by
  its fill-in-the-middle rearrangement of the tokens); ``--sft`` (Megatron-LM's SFTDataset,
  JSONL conversations) is not mirrored and raises.

Nothing here passes a tokenizer identity of its own: the identity is whatever megatron-core
builds from the parsed arguments.
"""

from __future__ import annotations

import argparse
import json
import shlex
from importlib.metadata import version
from typing import Any

TOKENIZER_TYPES = [
    "BertWordPieceLowerCase", "BertWordPieceCase", "GPT2BPETokenizer", "SentencePieceTokenizer",
    "GPTSentencePieceTokenizer", "HuggingFaceTokenizer", "Llama2Tokenizer", "TikTokenizer",
    "MultimodalTokenizer", "NullTokenizer", "NullMultimodalTokenizer", "SFTTokenizer",
]  # fmt: skip


def core_version() -> tuple[int, int]:
    major, minor = version("megatron-core").split(".")[:2]
    return int(major), int(minor)


def parser(release: tuple[int, int] | None = None) -> argparse.ArgumentParser:
    """Megatron-LM's arguments that reach the GPT dataset, as release ``release`` (default:
    the installed megatron-core's) defines them."""
    release = release or core_version()
    p = argparse.ArgumentParser(prog="pretrain_gpt.py", allow_abbrev=False)
    add = p.add_argument
    # data
    add("--seq-length", type=int, default=None)
    add("--seed", type=int, default=1234)
    add("--split", type=str, default=None)
    add("--data-path", nargs="*", default=None)
    add("--data-args-path", type=str, default=None)
    add("--per-split-data-args-path", type=str, default=None)
    add("--train-data-path", nargs="*", default=None)
    add("--valid-data-path", nargs="*", default=None)
    add("--test-data-path", nargs="*", default=None)
    add("--data-cache-path", default=None)
    add("--mock-data", action="store_true")
    add("--mid-level-dataset-surplus", type=float, default=0.005)
    add("--no-mmap-bin-files", action="store_false", dest="mmap_bin_files")
    add("--reset-position-ids", action="store_true")
    add("--reset-attention-mask", action="store_true")
    add("--eod-mask-loss", action="store_true")
    add("--no-create-attention-mask-in-dataloader", action="store_false",
        dest="create_attention_mask_in_dataloader")  # fmt: skip
    add("--num-dataset-builder-threads", type=int, default=1)
    add("--object-storage-cache-path", type=str, default=None)
    add("--allow-ambiguous-pad-tokens", action="store_true")
    add("--dataloader-fast-cache-load", action="store_true")
    add("--dataloader-defer-npy-index-mmap", action="store_true")
    add("--per-dataset-sequences-path", default=None)
    add("--multiple-validation-sets", action="store_true")
    add("--full-validation", action="store_true")
    add("--dataloader-type", default=None, choices=["single", "cyclic", "external"])
    add("--fim-data", action="store_true")
    add("--sft", action="store_true")
    # training
    add("--train-samples", type=int, default=None)
    add("--train-iters", type=int, default=None)
    add("--global-batch-size", type=int, default=None)
    add("--micro-batch-size", type=int, default=1)
    add("--eval-iters", type=int, default=100)
    add("--eval-interval", type=int, default=1000)
    add("--tensor-model-parallel-size", type=int, default=1)
    add("--context-parallel-size", type=int, default=1)
    add("--sequence-parallel", action="store_true")
    add("--hybrid-context-parallel", action="store_true")
    add("--make-vocab-size-divisible-by", type=int, default=128)
    # tokenizer
    add("--vocab-size", type=int, default=None)
    add("--padded-vocab-size", type=int, default=None)
    add("--vocab-file", type=str, default=None)
    add("--merge-file", type=str, default=None)
    add("--tokenizer-type", type=str, default=None, choices=TOKENIZER_TYPES)
    add("--tokenizer-model", type=str, default=None)
    add("--tokenizer-special-tokens", type=str, nargs="+", default=None)
    add("--tiktoken-pattern", type=str, default=None)
    add("--tiktoken-num-special-tokens", type=int, default=1000)
    add("--trust-remote-code", action="store_true")
    if release < (0, 18):
        add("--tokenizer-metadata", type=str, default=None)
        add("--tiktoken-special-tokens", type=str, nargs="+", default=None)
        add("--tokenizer-sentencepiece-legacy", action="store_true")
    if release < (0, 17):
        add("--legacy-tokenizer", action="store_true")
        add("--tokenizer-hf-use-fast", action="store_true", default=False)
        add("--tokenizer-hf-include-special-tokens", action="store_true", default=False)
    elif release < (0, 18):  # deprecated, no effect
        add("--tokenizer-hf-use-fast", action="store_true", default=True)
        add("--tokenizer-hf-include-special-tokens", action="store_true", default=True)
    if release >= (0, 17):
        add("--tokenizer-hf-no-use-fast", action="store_true")
        add("--tokenizer-hf-no-include-special-tokens", action="store_true")
    if release >= (0, 18):  # from TokenizerConfig
        add("--tokenizer-metadata", type=str, default=None, dest="metadata_path")
        add("--tokenizer-sentencepiece-legacy", action="store_true")
        add("--tokenizer-sentencepiece-ignore-extra-whitespaces", type=bool, default=True)
        add("--null-tokenizer-eod-id", type=int, default=None)
        add("--null-tokenizer-pad-id", type=int, default=-1)
        add("--chat-template", type=str, default=None)
        add("--dataloader-inter-document-masking", action="store_true")
    return p


def parse(line: str, release: tuple[int, int] | None = None) -> argparse.Namespace:
    """The arguments of a printed command line, after ``validate_args``'s defaults."""
    release = release or core_version()
    argv = shlex.split(line)
    while argv and not argv[0].startswith("--"):  # torchrun pretrain_gpt.py ...
        argv.pop(0)
    args = parser(release).parse_args(argv)
    if args.data_path is not None and args.split is None:
        args.split = "969, 30, 1"
    args.rank = 0
    args.data_parallel_size = 1
    args.legacy_tokenizer = getattr(args, "legacy_tokenizer", False)
    if release >= (0, 18):
        args.special_tokens = args.tokenizer_special_tokens
        args.pad_vocab_size = True
    else:
        args.tokenizer_metadata = getattr(args, "tokenizer_metadata", None)
    if args.global_batch_size is None:
        args.global_batch_size = args.micro_batch_size * args.data_parallel_size
    if args.train_samples and args.train_iters is None:
        args.train_iters = args.train_samples // args.global_batch_size
    return args


def _legacy_tokenizer(args: argparse.Namespace):
    """Megatron-LM 0.16's ``megatron.training.tokenizer.build_tokenizer`` (NullTokenizer)."""
    from megatron.core.datasets.megatron_tokenizer import MegatronLegacyTokenizer

    if args.tokenizer_type != "NullTokenizer":
        raise NotImplementedError(f"legacy {args.tokenizer_type} is not mirrored here")

    class _NullTokenizer(MegatronLegacyTokenizer):
        def __init__(self, vocab_size):
            super().__init__(None, vocab_size=vocab_size)
            self._vocab_size_without_eod = int(vocab_size)
            self._eod_id = self._vocab_size_without_eod

        def tokenize(self, text):
            return [int(x) for x in text.split(" ")]

        def detokenize(self, ids):
            return " ".join(str(x) for x in ids)

        @property
        def vocab_size(self):
            return self._vocab_size_without_eod + 1

        @property
        def vocab(self):
            raise NotImplementedError

        @property
        def inv_vocab(self):
            raise NotImplementedError

        @property
        def eod(self):
            return self._eod_id

    assert args.vocab_size is not None
    return _NullTokenizer(args.vocab_size)


def build_tokenizer(args: argparse.Namespace):
    """The dataset tokenizer ``core_gpt_dataset_config_from_args`` builds."""
    if args.legacy_tokenizer:
        return _legacy_tokenizer(args)
    if core_version() < (0, 17):
        from megatron.core.tokenizers.text.utils.build_tokenizer import build_tokenizer as build
    else:
        from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer as build
    return build(args)


def blends(args: argparse.Namespace):
    """Megatron-LM's ``get_blend_and_blend_per_split``."""
    from megatron.core.datasets.utils import get_blend_from_list

    if args.data_path is not None or args.data_args_path is not None:
        if args.data_args_path is not None:
            assert args.data_path is None
            with open(args.data_args_path) as f:
                return get_blend_from_list(f.read().split()), None
        return get_blend_from_list(args.data_path), None
    if args.per_split_data_args_path is not None:
        with open(args.per_split_data_args_path) as f:
            lists = json.load(f)
        for split in ("train", "valid", "test"):
            if isinstance(lists[split], str):
                lists[split] = lists[split].split()
        return None, [get_blend_from_list(lists[s]) for s in ("train", "valid", "test")]
    if any(x is not None for x in (args.train_data_path, args.valid_data_path)):
        return None, [
            get_blend_from_list(args.train_data_path),
            get_blend_from_list(args.valid_data_path),
            get_blend_from_list(args.test_data_path),
        ]
    return None, None


def dataset_config(args: argparse.Namespace):
    """``core_gpt_dataset_config_from_args``."""
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    tokenizer = build_tokenizer(args)
    blend, blend_per_split = blends(args)
    fields: dict[str, Any] = {
        "random_seed": args.seed,
        "sequence_length": args.seq_length,
        "blend": blend,
        "blend_per_split": blend_per_split,
        "split": args.split,
        "multiple_validation_sets": args.multiple_validation_sets,
        "full_validation": args.full_validation,
        "num_dataset_builder_threads": args.num_dataset_builder_threads,
        "path_to_cache": args.data_cache_path,
        "mmap_bin_files": args.mmap_bin_files,
        "tokenizer": tokenizer,
        "reset_position_ids": args.reset_position_ids,
        "reset_attention_mask": args.reset_attention_mask,
        "eod_mask_loss": args.eod_mask_loss,
        "create_attention_mask": args.create_attention_mask_in_dataloader,
        "object_storage_cache_path": args.object_storage_cache_path,
        "mid_level_dataset_surplus": args.mid_level_dataset_surplus,
        "allow_ambiguous_pad_tokens": args.allow_ambiguous_pad_tokens,
        "fast_cache_load": args.dataloader_fast_cache_load,
        "sequences_per_dataset": None,
        "defer_npy_index_mmap": args.dataloader_defer_npy_index_mmap,
        "context_parallel_size": args.context_parallel_size,
        "data_parallel_size": args.data_parallel_size,
        "sequence_parallel_size": args.tensor_model_parallel_size * args.sequence_parallel,
        "hybrid_context_parallel": args.hybrid_context_parallel,
    }
    if core_version() >= (0, 19):
        fields["inter_document_masking"] = args.dataloader_inter_document_masking
    return GPTDatasetConfig(**fields)


def num_samples(args: argparse.Namespace) -> list[int]:
    """``get_train_valid_test_num_samples`` (``--train-samples`` given)."""
    eval_iters = (args.train_iters // args.eval_interval + 1) * args.eval_iters
    return [
        args.train_samples,
        eval_iters * args.global_batch_size,
        args.eval_iters * args.global_batch_size,
    ]


def dataset_type(args: argparse.Namespace) -> type:
    """The dataset class ``train_valid_test_datasets_provider`` builds."""
    from megatron.core.datasets.gpt_dataset import GPTDataset

    if args.sft:
        raise NotImplementedError("--sft: Megatron-LM's SFTDataset is not mirrored here")
    if args.fim_data:
        return type("GPTFIMDataset", (GPTDataset,), {})
    return GPTDataset


def build_datasets(line: str):
    """(train, valid, test, the tokenizer) as pretrain_gpt builds them from ``line``."""
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )

    args = parse(line)
    config = dataset_config(args)
    train, valid, test = BlendedMegatronDatasetBuilder(
        dataset_type(args), num_samples(args), lambda: True, config
    ).build()
    return train, valid, test, config.tokenizer

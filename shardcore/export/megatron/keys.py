"""The names megatron-core gives its index cache files: the MD5 of each ``GPTDataset``'s and
the ``BlendedDataset``'s JSON description, from megatron-core's own code when it is installed,
else from a replica of megatron-core 0.16's (``shardcore.export.megatron`` explains the cache)."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np

from shardcore.errors import InputError
from shardcore.export.megatron.args import (
    DEFAULT_SPLIT,
    MegatronArgs,
)

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


def _keys_core(
    prefixes: list[str],
    weights: list[float],
    train_samples: int,
    args: MegatronArgs,
    seq_length: int,
) -> CacheKeys:
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


def _keys_replica(
    prefixes: list[str],
    weights: list[float],
    train_samples: int,
    args: MegatronArgs,
    seq_length: int,
) -> CacheKeys:
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

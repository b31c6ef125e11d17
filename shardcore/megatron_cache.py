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
replica of megatron-core 0.16's, which a test holds equal to the real one. Tested with
megatron-core 0.16.0 (``TESTED_MEGATRON_CORE``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardcore import atomic
from shardcore.errors import InputError

TESTED_MEGATRON_CORE = ("0.16.0",)
# Megatron-LM's defaults for the arguments that key the cache.
MEGATRON_DEFAULT_SEED = 1234
MEGATRON_DEFAULT_SURPLUS = 0.005
# Pools keep their validation slice apart, so the whole of every prefix is training data.
DEFAULT_SPLIT = "100,0,0"
# Weight of a shard a stage does not read (its earlier samples still need the prefix).
ABSENT_WEIGHT = 1e-6
MAX_PREFIXES = 32766  # BlendedDataset: len(datasets) < 32767 (int16 dataset index)
CACHE_DIR = "cache"


# --------------------------------------------------------------------------- arguments


@dataclass(frozen=True)
class MegatronArgs:
    """The trainer arguments the cache is keyed for, with Megatron-LM's defaults."""

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
    except Exception:  # not installed: megatron-core 0.16's rule
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


def tokenizer_identity(
    spec: str | Mapping[str, Any] | None, mixture_tokenizer: Mapping[str, Any] | None
) -> tuple[dict[str, Any], str]:
    """(megatron ``unique_identifiers``, Megatron-LM arguments) of the trainer's tokenizer.

    ``spec``: ``NullTokenizer:VOCAB`` (``--tokenizer-type NullTokenizer --vocab-size VOCAB``),
    ``HuggingFaceTokenizer:PATH`` (``--tokenizer-model PATH``), or a JSON object: the
    tokenizer's ``unique_identifiers`` as megatron-core serializes them (any other
    tokenizer). Default: the mixture's tokenizer, ``hf:PATH`` as HuggingFaceTokenizer PATH,
    anything else as NullTokenizer of its vocabulary size (samples are pre-tokenized; only
    the EOD id, used by ``--eod-mask-loss`` and the reset options, depends on the tokenizer).
    """
    if isinstance(spec, Mapping):
        return dict(spec), ""
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
            raise InputError(f"tokenizer: not a JSON object: {exc}") from None
        if not isinstance(ids, Mapping) or "class" not in ids:
            raise InputError("tokenizer: the JSON identity needs at least a 'class' field")
        return dict(ids), ""
    kind, _, arg = spec.partition(":")
    if kind == "NullTokenizer":
        try:
            vocab = int(arg)
        except ValueError:
            raise InputError(
                f"tokenizer: NullTokenizer needs a vocabulary size, got {arg!r}"
            ) from None
        return (
            _legacy_identity("_NullTokenizer", [None], {"vocab_size": vocab}),
            f"--tokenizer-type NullTokenizer --vocab-size {vocab}",
        )
    if kind == "HuggingFaceTokenizer":
        if not arg:
            raise InputError("tokenizer: HuggingFaceTokenizer needs a path or name")
        return (
            _legacy_identity("_HuggingFaceTokenizer", [arg], {}),
            f"--tokenizer-type HuggingFaceTokenizer --tokenizer-model {arg}",
        )
    raise InputError(
        f"tokenizer: unknown {spec!r}; give NullTokenizer:VOCAB, HuggingFaceTokenizer:PATH "
        "or the tokenizer's unique_identifiers as a JSON object"
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


def megatron_core_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("megatron-core")
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


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with atomic.atomic_open(path) as f:
        np.save(f, arr, allow_pickle=True)


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


def write_cache(
    cache_dir: str | os.PathLike,
    prefixes: Sequence[str],
    weights: Sequence[float],
    prefix_of_sample: np.ndarray,
    record_of_sample: np.ndarray,
    seq_len: int,
    args: MegatronArgs,
    *,
    use_megatron: bool | None = None,
) -> dict[str, Any]:
    """Write megatron-core's indices so that, trained with ``args`` and ``--train-samples
    len(prefix_of_sample)`` on the blend (``weights``, ``prefixes``), Megatron's sample i is
    sequence ``record_of_sample[i]`` of prefix ``prefix_of_sample[i]``. Returns what was
    written (hashes, files, how the keys were computed)."""
    d = np.asarray(prefix_of_sample)
    rec = np.asarray(record_of_sample)
    total = int(d.size)
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
    keys = cache_keys(prefixes, weights, total, args, seq_len, use_megatron=use_megatron)
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    d16 = d.astype(np.int16)
    # Rank of each sample among its prefix's samples: a stable (radix, for int16) sort.
    order = np.argsort(d16, kind="stable")
    counts = np.bincount(d16, minlength=len(prefixes)).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(total, dtype=np.int64)
    rank[order] = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
    files = []
    for k in range(len(prefixes)):
        desc, md5 = keys.gpt[k]
        base = f"{md5}-GPTDataset-train"
        mine = rec[order[starts[k] : starts[k] + counts[k]]]
        if mine.size == 0:  # listed for the key only: any record serves as padding
            mine = np.zeros(1, dtype=np.int64)
        docs, sample, shuffle = gpt_indices(mine, keys.num_samples[k], seq_len)
        _save_npy(cache / f"{base}-document_index.npy", docs)
        _save_npy(cache / f"{base}-sample_index.npy", sample)
        _save_npy(cache / f"{base}-shuffle_index.npy", shuffle)
        atomic.write_text(cache / f"{base}-description.txt", desc)  # last: the set is complete
        files.append(base)
    record = {
        "keys_via": keys.via,
        "blended": None,
        "gpt": [h for _, h in keys.gpt],
        "size": keys.size,
        "train_samples": total,
        "files": files,
    }
    if keys.blended is None:  # one prefix, per split: its GPTDataset is the whole order
        return record
    desc, md5 = keys.blended
    base = f"{md5}-BlendedDataset-train"
    dataset_index = np.empty(keys.size, dtype=np.int16)
    sample_index = np.empty(keys.size, dtype=np.int64)
    dataset_index[:total] = d16
    sample_index[:total] = rank
    tail = np.arange(total, keys.size) % total  # past train_samples: never read
    dataset_index[total:] = d16[tail]
    sample_index[total:] = rank[tail]
    _save_npy(cache / f"{base}-dataset_index.npy", dataset_index)
    _save_npy(cache / f"{base}-dataset_sample_index.npy", sample_index)
    atomic.write_text(cache / f"{base}-description.txt", desc)
    files.append(base)
    return {**record, "blended": md5}


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
    prefix_of_sample: np.ndarray  # [0, end): index into prefixes
    record_of_sample: np.ndarray  # [0, end): sequence in that prefix


def _shard_prefixes(
    root: str | os.PathLike, manifest: Mapping[str, Any]
) -> tuple[list[str], np.ndarray]:
    prefixes = [os.path.abspath(os.path.join(root, s["prefix"])) for s in manifest["shards"]]
    records = np.array([int(s["records"]) for s in manifest["shards"]], dtype=np.int64)
    return prefixes, np.concatenate([[0], np.cumsum(records)])


def sample_map(path: str | os.PathLike) -> tuple[dict[str, Any], list[str], np.ndarray, np.ndarray]:
    """(manifest, every shard prefix, per sample its prefix index, per sample its sequence
    in that prefix) of a mixture (shards of its pools) or a materialized mixture."""
    from shardcore import manifest as mf
    from shardcore.mixture import KIND as MIXTURE
    from shardcore.mixture import Mixture

    manifest = mf.read_manifest(path)
    kind = manifest.get("kind")
    if kind == "materialized":
        prefixes, cum = _shard_prefixes(path, manifest)
        n = int(cum[-1])
        d = np.repeat(np.arange(len(prefixes), dtype=np.int32), np.diff(cum))
        local = np.arange(n, dtype=np.int64) - np.repeat(cum[:-1], np.diff(cum))
        return manifest, prefixes, d, local
    if kind != MIXTURE:
        raise InputError(f"{path}: not a mixture or materialized mixture (kind {kind!r})")
    mix = Mixture(path)
    pidx = np.asarray(mix.pool_index)
    rec = np.asarray(mix.record_index)
    d = np.empty(pidx.size, dtype=np.int32)
    local = np.empty(pidx.size, dtype=np.int64)
    prefixes: list[str] = []
    for p, pool in enumerate(mix.pools):
        pool_prefixes, cum = _shard_prefixes(pool["path"], mf.read_manifest(pool["path"]))
        sel = np.flatnonzero(pidx == p)
        shard = np.searchsorted(cum, rec[sel], side="right") - 1
        d[sel] = len(prefixes) + shard
        local[sel] = rec[sel] - cum[shard]
        prefixes.extend(pool_prefixes)
    return manifest, prefixes, d, local


def stage_blends(path: str | os.PathLike) -> tuple[dict[str, Any], list[StageBlend]]:
    """Per stage: the shards read by samples [0, stage end), weighted by the stage's samples
    from each (``ABSENT_WEIGHT`` for a shard only earlier stages read)."""
    manifest, prefixes, d_all, local = sample_map(path)
    out = []
    for st in manifest["stages"]:
        first, end = int(st["first_sample"]), int(st["first_sample"]) + int(st["num_samples"])
        counts = np.bincount(d_all[:end], minlength=len(prefixes))
        used = np.flatnonzero(counts > 0)
        remap = np.full(len(prefixes), -1, dtype=np.int32)
        remap[used] = np.arange(used.size)
        here = np.bincount(d_all[first:end], minlength=len(prefixes))[used]
        weights = [float(c) if c > 0 else ABSENT_WEIGHT for c in here.tolist()]
        out.append(
            StageBlend(
                name=str(st["name"]),
                first=first,
                end=end,
                prefixes=[prefixes[i] for i in used.tolist()],
                weights=weights,
                prefix_of_sample=remap[d_all[:end]],
                record_of_sample=local[:end],
            )
        )
    return manifest, out


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
    from shardcore import manifest as mf

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
    mid_level_dataset_surplus: float = MEGATRON_DEFAULT_SURPLUS,
    use_megatron: bool | None = None,
    **_: Any,
) -> str:
    """Megatron-LM arguments for a mixture or materialized mixture. With ``out``: also the
    stage data-args files and megatron-core's index cache (``out/cache``) keyed for these
    arguments, and the text as ``out/megatron.txt``. Returns the text. ``per_split``: per
    stage a ``--per-split-data-args-path`` JSON file instead (train: the stage's list,
    valid: the pools' validation slices) and no ``--split``."""
    manifest, blends = stage_blends(path)
    seq_len = int(manifest["seq_len"])
    ids, tok_args = tokenizer_identity(tokenizer, manifest.get("tokenizer"))
    args = MegatronArgs(
        seed=int(seed),
        seq_length=int(seq_length) if seq_length else None,
        split=None if per_split else str(split),
        tokenizer=ids,
        tokenizer_args=tok_args,
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
                    cache,
                    b.prefixes,
                    b.weights,
                    b.prefix_of_sample,
                    b.record_of_sample,
                    seq_len,
                    args,
                    use_megatron=use_megatron,
                )
                written.append({"stage": b.name, "data_args": str(name), **info})
    text = _text(manifest, path, blends, args, seq_len, out_dir, cache, problems, written)
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
                "tokenizer": args.tokenizer,
                "mid_level_dataset_surplus": args.mid_level_dataset_surplus,
            },
            "exact": not problems,
            "problems": problems,
            "stages": written,
            "tested_megatron_core": list(TESTED_MEGATRON_CORE),
        }
        atomic.write_text(out_dir / "export.json", json.dumps(record, indent=1, sort_keys=True))
    return text


def _text(manifest, path, blends, args, seq_len, out_dir, cache, problems, written) -> str:
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
            f"#   keys computed by {via}; tested with megatron-core "
            f"{', '.join(TESTED_MEGATRON_CORE)}).",
        ]
        if installed and installed not in TESTED_MEGATRON_CORE:
            lines += [f"# WARNING: megatron-core {installed} is installed and untested here."]
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


def check_trainer_args(export_dir: str | os.PathLike, argv: str | Sequence[str]) -> list[str]:
    """Why Megatron-LM run with ``argv`` would not read the export in ``export_dir`` in
    Shardyard's order; an empty list when it does (every keyed argument matches a stage)."""
    import shlex

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
    else:
        # Megatron-LM's own default split keeps 3.1% of every prefix for validation and test.
        differs("--split", args.get("--split", "969, 30, 1"), want["split"])
    differs(
        "--mid-level-dataset-surplus",
        number("--mid-level-dataset-surplus", MEGATRON_DEFAULT_SURPLUS, float),
        want["mid_level_dataset_surplus"],
    )
    tok = want["tokenizer"]
    if tok.get("class") == "_NullTokenizer":
        differs("--tokenizer-type", args.get("--tokenizer-type"), "NullTokenizer")
        differs("--vocab-size", args.get("--vocab-size"), tok.get("vocab_size"))
    elif tok.get("class") == "_HuggingFaceTokenizer":
        differs("--tokenizer-type", args.get("--tokenizer-type"), "HuggingFaceTokenizer")
        differs("--tokenizer-model", args.get("--tokenizer-model"), tok["tokenizer_path"][0])
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
    if args.get(file_flag):
        path = str(Path(args[file_flag]).resolve())
        stage = next((s for s in record["stages"] if s["data_args"] == path), None)
        if stage is None:
            problems.append(f"{file_flag} {path} is none of the export's stage files")
    elif args.get(list_flag):
        given = args[list_flag].split()
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

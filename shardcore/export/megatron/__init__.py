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

The per-sample work runs in chunks of samples (``shardcore.export.megatron.stream``): the stage
lists are counted in one pass over the schedule, the index files written by ranges, in
memory bounded by a chunk and the number of prefixes. A stage listing more prefixes than
megatron-core's int16 blend index holds is refused before anything is written, with the
shard size that fits (``check_prefixes``); with ``fit`` the export plans that shard size
itself, materializes the mixture in it and exports the copy (``fitting_shard_bytes``).
Why a copy: a prefix is one ``.bin`` file, megatron-core asserts fewer than 32,767 datasets
per blend, and a pool's shard is one pass-2 bucket (at most a quarter of the pool's memory
budget), so a 15 T-token mixture in 64 MiB shards (~900 k prefixes) can reach Megatron's
default path only through files of ~2 GB, which no file system joins without copying.

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

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from shardcore import atomic
from shardcore import manifest as mf
from shardcore.errors import InputError
from shardcore.export.megatron import stream as megatron_stream
from shardcore.export.megatron.args import (
    BUILD_CHOICES,
    BUILDS,
    CACHE_DIR,
    CORE_BUILDS,
    DEFAULT_SPLIT,
    DEFAULT_TEXT,
    MEGATRON_DEFAULT_SEED,
    MEGATRON_DEFAULT_SURPLUS,
    SUPPORTED_MEGATRON_CORE,
    TESTED_BY_BUILD,
    TESTED_MEGATRON_CORE,
    TOKENIZER_TYPES,
    UNMODELED_HF_FLAGS,
    MegatronArgs,
    TrainerTokenizer,
    tokenizer_builds,
    tokenizer_identity,
    trainer_tokenizer,
)
from shardcore.export.megatron.check import check_trainer_args
from shardcore.export.megatron.keys import (
    CacheKeys,
    _check_split,
    _split_matrix,
    _supported,
    cache_keys,
    megatron_core_version,
)
from shardcore.materialize import materialize

# The export's public names, with the trainer's arguments (``args``), the cache
# keys (``keys``) and the launch check (``check``) it is built from.
__all__ = [
    "ABSENT_WEIGHT",
    "BUILDS",
    "BUILD_CHOICES",
    "CACHE_DIR",
    "CORE_BUILDS",
    "CacheKeys",
    "DEFAULT_SPLIT",
    "DEFAULT_TEXT",
    "MAX_PREFIXES",
    "MEGATRON_DEFAULT_SEED",
    "MEGATRON_DEFAULT_SURPLUS",
    "MegatronArgs",
    "SUPPORTED_MEGATRON_CORE",
    "StageBlend",
    "TESTED_BY_BUILD",
    "TESTED_MEGATRON_CORE",
    "TOKENIZER_TYPES",
    "TrainerTokenizer",
    "UNMODELED_HF_FLAGS",
    "cache_keys",
    "check_prefixes",
    "check_trainer_args",
    "data_args",
    "export_megatron",
    "gpt_indices",
    "megatron_core_version",
    "stage_blends",
    "tokenizer_builds",
    "tokenizer_identity",
    "trainer_tokenizer",
    "valid_args",
    "write_cache",
]

# Weight of a shard a stage does not read (its earlier samples still need the prefix).
ABSENT_WEIGHT = 1e-6
MAX_PREFIXES = 32766  # BlendedDataset: len(datasets) < 32767 (int16 dataset index)

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
    in chunks (``shardcore.export.megatron.stream``: memory bounded by a chunk and the number of
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
            prefixes,
            weights,
            total,
            replace(args, tokenizer=ids),
            seq_len,
            use_megatron=use_megatron,
        )
        for ids in idents
    ]
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
    schedule in chunks (``shardcore.export.megatron.stream``)."""

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


def check_prefixes(
    manifest: Mapping[str, Any], blends: Sequence[StageBlend], path: str | os.PathLike
) -> None:
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
        sizes.append(
            int(pm.get("num_records", 0)) * int(pm.get("record_tokens", 0)) * itemsize / shards
        )
    now = f" (about {max(sizes) / 2**20:,.0f} MiB now)" if sizes and max(sizes) > 0 else ""
    raise InputError(
        f"{path}: stage {worst.name!r} reads {len(worst.prefixes):,} shard prefixes; "
        f"megatron-core's int16 blend index holds at most {MAX_PREFIXES:,} per stage. Either "
        f"rebuild its pools with shards {factor}x larger{now} (shardyard pool --shard-size), "
        f"or materialize the mixture with shards of at least {copy_mb:,} MiB (shardyard "
        f"materialize --shard-mb {copy_mb}) and export the materialized copy"
    )


def fitting_shard_bytes(manifest: Mapping[str, Any], blends: Sequence[StageBlend]) -> int | None:
    """The shard size of a materialized copy whose every stage fits megatron-core's int16
    blend index (``MAX_PREFIXES`` shard prefixes), or None when the mixture fits as it is:
    whole samples, at least the default 64 MiB, the worst stage's samples over at most
    ``MAX_PREFIXES`` shards."""
    worst = max(blends, key=lambda b: len(b.prefixes), default=None)
    if worst is None or len(worst.prefixes) <= MAX_PREFIXES:
        return None
    itemsize = np.dtype(manifest.get("dtype") or "int32").itemsize
    per_sample = (int(manifest["seq_len"]) + 1) * itemsize
    per_shard = max(-(-worst.end // MAX_PREFIXES), -(-(64 << 20) // per_sample))
    return per_shard * per_sample


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


# export_megatron's options a fitted copy is exported with, as given.
_EXPORT_OPTIONS = (
    "seed",
    "seq_length",
    "split",
    "per_split",
    "tokenizer",
    "tokenizer_build",
    "mid_level_dataset_surplus",
    "use_megatron",
)


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
    fit: str | os.PathLike | None = None,
    **_: Any,
) -> str:
    """Megatron-LM arguments for a mixture or materialized mixture. With ``out``: also the
    stage data-args files and megatron-core's index cache (``out/cache``) keyed for these
    arguments, and the text as ``out/megatron.txt``. Returns the text. ``per_split``: per
    stage a ``--per-split-data-args-path`` JSON file instead (train: the stage's list,
    valid: the pools' validation slices) and no ``--split``. ``tokenizer_build``: the
    cache is keyed for the tokenizer identity of every build in ``BUILD_CHOICES[...]``
    ("all": megatron-core 0.16.x with and without --legacy-tokenizer and 0.17.x-0.19.x;
    "default": without --legacy-tokenizer; "legacy": 0.16.x with --legacy-tokenizer only).
    ``fit``: where a stage lists more shard prefixes than megatron-core holds, materialize
    the mixture there in shards that fit (``fitting_shard_bytes``; an interrupted copy is
    completed) and export the copy instead."""
    manifest, blends = stage_blends(path)
    seq_len = int(manifest["seq_len"])
    shard_bytes = fitting_shard_bytes(manifest, blends) if fit is not None else None
    if fit is not None and shard_bytes is not None:
        materialize(path, fit, shard_bytes=shard_bytes)
        kept = {k: v for k, v in locals().items() if k in _EXPORT_OPTIONS}
        return export_megatron(fit, out, **kept)
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
    manifest: dict[str, Any],
    path: str | os.PathLike,
    blends: list[StageBlend],
    args: MegatronArgs,
    seq_len: int,
    out_dir: Path | None,
    cache: Path | None,
    problems: list[str],
    written: list[dict[str, Any]],
    identities: list[tuple[dict[str, Any], list[str]]],
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

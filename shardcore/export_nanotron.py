"""The nanotron export: ``data_stages`` whose dataset folders nanotron's reader opens, and
stage boundaries on whole global batches.

nanotron's Nanoset reads each dataset folder with datatrove's ``DatatroveFolderDataset``:
the folder's ``*.ds`` files in name order, each a flat token array cut into items of
seq_len + 1 tokens (``token_size`` 2 reads uint16, 4 reads uint32), document ends for
position ids from ``<file>.ds.index`` (uint64 token offsets), and ``NanosetDatasetsArgs``
reads the tokenizer name and token size from the first line of a ``*.metadata`` file
(``name|token_size``). A pool shard's ``.bin`` is exactly such an array (records of
seq_len + 1 tokens back to back; int32 reads as uint32, ids being non-negative), so the
export makes one *view* folder per pool: for each shard, ``pool-XXXXX.ds`` a symbolic link
to its ``.bin`` (never a copy), ``pool-XXXXX.ds.index`` the shard's document ends
(computed from the pool's segment arrays: a few bytes per document) and
``pool-XXXXX.ds.metadata``. Item i of a view folder is record i of the pool.

nanotron's sequence_length is our seq_len: it reads seq_len + 1 tokens per sample and
shifts inside, the same convention as ours. ``start_training_step`` of a stage is
``first_sample / global_batch_size + 1``; the export refuses a stage that does not start
on a whole global batch (build the mixture with ``global_batch_size`` in its spec, which
rounds every stage to whole batches). The Nanoset blends its folders with its own
weighted index and seeded shuffle: the shares and the stage boundaries are Shardyard's,
the order within a stage is nanotron's.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from shardcore import atomic
from shardcore import manifest as mf
from shardcore.errors import InputError

VIEWS_DIR = "exports/nanotron"


def token_size(dtype: str) -> int:
    """Bytes per token as datatrove reads them (2: uint16, 4: uint32)."""
    dt = np.dtype(dtype)
    if dt.itemsize not in (2, 4) or dt.kind not in "iu":
        raise InputError(f"dtype: datatrove reads 2- or 4-byte tokens, not {dt}")
    return dt.itemsize


def tokenizer_name(manifest: dict[str, Any]) -> str:
    """The name written in ``.ds.metadata``: an ``hf:`` tokenizer's path or name (what
    nanotron hands to AutoTokenizer), else our tokenizer spec."""
    spec = str((manifest.get("tokenizer") or {}).get("spec") or "unknown")
    return spec[3:] if spec.startswith("hf:") else spec


def document_ends(segments, width: int) -> np.ndarray:
    """Token offsets (exclusive) where each document or padding run of a shard ends, in
    the shard's flat token stream: datatrove's ``.ds.index`` content."""
    record = np.repeat(
        np.arange(segments.num_records, dtype=np.int64), np.diff(segments.seg_record_offsets)
    )
    ends = record * width + segments.seg_start.astype(np.int64) + segments.seg_length
    doc = segments.seg_doc
    last = np.ones(doc.size, dtype=bool)
    last[:-1] = (doc[1:] != doc[:-1]) | (doc[:-1] < 0)
    return ends[last].astype(np.uint64)


def pool_view(pool_path: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """A datatrove folder for a pool at ``dest`` (links, index and metadata files), made
    once: an existing complete view of the same pool is kept."""
    from shardcore.pack import load_segments

    pool_path, dest = Path(pool_path).resolve(), Path(dest)
    manifest = mf.read_manifest(pool_path)
    if manifest.get("kind") != "pool":
        raise InputError(f"{pool_path}: not a pool (kind {manifest.get('kind')!r})")
    marker = dest / ".pool"
    if marker.is_file() and marker.read_text() == manifest["fingerprint"]:
        return dest
    size = token_size(manifest["dtype"])
    name = tokenizer_name(manifest)
    width = int(manifest["seq_len"]) + 1
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(dest) as tmp:
        tmp.mkdir()
        for shard in manifest["shards"]:
            base = Path(shard["prefix"]).name
            tokens = int(shard["records"]) * width
            os.symlink(pool_path / f"{shard['prefix']}.bin", tmp / f"{base}.ds")
            seg = load_segments(pool_path / f"{shard['prefix']}.segments.npz")
            document_ends(seg, width).tofile(tmp / f"{base}.ds.index")
            (tmp / f"{base}.ds.metadata").write_text(f"{name}|{size}\n{tokens}\n{tokens}\n")
        (tmp / ".pool").write_text(manifest["fingerprint"])
        if dest.exists():
            shutil.rmtree(dest)
    return dest


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", os.path.basename(str(text).rstrip("/")))[:60] or "pool"


def nanotron_config(
    mixture_dir: str | os.PathLike,
    *,
    global_batch_size: int | None = None,
    views_dir: str | os.PathLike | None = None,
    **_: Any,
) -> str:
    """nanotron ``tokens`` and ``data_stages`` for a mixture; writes the pools' view
    folders under ``views_dir`` (default: ``<mixture>/exports/nanotron``)."""
    mixture_dir = Path(mixture_dir).resolve()
    manifest = mf.read_manifest(mixture_dir)
    if manifest.get("kind") != "mixture":
        raise InputError(f"{mixture_dir}: not a mixture (kind {manifest.get('kind')!r})")
    spec_gbs = manifest["spec"].get("global_batch_size")
    gbs = int(global_batch_size or spec_gbs or 1)
    if gbs < 1:
        raise InputError(f"global_batch_size: must be >= 1, got {global_batch_size}")
    for st in manifest["stages"]:
        if int(st["first_sample"]) % gbs or int(st["num_samples"]) % gbs:
            raise InputError(
                f"global_batch_size: stage {st['name']!r} covers samples "
                f"[{st['first_sample']}, {st['first_sample'] + st['num_samples']}), not whole "
                f"global batches of {gbs}; rebuild the mixture with global_batch_size: {gbs} "
                f"in its spec (shardyard mix --global-batch-size {gbs}), which rounds every "
                f"stage to whole batches"
            )
    views = Path(views_dir) if views_dir is not None else mixture_dir / VIEWS_DIR
    folders = {}
    for i, pool in enumerate(manifest["pools"]):
        folders[i] = str(pool_view(pool["path"], views / f"{i:03d}-{_slug(pool['key'])}"))
    seq_len = int(manifest["seq_len"])
    size = token_size(manifest["dtype"])
    tok = manifest.get("tokenizer") or {}
    stages = []
    for st in manifest["stages"]:
        used = [(i, w) for i, w in enumerate(st["weights"]) if w > 0]
        stages.append(
            {
                "name": st["name"],
                "start_training_step": int(st["first_sample"]) // gbs + 1,
                "data": {
                    "dataset": {
                        "dataset_folder": [folders[i] for i, _ in used],
                        "dataset_weights": [float(w) for _, w in used],
                        "tokenizer_name": tokenizer_name(manifest),
                        "vocab_size": tok.get("vocab_size"),
                        "token_size_in_bytes": size,
                    },
                    "seed": int(manifest["spec"].get("seed", 0)),
                    "num_loading_workers": 1,
                },
            }
        )
    steps = int(manifest["num_samples"]) // gbs
    head = [
        f"# nanotron data for mixture {manifest['fingerprint']}: paste `tokens` and",
        "# `data_stages` into the trainer config (NanosetDatasetsArgs, DatasetStageArgs).",
        f"# Global batch {gbs} samples = micro_batch_size x batch_accumulation_per_replica x",
        f"# data-parallel size. {manifest['num_samples']} samples = {steps} steps.",
        f"# sequence_length {seq_len}: nanotron reads seq_len + 1 = {seq_len + 1} tokens per",
        "# sample, as Shardyard's records hold.",
        "# Each dataset_folder is a view of a pool (links to its shards, no copy): item i is",
        "# record i of the pool. Stage boundaries are Shardyard's, on whole global batches;",
        "# the order inside a stage is the Nanoset's (its own blend and seeded shuffle).",
    ]
    body = {
        "tokens": {
            "sequence_length": seq_len,
            "train_steps": steps,
            "micro_batch_size": gbs,
            "batch_accumulation_per_replica": 1,
        },
        "data_stages": stages,
    }
    return "\n".join(head) + "\n" + yaml.safe_dump(body, sort_keys=False)

"""The nanotron export: ``data_stages`` whose dataset folders datatrove's reader opens, stage
boundaries on whole global batches, and one YAML document per launch.

What nanotron's main branch does with it (read in its code, measured where it runs on a CPU
machine by ``bench/nanotron/measure.py``; results in bench/README.md, "nanotron"):

- Its ``run_train.py`` builds a data loader for the *last* stage of ``data_stages`` only and
  switches stages on a resume at ``start_training_step``. A fresh run with every stage in
  its config has no loader for the first stage, so the export writes one document per launch:
  launch k lists stages 1..k with ``train_steps`` at the end of stage k; launch k > 1 resumes
  from launch k-1's final checkpoint. ``start_training_step`` of a stage is
  ``first_sample / global_batch_size + 1`` (steps count from 1).
- Its reader (``TokenizedBytesFolderDataset``) subclasses datatrove's
  ``DatatroveFolderDataset``: each folder's ``*.ds`` files in name order (``shuffle_files``
  is false by default), each a flat token array cut into items of seq_len + 1 tokens
  (``token_size`` 2 reads uint16, 4 reads uint32), document ends for position ids from
  ``<file>.ds.index``. A pool shard's ``.bin`` is such an array, so the export makes one
  *view* folder per pool: ``pool-XXXXX.ds`` a symbolic link to the shard's ``.bin`` (never a
  copy), ``pool-XXXXX.ds.index`` the shard's document ends (uint64 token offsets, from the
  pool's segment arrays) and ``pool-XXXXX.ds.metadata`` (``tokenizer|token_size``, which
  ``NanosetDatasetsArgs`` checks against ``tokenizer_name``); a pool the mixture reads past
  its end also gets ``repeats.ds``, a copy of the records it reads after its first epoch,
  in the mixture's order. Read with datatrove's reader, item i of a view is record i of the
  pool, then the repeats. nanotron's subclass passes datatrove an ``eos_token_id`` (and
  more) that no datatrove release accepts: on a released datatrove nanotron cannot build
  the dataset (measured TypeError on 0.10.1).
- It blends a stage's folders with Megatron's greedy blending index, the one our ``blend``
  ordering uses, and reads each folder in order from what its earlier stages took: for a
  ``blend``-ordered mixture every sample is Shardyard's (measured with nanotron's
  ``BlendableDataset`` and sampler, datatrove's reader in place of nanotron's);
  ``nanotron_reads`` counts, per stage, the samples that are, for any mixture.
- ``tokenizer_name`` is handed to transformers' ``AutoTokenizer`` (and becomes the trainer's
  tokenizer when the config names none): an ``hf:`` pool's path or name works; a
  ``tiktoken:`` pool needs ``tokenizer=`` naming a Hugging Face tokenizer with the same ids.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from shardcore import atomic, blend
from shardcore import manifest as mf
from shardcore.errors import InputError
from shardcore.pack import Segments, load_segments

VIEWS_DIR = "exports/nanotron"


def token_size(dtype: str) -> int:
    """Bytes per token as datatrove reads them (2: uint16, 4: uint32)."""
    dt = np.dtype(dtype)
    if dt.itemsize not in (2, 4) or dt.kind not in "iu":
        raise InputError(f"dtype: datatrove reads 2- or 4-byte tokens, not {dt}")
    return dt.itemsize


def tokenizer_name(manifest: dict[str, Any], tokenizer: str | None = None) -> str:
    """The ``tokenizer_name`` written in the config and in ``.ds.metadata``: ``tokenizer``
    when given, else an ``hf:`` tokenizer's path or name (what nanotron hands to
    AutoTokenizer), else our tokenizer spec (which AutoTokenizer cannot load)."""
    if tokenizer is not None:
        if not str(tokenizer).strip() or "|" in str(tokenizer) or "\n" in str(tokenizer):
            raise InputError(
                f"tokenizer: {tokenizer!r} is not a Hugging Face tokenizer name or directory "
                "(datatrove's .ds.metadata line is 'name|token_size')"
            )
        return str(tokenizer)
    spec = str((manifest.get("tokenizer") or {}).get("spec") or "unknown")
    return spec[3:] if spec.startswith("hf:") else spec


def loads_with_auto_tokenizer(name: str) -> bool:
    """Whether ``name`` can name a tokenizer for transformers' AutoTokenizer: our own
    ``tiktoken:`` specs (and unknown ones) cannot."""
    return not (name.startswith("tiktoken:") or name == "unknown")


def document_ends(segments: Segments, width: int) -> np.ndarray:
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


REPEATS = "repeats"  # sorts after the shards' "pool-XXXXX": read after epoch 0


def pool_view(
    pool_path: str | os.PathLike,
    dest: str | os.PathLike,
    *,
    tokenizer: str | None = None,
    repeats: np.ndarray | None = None,
) -> Path:
    """A datatrove folder for a pool at ``dest`` (links, index and metadata files), made
    once: an existing complete view of the same pool, tokenizer name and repeats is kept.

    ``repeats``: records a mixture reads after the pool's first epoch, in its order; they
    are copied into ``repeats.ds`` (the only copy the export makes), so that item
    ``num_records + k`` of the view is ``repeats[k]``."""

    pool_path, dest = Path(pool_path).resolve(), Path(dest)
    manifest = mf.read_manifest(pool_path, kind="pool")
    size = token_size(manifest["dtype"])
    name = tokenizer_name(manifest, tokenizer)
    repeats = np.asarray(repeats if repeats is not None else [], dtype=np.int64)
    digest = hashlib.sha256(repeats.tobytes()).hexdigest()[:16] if repeats.size else "-"
    marker, stamp = dest / ".pool", f"{manifest['fingerprint']}|{name}|{digest}"
    if marker.is_file() and marker.read_text() == stamp:
        return dest
    width = int(manifest["seq_len"]) + 1
    bases = [Path(shard["prefix"]).name for shard in manifest["shards"]]
    if repeats.size and max(bases) >= REPEATS:
        raise InputError(f"{pool_path}: shard names sort after {REPEATS!r}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(dest) as tmp:
        tmp.mkdir()
        for base, shard in zip(bases, manifest["shards"], strict=True):
            tokens = int(shard["records"]) * width
            os.symlink(pool_path / f"{shard['prefix']}.bin", tmp / f"{base}.ds")
            seg = load_segments(pool_path / f"{shard['prefix']}.segments.npz")
            document_ends(seg, width).tofile(tmp / f"{base}.ds.index")
            (tmp / f"{base}.ds.metadata").write_text(f"{name}|{size}\n{tokens}\n{tokens}\n")
        if repeats.size:
            _write_repeats(pool_path, manifest, repeats, tmp / f"{REPEATS}.ds")
            tokens = int(repeats.size) * width
            (tmp / f"{REPEATS}.ds.metadata").write_text(f"{name}|{size}\n{tokens}\n{tokens}\n")
        (tmp / ".pool").write_text(stamp)
        if dest.exists():
            shutil.rmtree(dest)
    return dest


def _write_repeats(pool_path: Path, manifest: dict, repeats: np.ndarray, out: Path) -> None:
    """``repeats``' records back to back as uint16/uint32 (``out``) and their segment ends
    (``out.index``): every segment ends a document there, the next record being another."""

    width = int(manifest["seq_len"]) + 1
    dtype = np.dtype(manifest["dtype"])
    cumulative = np.asarray(manifest["cumulative_records"], dtype=np.int64)
    shard_of = np.searchsorted(cumulative, repeats, side="right") - 1
    rows = np.empty((repeats.size, width), dtype=dtype)
    ends: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * repeats.size
    for k, shard in enumerate(manifest["shards"]):
        here = np.flatnonzero(shard_of == k)
        if not here.size:
            continue
        local = repeats[here] - cumulative[k]
        data = np.memmap(pool_path / f"{shard['prefix']}.bin", dtype=dtype, mode="r")
        rows[here] = data.reshape(-1, width)[local]
        seg = load_segments(pool_path / f"{shard['prefix']}.segments.npz")
        off = np.asarray(seg.seg_record_offsets, dtype=np.int64)
        seg_end = seg.seg_start.astype(np.int64) + seg.seg_length
        for j, r in zip(here.tolist(), local.tolist(), strict=True):
            ends[j] = j * width + seg_end[off[r] : off[r + 1]]
    rows.astype(np.uint16 if dtype.itemsize == 2 else np.uint32).tofile(out)
    np.concatenate(ends).astype(np.uint64).tofile(f"{out}.index")


def pool_reads(mixture_dir: str | os.PathLike) -> list[np.ndarray]:
    """Per pool of a mixture, the records it reads, in schedule order."""
    mixture_dir = Path(mixture_dir)
    pool = np.load(mixture_dir / "schedule" / "pool.npy", mmap_mode="r")
    record = np.load(mixture_dir / "schedule" / "record.npy", mmap_mode="r")
    npools = len(mf.read_manifest(mixture_dir)["pools"])
    return [np.asarray(record[np.flatnonzero(pool == i)]) for i in range(npools)]


def view_items(num_records: int, reads: np.ndarray) -> np.ndarray:
    """The records of a pool's view, item by item: the pool in order, then the records the
    mixture reads after them (its repeats)."""
    return np.concatenate([np.arange(num_records, dtype=np.int64), reads[num_records:]])


def nanotron_reads(mixture_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Per stage, how many samples nanotron's main branch reads as the schedule records,
    and the first (stage-relative) that differs, or None.

    nanotron blends a stage's folders with Megatron's greedy blending index (the one
    ``shardcore.blend`` reproduces; measured equal in bench/nanotron) and reads each folder's
    items in order from the samples its earlier stages took from it; item k of a view is
    ``view_items(...)[k]``. Our ``blend`` ordering is that index; ``diversity`` and
    ``random`` permute a stage, and a mixture that continues an earlier one starts inside
    its pools."""

    mixture_dir = Path(mixture_dir)
    manifest = mf.read_manifest(mixture_dir)
    pool = np.load(mixture_dir / "schedule" / "pool.npy", mmap_mode="r")
    record = np.load(mixture_dir / "schedule" / "record.npy", mmap_mode="r")
    items = [
        view_items(int(p["num_records"]), reads)
        for p, reads in zip(manifest["pools"], pool_reads(mixture_dir), strict=True)
    ]
    taken = np.zeros(len(manifest["pools"]), dtype=np.int64)  # per pool, by earlier stages
    out = []
    for st in manifest["stages"]:
        a, n = int(st["first_sample"]), int(st["num_samples"])
        w = np.asarray(st["weights"], dtype=np.float64)
        used = np.flatnonzero(w > 0)
        di, si = blend.build_blending_indices(w[used], n)
        theirs_pool = used[np.asarray(di, dtype=np.int64)]
        theirs_record = np.full(n, -1, dtype=np.int64)
        for i in used.tolist():
            sel = np.flatnonzero(theirs_pool == i)
            at = taken[i] + np.asarray(si, dtype=np.int64)[sel]
            inside = at < items[i].size
            theirs_record[sel[inside]] = items[i][at[inside]]
            taken[i] += sel.size
        equal = (np.asarray(pool[a : a + n]) == theirs_pool) & (
            np.asarray(record[a : a + n]) == theirs_record
        )
        bad = np.flatnonzero(~equal)
        out.append(
            {
                "stage": st["name"],
                "samples": n,
                "equal": int(equal.sum()),
                "first_difference": int(bad[0]) if bad.size else None,
            }
        )
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", os.path.basename(str(text).rstrip("/")))[:60] or "pool"


def nanotron_config(
    mixture_dir: str | os.PathLike,
    *,
    global_batch_size: int | None = None,
    views_dir: str | os.PathLike | None = None,
    tokenizer: str | None = None,
    **_: Any,
) -> str:
    """nanotron ``tokens`` and ``data_stages`` for a mixture, one YAML document per launch
    (launch k: stages 1..k, ``train_steps`` at the end of stage k); writes the pools' view
    folders under ``views_dir`` (default: ``<mixture>/exports/nanotron``). ``tokenizer``: the
    Hugging Face tokenizer (hub name or local directory) nanotron loads for a pool tokenized
    with tiktoken; it must give the same ids."""
    mixture_dir = Path(mixture_dir).resolve()
    manifest = mf.read_manifest(mixture_dir, kind="mixture")
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
    name = tokenizer_name(manifest, tokenizer)
    views = Path(views_dir) if views_dir is not None else mixture_dir / VIEWS_DIR
    folders = {}
    for i, (pool, reads) in enumerate(zip(manifest["pools"], pool_reads(mixture_dir), strict=True)):
        dest = views / f"{i:03d}-{_slug(pool['key'])}"
        repeats = reads[int(pool["num_records"]) :]
        folders[i] = str(pool_view(pool["path"], dest, tokenizer=tokenizer, repeats=repeats))
    seq_len = int(manifest["seq_len"])
    size = token_size(manifest["dtype"])
    tok = manifest.get("tokenizer") or {}
    stages, ends = [], []
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
                        "tokenizer_name": name,
                        "vocab_size": tok.get("vocab_size"),
                        "token_size_in_bytes": size,
                    },
                    "seed": int(manifest["spec"].get("seed", 0)),
                    "num_loading_workers": 1,
                },
            }
        )
        ends.append((int(st["first_sample"]) + int(st["num_samples"])) // gbs)
    steps = int(manifest["num_samples"]) // gbs
    n = len(stages)
    head = [
        f"# nanotron data for mixture {manifest['fingerprint']}, for nanotron's main branch",
        "# (run_train.py; nanotron 0.4 on PyPI has no data_stages). Paste one document's",
        "# `tokens` and `data_stages` into the trainer config per launch.",
        f"# Global batch {gbs} samples = micro_batch_size x batch_accumulation_per_replica x",
        f"# data-parallel size. {manifest['num_samples']} samples = {steps} steps.",
        f"# sequence_length {seq_len}: nanotron reads seq_len + 1 = {seq_len + 1} tokens per",
        "# sample, as Shardyard's records hold.",
        "# Stages: run_train.py builds a loader for the last stage of its config only, so",
        f"# there is one document per launch ({n} here); launch k > 1 resumes from launch",
        "# k-1's final checkpoint (checkpoints.resume_checkpoint_path) and starts stage k at",
        "# its start_training_step = first sample / global batch + 1.",
        "# Each dataset_folder is a view of a pool (links to its shards, plus a copy of the",
        "# records read after its first epoch); datatrove's reader gives item i = record i,",
        "# then those repeats. nanotron blends a stage's folders with Megatron's greedy",
        "# blending index and reads each in order: per launch below, how many samples that",
        "# gives in Shardyard's order (measured equal: bench/README.md, nanotron).",
        "# NOT RUNNABLE AS IS: nanotron main's reader passes datatrove arguments that no",
        "# datatrove release accepts (TypeError on datatrove 0.10.1), and its training loop",
        "# asserts 'Only S3 paths are supported for consumption stats' for local folders",
        "# (a pool read again in a later stage continues only through that tracking).",
    ]
    if not loads_with_auto_tokenizer(name):
        head += [
            f"# tokenizer_name {name!r}: nanotron loads it with transformers' AutoTokenizer,",
            "# which cannot; export with --nanotron-tokenizer NAME_OR_DIR naming a Hugging",
            "# Face tokenizer that gives the same ids (and len(tokenizer) == vocab_size).",
        ]
    reads = nanotron_reads(mixture_dir)  # type: ignore[assignment]
    order = manifest["spec"].get("order", "blend")
    docs = []
    for k in range(n):
        when = (
            "a fresh run"
            if k == 0
            else f"resume from launch {k}'s final checkpoint (step {ends[k - 1]})"
        )
        body = {
            "tokens": {
                "sequence_length": seq_len,
                "train_steps": ends[k],
                "micro_batch_size": gbs,
                "batch_accumulation_per_replica": 1,
            },
            "data_stages": stages[: k + 1],
        }
        rd = reads[k]
        why = "continues an earlier mixture" if order == "blend" else f"is ordered {order!r}"
        if rd["first_difference"] is None:
            exact = f"# in Shardyard's order: all {rd['samples']} samples (as the schedule)"
        else:
            exact = (
                f"# NOT in Shardyard's order from sample {rd['first_difference']} of the stage "
                f"on: {rd['equal']} of {rd['samples']} samples equal (the mixture {why}; "
                "nanotron reads its own greedy blend of the pools in order)"
            )
        docs.append(
            f"# launch {k + 1} of {n}: {when}; steps {stages[k]['start_training_step']}"
            f"..{ends[k]} read stage {stages[k]['name']!r}\n{exact}\n"
            + yaml.safe_dump(body, sort_keys=False)
        )
    return "\n".join(head) + "\n" + "---\n".join(docs)

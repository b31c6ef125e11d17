"""The OLMo-core export: a YAML file whose ``dataset`` and ``data_loader`` sections load
unchanged into ai2-olmo-core's config classes (``Config.from_dict``, checked with 3.0).

Exact mode (a pool, a materialized mixture, or a mixture with its materialized copy):
``dataset`` is a ``NumpyFSLDatasetConfig`` over the artifact's ``.bin`` files in order.
OLMo-core concatenates its token arrays and cuts instances of ``sequence_length`` tokens;
every shard of ours holds whole records of seq_len + 1 tokens, so with ``sequence_length =
seq_len + 1`` instance i is exactly Shardyard's sample i (record i of a pool; sample i of
a mixture, in schedule order, stages included).

Record length versus sequence length: a Shardyard record is seq_len + 1 tokens, the inputs
and the shifted targets of one sample; OLMo-core shifts inside the instance (its labels are
the instance's own tokens moved by one), so its ``sequence_length`` is our record length.
To train at OLMo-core ``sequence_length`` L, build the pool with ``--seq-len L-1``.

Order: ``NumpyDataLoaderConfig.build`` always shuffles instances with its seed. Shardyard's
data is already globally shuffled and mixed, so build the loader with ``shuffle=False``
(``NumpyDataLoaderBase.wrap_numpy_dataset(dataset, shuffle=False, ...)``): then global
batch b holds samples [b*B, (b+1)*B), each data-parallel rank taking every world-size-th.

Shares mode (a mixture without a materialized copy): ``dataset.source_mixture_config`` is
a ``SourceMixtureDatasetConfig`` per stage (one YAML document each) with our shares.
OLMo-core then samples its own instances: the token shares hold, the order does not.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import yaml

from shardcore import manifest as mf
from shardcore.errors import InputError

DATASET_CLASS = "olmo_core.data.numpy_dataset.NumpyFSLDatasetConfig"
LOADER_CLASS = "olmo_core.data.data_loader.NumpyDataLoaderConfig"
MIXTURE_CLASS = "olmo_core.data.source_mixture.SourceMixtureDatasetConfig"
LIST_CLASS = "olmo_core.data.source_mixture.SourceMixtureList"
SOURCE_CLASS = "olmo_core.data.source_mixture.SourceMixtureConfig"


def olmo_dtype(dtype: str, vocab_size: int | None) -> str:
    """OLMo-core's unsigned dtype for our token dtype. int32 (vocabularies of 65,500 and
    more) reads as uint32: token ids are non-negative, so the bits are the same."""
    dt = np.dtype(dtype)
    if dt.kind == "u":
        return str(dt)
    if dt.kind == "i" and dt.itemsize in (4, 8):
        return f"uint{dt.itemsize * 8}"
    raise InputError(f"dtype: OLMo-core reads unsigned token arrays; {dt} has no counterpart")


def _tokenizer(manifest: dict[str, Any]) -> dict[str, Any]:
    tok = manifest.get("tokenizer") or {}
    if tok.get("vocab_size") is None or tok.get("eos_id") is None:
        raise InputError("tokenizer: the artifact's manifest lacks vocab_size or eos_id")
    return {
        "vocab_size": int(tok["vocab_size"]),
        "eos_token_id": int(tok["eos_id"]),
        # Pools pad a bucket's last record with EOS.
        "pad_token_id": int(tok["eos_id"]),
        "bos_token_id": None if tok.get("bos_id") is None else int(tok["bos_id"]),
        "identifier": tok.get("spec"),
    }


def _shard_paths(root: str, manifest: dict[str, Any]) -> list[str]:
    return [
        os.path.abspath(os.path.join(root, s["prefix"])) + ".bin"
        for s in manifest["shards"]
        if int(s.get("records", 1))
    ]


def _exact_source(path: str, materialized: str | None) -> tuple[dict[str, Any], str]:
    """(manifest, directory) of the artifact whose shards hold the samples in order."""
    manifest = mf.read_manifest(path, kind=("pool", "materialized", "mixture"))
    if manifest["kind"] != "mixture" or materialized is None:
        return manifest, path
    flat = mf.read_manifest(materialized)
    mf.check_kind(flat, "materialized", f"materialized: {materialized}")
    if manifest["fingerprint"] not in flat.get("parents", []):
        raise InputError(
            f"materialized: {materialized} is not a materialized copy of mixture "
            f"{manifest['fingerprint']}"
        )
    return flat, materialized


def _stages_comment(stages: list[dict[str, Any]], gbs: int) -> list[str]:
    out = []
    for st in stages:
        a, n = int(st["first_sample"]), int(st["num_samples"])
        where = f"samples [{a}, {a + n})"
        if a % gbs == 0:
            where += f", from step {a // gbs + 1}"
        out.append(f"#   stage {st['name']}: {where}")
    return out


def olmo_config(
    path: str | os.PathLike,
    *,
    global_batch_size: int | None = None,
    materialized: str | os.PathLike | None = None,
    work_dir: str | os.PathLike | None = None,
    **_: Any,
) -> str:
    """The OLMo-core YAML for a pool, a mixture or a materialized mixture (see the module
    docstring). ``global_batch_size`` is in samples (instances) per optimizer step."""
    path = os.fspath(path)
    gbs = int(global_batch_size or 1)
    if gbs < 1:
        raise InputError(f"global_batch_size: must be >= 1, got {global_batch_size}")
    manifest, root = _exact_source(path, None if materialized is None else os.fspath(materialized))
    record = int(manifest["seq_len"]) + 1
    tokenizer = _tokenizer(manifest)
    dtype = olmo_dtype(manifest["dtype"], tokenizer["vocab_size"])
    loader = {"_CLASS_": LOADER_CLASS, "global_batch_size": gbs * record, "seed": 0}
    if work_dir is not None:
        loader["work_dir"] = os.path.abspath(work_dir)
    if manifest.get("kind") == "mixture":
        return _shares(manifest, tokenizer, dtype, loader, gbs)
    num = int(manifest["num_records"])
    head = [
        f"# OLMo-core (ai2-olmo-core 3.0) data for {manifest['kind']} {manifest['fingerprint']}.",
        "# Load: NumpyFSLDatasetConfig.from_dict(cfg['dataset']).build() and",
        "#       NumpyDataLoaderConfig.from_dict(cfg['data_loader']).",
        f"# Exact: instance i is Shardyard sample i, for all {num} samples. sequence_length",
        f"# {record} is the record length (seq_len {record - 1} + 1): OLMo-core shifts inside",
        f"# the instance, so the model sees {record} tokens and predicts {record - 1}.",
        "# Order: build the loader with shuffle=False, e.g.",
        "#   NumpyDataLoaderBase.wrap_numpy_dataset(dataset, shuffle=False, collator=...,",
        f"#       global_batch_size={gbs * record}, ...)",
        f"# then step s (from 1) reads samples [(s-1)*{gbs}, s*{gbs}). NumpyDataLoaderConfig.build",
        "# shuffles by its seed: same data, OLMo-core's order, not Shardyard's.",
    ]
    if manifest.get("stages"):
        head.append(f"# Stages (global batch {gbs} samples):")
        head += _stages_comment(manifest["stages"], gbs)
    dataset = {
        "_CLASS_": DATASET_CLASS,
        "tokenizer": tokenizer,
        "paths": _shard_paths(root, manifest),
        "dtype": dtype,
        "sequence_length": record,
        "include_instance_metadata": False,
    }
    if work_dir is not None:
        dataset["work_dir"] = os.path.abspath(work_dir)
    body = {
        "dataset": dataset,
        "data_loader": loader,
        "shardyard": {
            "exact": True,
            "kind": manifest["kind"],
            "fingerprint": manifest["fingerprint"],
            "num_samples": num,
            "seq_len": record - 1,
            "samples_per_step": gbs,
            "shuffle": False,
        },
    }
    return "\n".join(head) + "\n" + yaml.safe_dump(body, sort_keys=False)


# --------------------------------------------------------------------------- shares


def _olmo_allocation(
    sources: list[list[int]],
    needed: list[int],
    requested_tokens: int,
    batch_tokens: int,
    record: int,
) -> list[int]:
    """Instances per source that OLMo-core 3.0's ``SourceMixtureDatasetConfig.build``
    selects, given each source's path token counts and its ``int(requested_tokens *
    target_ratio)`` (the same float operations, so the same numbers): per path
    ``ceil(tokens * take_ratio)`` (a take ratio above 1 in chunks of at most 1), floored to
    whole instances, then topped up to ``ceil(requested / batch) * batch / record``
    instances across all paths of all sources (an even base, then largest remainders)."""
    paths: list[tuple[int, int, int]] = []  # (source, tokens, max tokens)
    for s, (tokens, need) in enumerate(zip(sources, needed, strict=True)):
        take = need / sum(tokens)
        chunks = []
        if take > 1:
            remaining = take
            while remaining > 0:
                chunk = min(1.0, remaining)
                chunks.append(chunk)
                remaining -= chunk
        else:
            chunks = [take]
        for chunk in chunks:
            paths += [(s, int(math.ceil(a * chunk)), a) for a in tokens]
    steps = math.ceil(requested_tokens / batch_tokens)
    requested = steps * (batch_tokens // record)
    inst: list[int] = []
    rem: list[float] = []
    for _, path_tokens, cap in paths:
        base = min(path_tokens // record, cap // record)
        inst.append(base)
        rem.append((path_tokens % record) / record if base < cap // record else 0.0)
    more = requested - sum(inst)
    if more > 0:
        eligible = [i for i in range(len(inst)) if inst[i] < paths[i][2] // record]
        if eligible:
            base, _ = divmod(more, len(eligible))
            if base:
                for i in eligible:
                    inst[i] += min(base, paths[i][2] // record - inst[i])
            more = requested - sum(inst)
            if more > 0:
                cands = [(rem[i], i) for i in eligible if inst[i] < paths[i][2] // record]
                cands.sort(reverse=True)
                for _, i in cands[:more]:
                    inst[i] += 1
    out = [0] * len(sources)
    for (s, _, _), n in zip(paths, inst, strict=True):
        out[s] += n
    return out


def _ratio(tokens: int, requested: int) -> float:
    """A float r with ``int(requested * r) == tokens`` (OLMo-core's needed tokens)."""
    r = tokens / requested
    for _ in range(64):
        got = int(requested * r)
        if got == tokens:
            return r
        r = math.nextafter(r, math.inf if got < tokens else -math.inf)
    raise InputError(f"target_ratio: no float gives {tokens} of {requested} tokens")


def exact_shares(
    sources: list[list[int]], counts: list[int], record: int, batch_tokens: int
) -> tuple[list[float], list[int]]:
    """Target ratios (summing to 1 within OLMo-core's check) under which OLMo-core selects
    exactly ``counts`` instances per source, and the counts it then selects (equal to
    ``counts`` when a search over moves of needed tokens between sources finds them)."""
    requested = sum(counts) * record
    needed = [c * record for c in counts]

    def run(need: list[int]) -> list[int]:
        return _olmo_allocation(sources, need, requested, batch_tokens, record)

    def error(got: list[int]) -> int:
        return sum(abs(g - c) for g, c in zip(got, counts, strict=True))

    got = run(needed)
    # Move needed tokens from one source to another (their sum stays the requested total,
    # so the ratios keep summing to 1) while that brings the counts closer: a bounded
    # search (at most 2,000 moves per pair and round).
    span = 4 * record * max(len(t) for t in sources)
    step = max(1, span // 2000)
    for _ in range(4 * len(sources)):
        if error(got) == 0:
            break
        best = (error(got), needed, got)
        for i in range(len(sources)):
            for j in range(len(sources)):
                if i == j or not (got[i] > counts[i] or got[j] < counts[j]):
                    continue
                for delta in range(1, span, step):
                    if needed[i] - delta <= 0:
                        break
                    trial = list(needed)
                    trial[i] -= delta
                    trial[j] += delta
                    t_got = run(trial)
                    if error(t_got) < best[0]:
                        best = (error(t_got), trial, t_got)
                        if best[0] == 0:
                            break
                if best[0] == 0:
                    break
            if best[0] == 0:
                break
        if best[0] == error(got):
            break
        _, needed, got = best
    return [_ratio(n, requested) for n in needed], got


def _shares(
    manifest: dict[str, Any],
    tokenizer: dict[str, Any],
    dtype: str,
    loader: dict[str, Any],
    gbs: int,
) -> str:
    record = int(manifest["seq_len"]) + 1
    itemsize = np.dtype(dtype).itemsize
    docs = []
    for st in manifest["stages"]:
        sources: list[dict[str, Any]] = []
        counts: list[int] = []
        path_tokens: list[list[int]] = []
        for p, pool in enumerate(manifest["pools"]):
            n = int(st["samples_per_pool"][p])
            if n <= 0:
                continue
            paths = _shard_paths(pool["path"], mf.read_manifest(pool["path"]))
            sources.append(
                {"_CLASS_": SOURCE_CLASS, "source_name": str(pool["key"]), "paths": paths}
            )
            counts.append(n)
            # OLMo-core counts a path's tokens from its size.
            path_tokens.append([os.path.getsize(x) // itemsize for x in paths])
        # The schedule's samples per pool in this stage, as OLMo-core's selection rounds them.
        ratios, got = exact_shares(path_tokens, counts, record, gbs * record)
        requested = sum(counts) * record
        for src, r, tokens in zip(sources, ratios, path_tokens, strict=True):
            src["target_ratio"] = r
            # Room for the tokens the ratio asks of the pool (repeated if more than it has).
            src["max_repetition_ratio"] = max(
                1.0, math.ceil(int(requested * r) * 100 / sum(tokens)) / 100 + 0.01
            )
        exact_counts = got == counts
        head = [
            f"# OLMo-core (ai2-olmo-core 3.0) data for stage {st['name']} of mixture "
            f"{manifest['fingerprint']}.",
            "# SHARES ONLY: OLMo-core samples its own instances from these sources; the token",
            "# shares hold, Shardyard's order does not. For the exact order, materialize the",
            "# mixture and export with materialized=DIR (CLI: --materialized DIR).",
            f"# samples [{st['first_sample']}, {st['first_sample'] + st['num_samples']}) of the "
            f"mixture; sequence_length {record} = seq_len + 1 (OLMo-core shifts inside).",
            "# target_ratio: the stage's samples per pool, set so that OLMo-core's rounding "
            + ("selects exactly" if exact_counts else f"selects {got} (not exactly {counts}) of")
            + " them.",
        ]
        body = {
            "dataset": {
                "_CLASS_": DATASET_CLASS,
                "tokenizer": tokenizer,
                "dtype": dtype,
                "sequence_length": record,
                "include_instance_metadata": False,
                "source_mixture_config": {
                    "_CLASS_": MIXTURE_CLASS,
                    "source_list": {"_CLASS_": LIST_CLASS, "sources": sources},
                    "requested_tokens": int(st["num_samples"]) * record,
                    "global_batch_size": gbs * record,
                    "seed": int(manifest["spec"].get("seed", 0)),
                },
            },
            "data_loader": loader,
            "shardyard": {
                "exact": False,
                "kind": "mixture",
                "fingerprint": manifest["fingerprint"],
                "stage": st["name"],
                "num_samples": int(st["num_samples"]),
                "samples_per_source": dict(
                    zip((x["source_name"] for x in sources), got, strict=True)
                ),
                "samples_per_source_exact": exact_counts,
                "seq_len": record - 1,
                "samples_per_step": gbs,
            },
        }
        docs.append("\n".join(head) + "\n" + yaml.safe_dump(body, sort_keys=False))
    return "---\n".join(docs)

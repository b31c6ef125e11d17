"""Planning a pool build: check the inputs, count what the filter selects, split off the
validation documents, size the buckets; and ``build_pool``, which plans and runs locally."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shardcore import limits, props, storage, units
from shardcore import manifest as mf
from shardcore.errors import EmptySelectionError, InputError
from shardcore.pool import inputs as input_table
from shardcore.pool.inputs import TABLE_REL
from shardcore.pool.io import on_network_fs, release_memory
from shardcore.pool.layout import (
    KIND,
    SPLITS,
    STAGE,
    STAGINGS,
    merge_shape,
    merge_units,
    needs_merge,
    shuffle_module,
    val_seed,
)
from shardcore.pool.select import Selection, read_selection, select_all
from shardcore.pool.select import load_tokenized as _load_tokenized


def plan_pool(
    tokenized: list[str],
    out: str,
    *,
    seq_len: int,
    filter: str | None = None,
    shuffle: str = "exact",
    seed: int = 0,
    memory: int = 1 << 30,
    val_fraction: float = 0.0,
    bos: bool = False,
    shard_size: int = 64 << 20,
    shuffle_options: dict | None = None,
    staging: str = "auto",
    allow_empty: bool = False,
    annotations: list[str] | None = None,
    selection: str | None = None,
) -> units.Plan:
    """The plan of a pool build: phase 1 one unit per input shard, then the merge's levels
    (the last one unit per bucket group), then one unit per bucket (training buckets, then validation buckets). Reads the sidecars once to count
    the selected documents (errors in the filter surface here, before any work).

    ``staging`` is what pass 1 writes for pass 2: ``"references"`` (each document's input
    row, a few bytes; pass 2 gathers the tokens from the memory-mapped inputs),
    ``"tokens"`` (a copy of the tokens grouped by bucket, read sequentially by pass 2: for
    inputs where random reads are slow) or ``"auto"`` (references unless an input is on a
    network or FUSE file system).

    A filter that selects no document is an error unless ``allow_empty``.

    ``annotations`` (annotation directories of the inputs) are joined: the filter, the
    pool's documents and everything that reads their properties see their columns as
    ``<annotator>.<column>`` (``shardcore.annotate.join``); their fingerprints enter the
    pool's.

    ``selection``: a directory where a planning job's units wrote what the filter selects
    of each group of inputs (``shardcore.pool.select``), read instead of the sidecars: the
    same plan, made without reading a document."""

    module = shuffle_module(shuffle)
    if staging not in STAGINGS + ("auto",):
        raise InputError(f"staging must be auto, {' or '.join(STAGINGS)}; got {staging!r}")
    if not tokenized:
        raise InputError("a pool needs at least one tokenized source")
    params = _checked_params(
        seq_len=seq_len,
        filter=filter,
        shuffle=shuffle,
        seed=seed,
        memory=memory,
        val_fraction=val_fraction,
        bos=bos,
        shard_size=shard_size,
        shuffle_options=shuffle_options,
    )
    loaded, tokenizer, dtype = _load_sources(tokenized)
    if selection is None:
        selected = select_all(
            loaded, filter, annotations or [], val_fraction=params["val_fraction"], bos=bos
        )
    else:
        selected = read_selection(selection, loaded, annotations or [])
    if bos and tokenizer.get("bos_id") is None:
        raise InputError(f"bos=True but tokenizer {tokenizer.get('spec')!r} has no BOS token")
    if selected.joined_fps:  # (absent otherwise: a pool without annotations keeps its fingerprint)
        params["annotations"] = selected.joined_fps
    if not allow_empty and not any(sum(i["docs"]) for i in selected.inputs):
        _refuse_empty(loaded, filter)
    splits = _plan_splits(selected, module=module, params=params, itemsize=np.dtype(dtype).itemsize)
    meta = {"splits": splits, "tokenizer": tokenizer, "dtype": str(np.dtype(dtype))}
    return _assemble(out, params, selected, meta, staging=staging, annotations=annotations or [])


def _checked_params(
    *, seed: int, memory: int, shuffle_options: dict | None, **given: object
) -> dict:
    """The build's parameters (what enters its fingerprint), every number checked before
    anything is read or written (``shardcore.limits``)."""
    seq_len = limits.seq_len(given["seq_len"])
    seed = limits.seed(seed)
    val_fraction = limits.val_fraction(given["val_fraction"])
    memory = limits.size("memory", memory, limits.MIN_MEMORY)
    shard_size = limits.size("shard_size", given["shard_size"])
    return {
        "seq_len": int(seq_len),
        "filter": given["filter"],
        "shuffle": given["shuffle"],
        "seed": int(seed),
        "memory": int(memory),
        "val_fraction": float(val_fraction),
        "bos": bool(given["bos"]),
        "shard_size": int(shard_size),
        "shuffle_options": _checked_options(shuffle_options),
    }


def _refuse_empty(loaded: list[tuple[str, dict[str, Any]]], filter: str | None) -> None:
    total = sum(int(sh["documents"]) for _, d in loaded for sh in d["shards"])
    raise EmptySelectionError(
        f"filter {filter!r} selects none of the {total:,} documents of "
        f"{len(loaded)} tokenized source(s)"
    )


def _assemble(
    out: str,
    params: dict[str, Any],
    selected: Selection,
    meta: dict[str, Any],
    *,
    staging: str,
    annotations: list[str],
) -> units.Plan:
    """The plan's units (pass 1, the merge's levels, pass 2), its meta and its inputs'
    table, from the selection and the splits planned (``meta``: splits, tokenizer, dtype).
    Frees the selection's inputs before the units run."""
    sources, inputs, splits = selected.sources, selected.inputs, meta["splits"]
    tokenizer = meta["tokenizer"]
    num_buckets = sum(split["num_buckets"] for split in splits.values())
    group = _group_buckets(inputs, num_buckets, selected.meta_bytes, params["memory"])
    phase1 = [{"id": f"assign-{i:05d}", "input": i} for i in range(len(inputs))]
    phase2 = [
        {"id": f"{split}-bucket-{b:05d}", "split": split, "bucket": b}
        for split in SPLITS
        for b in range(splits[split]["num_buckets"])
    ]
    if staging == "auto":
        staging = "tokens" if any(on_network_fs(s["path"]) for s in sources) else "references"
    levels, fan_in = merge_shape(len(inputs))
    if not needs_merge(len(inputs), num_buckets):
        levels, fan_in = 0, len(inputs)  # pass 2 reads the pass-1 files themselves
    annotation_dirs = [storage.resolve(a) for a in annotations]
    table_file, layout = input_table.encode(inputs, annotation_dirs)
    meta = {
        # Not parameters either (the output bytes do not depend on them): how many
        # consecutive buckets one last-level merge unit gathers, and the merge tree's
        # depth and fan-in (shardcore.pool.merge; 0 levels: no merge, ``needs_merge``).
        "group_buckets": group,
        "merge_levels": levels,
        "merge_fan_in": fan_in,
        # Not a parameter: both stagings write the same bytes (same assignment, same
        # permutation, same packing code), so the mode is kept out of the fingerprint and
        # the manifest, like the number of workers. A rebuild with the other mode is the
        # same artifact.
        "staging": staging,
        "props_type": props.type_to_text(selected.props_type),
        "sources": sources,
        # The inputs' table is a file of the plan (``shardcore.pool.inputs``): the header
        # every unit loads stays the same size whatever the number of inputs.
        "inputs_table": layout,
        "splits": splits,
        "tokenizer": tokenizer,
        "dtype": meta["dtype"],
        "pad_id": int(tokenizer["eos_id"]),
        "bos_id": tokenizer.get("bos_id"),
    }
    if annotation_dirs:
        meta["annotation_dirs"] = annotation_dirs
    meta["artifacts"] = [s["path"] for s in sources if storage.is_remote(s["path"])] + [
        storage.resolve(a) for a in annotations if storage.is_remote(a)
    ]
    del inputs
    selected.inputs = []  # the only other reference to the inputs: freed with them
    release_memory()  # what reading every sidecar took, before the units run
    plan = units.Plan(STAGE, storage.resolve(out), params, [], meta, files={TABLE_REL: table_file})
    merges = [merge_units(plan, level) for level in range(1, levels + 1)]
    plan.phases = [phase1, *merges, phase2]
    return plan


def _checked_options(shuffle_options: dict | None) -> dict:
    """The shuffle's options, each number within ``shardcore.limits``' range."""
    options = dict(shuffle_options or {})
    for key, value in options.items():
        if isinstance(value, int | float):  # bool too: refused as not an integer
            options[key] = limits.check_int(f"shuffle_options.{key}", value, 1, limits.MAX_COUNT)
    return options


def _load_sources(tokenized: list[str]) -> tuple[list[tuple[str, dict[str, Any]]], Any, Any]:
    """(path, manifest) of each tokenized source, and their one tokenizer and dtype (those
    of the first; a source with another tokenizer is refused)."""
    loaded: list[tuple[str, dict[str, Any]]] = []
    tokenizer: Any = None
    dtype: Any = None
    for path in tokenized:
        path = storage.resolve(path)
        data = _load_tokenized(path)
        if tokenizer is None:
            tokenizer, dtype = data["tokenizer"], data["dtype"]
        elif data["tokenizer"].get("fingerprint") != tokenizer.get("fingerprint"):
            raise InputError(
                f"{path}: tokenizer {data['tokenizer'].get('spec')!r} differs from the first "
                f"source's {tokenizer.get('spec')!r}; a pool has one tokenizer"
            )
        loaded.append((path, data))
    return loaded, tokenizer, dtype


def _plan_splits(
    selected: Selection, *, module: Any, params: dict[str, Any], itemsize: int
) -> dict[str, dict[str, Any]]:
    """Each split's documents, tokens, buckets (numbered on from the previous split's),
    seed and fingerprint."""
    inputs, sources = selected.inputs, selected.sources
    options = params["shuffle_options"]
    parents = [s["fingerprint"] for s in sources]
    contents = [s["content"] for s in sources]
    memory, shard_size, seed = params["memory"], params["shard_size"], params["seed"]
    splits: dict[str, dict[str, Any]] = {}
    first_bucket = 0
    for k, split in enumerate(SPLITS):
        counts = np.array([i["docs"][k] for i in inputs], dtype=np.int64)
        total_tokens = sum(i["tokens"][k] for i in inputs)
        total_bytes = total_tokens * itemsize
        min_buckets = max(-(-total_bytes // max(1, memory // 4)), -(-total_bytes // shard_size), 1)
        n_buckets = module.num_buckets(counts, min_buckets, **options) if counts.sum() else 0
        splits[split] = {
            # The selected documents and tokens (per input: the input table's columns).
            "documents": int(counts.sum()),
            "tokens": int(total_tokens),
            "num_buckets": int(n_buckets),
            "first_bucket": first_bucket,
            "seed": int(seed) if split == "train" else val_seed(seed),
            "fingerprint": mf.fingerprint(
                KIND, parents=parents, params={**params, "split": split, "inputs": contents}
            ),
        }
        first_bucket += n_buckets
    return splits


# Per document, the columns pass 1 adds to its sidecar row (source, source_shard,
# source_row, and the scratch columns: key, bucket, input, offset).
_ADDED_BYTES = 4 + 4 + 8 + 8 + 8 + 4 + 8


def _group_buckets(inputs: list[dict], num_buckets: int, meta_bytes: int, memory: int) -> int:
    """Buckets per merge group: as many as keep a group's metadata within a 32nd of the
    budget (measured: a merge unit's RSS grows by about 5x the metadata's Arrow size,
    mapped from the pass-1 files, gathered and sorted by Arrow's take). Fewer, larger groups
    mean fewer reads of the pass-1 files (inputs x groups)."""
    docs = sum(sum(i["docs"]) for i in inputs)
    if not num_buckets or not docs:
        return 1
    per_bucket = (meta_bytes + docs * _ADDED_BYTES) / num_buckets
    return int(max(1, min(num_buckets, (memory // 32) // max(1.0, per_bucket))))


def build_pool(
    tokenized: list[str],
    out: str,
    *,
    workers: int = 1,
    progress: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Plan and run a pool build locally; returns the pool's manifest. ``progress(unit,
    stats)`` is called as units finish."""
    plan = plan_pool(tokenized, out, **kwargs)
    return units.run_local(plan, workers=workers, on_unit_done=progress)

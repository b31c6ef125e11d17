"""What a pool's filter selects of each input shard, read in one process or as units.

Planning a pool reads every input shard's sidecar through the filter: per input shard, the
documents it selects, split into training and validation documents and counted with their
tokens, and the selected metadata's Arrow size (which sizes the merge's groups). That is
about 2 us per document. ``select_all`` does it in the process that plans (a request, the
command line); ``deferred`` makes it a planning job's preparatory phases
(``shardcore.planning``), over groups of ``GROUP_INPUTS`` consecutive inputs (the inputs
are the sources' shards in order, flattened):

1. ``schema-NNNNN``, one unit per group: the properties' type over its sidecars (their
   footers), returned as text in the unit's stats;
2. ``props-type``, one unit: the one type over every input (so that a property absent from
   one source reads NULL there), the joined annotations' columns added and their names
   checked, written to ``select/props_type.json``;
3. ``select-NNNNN``, one unit per group: its inputs read through the filter with that type,
   each one's counts written to ``select/select-NNNNN.json`` (deterministic bytes: a rerun
   writes the same file).

The plan unit then calls ``plan_pool(..., selection=<the planning's select/>)``, which
assembles the same ``Selection`` from the groups' files (``read_selection``) instead of
reading the sidecars: the plan is the one ``plan_pool`` makes directly, byte for byte.
Unifying types is associative and each group's type is the union of its sidecars', so the
type is the one ``select_all`` finds. Groups are sized by inputs, not documents: a group's
unit costs its inputs' documents, a few hundred shards' worth.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardcore import atomic, filters, limits, planning, props, storage, units
from shardcore import manifest as mf
from shardcore.annotate import join as annotation_join
from shardcore.errors import ManifestError
from shardcore.pool.layout import column, val_mask
from shardcore.storage import artifact_cache

# Input shards per group (one schema and one selection unit each).
GROUP_INPUTS = 256
DIR = "select"
TYPE_FILE = f"{DIR}/props_type.json"
FORMAT = 1
PLANNER = "shardcore.pool.plan_pool"


def load_tokenized(path: str) -> dict[str, Any]:
    """A pool input's manifest (a tokenized source's), checked for what planning reads."""
    data = mf.read_manifest(path, kind="tokenized")
    for key in ("fingerprint", "tokenizer", "dtype", "shards"):
        if key not in data:
            raise ManifestError(f"{path}: tokenized manifest has no {key!r}")
    return data


@dataclass
class Selection:
    """What the filter selects of every input shard (``select_all``, ``read_selection``)."""

    sources: list[dict[str, Any]]  # per source: path, fingerprint, content digest
    inputs: list[dict[str, Any]]  # per input shard: the documents and tokens of each split
    meta_bytes: int  # the selected documents' metadata, for sizing the merge's groups
    props_type: Any  # the one type of the properties over every input
    joined_fps: Any  # the joined annotations' fingerprints (empty: none)


def _source_entry(path: str, data: dict[str, Any]) -> dict[str, Any]:
    # "content": what the input's bytes are (its checksums), for the fingerprint and for
    # pass 1 to check that the manifest it verifies against is the one planned with.
    return {"path": path, "fingerprint": data["fingerprint"], "content": mf.content_digest(data)}


def _sidecar(local: str, shard: dict[str, Any]) -> str:
    return f"{os.path.join(local, shard['prefix'])}.docs.parquet"


def _count_shard(
    local: str,
    path: str,
    data: dict[str, Any],
    shard: dict[str, Any],
    *,
    how: dict[str, Any],
    joined: list[dict[str, Any]],
) -> tuple[list[int], list[int], int]:
    """One input shard through the filter: the selected documents and tokens per split
    (training, validation) and their metadata's Arrow size. ``how``: the filter, the
    properties' type, the validation fraction and whether a BOS is prepended; ``joined``:
    the annotation files joined to it (local paths)."""
    sidecar = f"{storage.join(path, shard['prefix'])}.docs.parquet"
    rows, table = filters.select_shard(
        _sidecar(local, shard), how["filter"], how["props_type"], joined
    )
    del rows
    is_val = val_mask(data["fingerprint"], column(table, "doc_id", sidecar), how["val_fraction"])
    n_tokens = column(table, "n_tokens", sidecar).astype(np.int64) + int(how["bos"])
    docs = [int((~is_val).sum()), int(is_val.sum())]
    tokens = [int(n_tokens[~is_val].sum()), int(n_tokens[is_val].sum())]
    return docs, tokens, int(table.nbytes)


def _local_path(path: str, annotations: list[str]) -> str:
    """``path`` (a file of one of ``annotations``) in its checked local copy when remote."""
    for a in annotations:
        url = storage.resolve(a)
        if storage.is_remote(url) and path.startswith(url.rstrip("/") + "/"):
            return str(artifact_cache.local_artifact(url)) + path[len(url.rstrip("/")) :]
    return path


def _joined_type(
    props_type: Any, annotations: list[str], loaded: list[tuple[str, dict[str, Any]]]
) -> tuple[Any, Any, Any]:
    """The properties' type with the joined annotations' columns, each input shard's
    annotation files and the annotations' fingerprints (``annotation_join.shard_specs``)."""
    joins, joined_type, joined_fps = annotation_join.shard_specs(annotations, loaded)
    annotation_join.check_names(props_type, joined_type)
    if joined_fps:
        props_type = props.unify(props_type, joined_type)
    return props_type, joins, joined_fps


def select_all(
    loaded: list[tuple[str, dict[str, Any]]],
    filter: str | None,
    annotations: list[str],
    *,
    val_fraction: float,
    bos: bool,
) -> Selection:
    """Read each input shard's sidecar once, in this process: the documents the filter
    selects, split into training and validation documents, counted with their tokens."""
    # Inputs on object storage are planned (and later read by the units) from checked
    # local copies; the plan names them by URL (meta["artifacts"], see shardcore.units).
    local = {path: artifact_cache.local_artifact(path) for path, _ in loaded}
    # One type for each property over every input, so that a filter reads a property
    # absent from one source as NULL there and every pass writes the same schema.
    props_type = filters.sidecars_props_type(
        [_sidecar(local[p], sh) for p, d in loaded for sh in d["shards"]]
    )
    props_type, joins, joined_fps = _joined_type(props_type, annotations, loaded)
    how = {"filter": filter, "props_type": props_type, "val_fraction": val_fraction, "bos": bos}
    sources: list[dict[str, Any]] = []
    inputs: list[dict[str, Any]] = []
    meta_bytes = 0
    for s, (path, data) in enumerate(loaded):
        sources.append(_source_entry(path, data))
        for j, shard in enumerate(data["shards"]):
            joined = [{**a, "path": _local_path(a["path"], annotations)} for a in joins[s][j]]
            docs, tokens, nbytes = _count_shard(
                local[path], path, data, shard, how=how, joined=joined
            )
            meta_bytes += nbytes
            inputs.append(_input(s, j, shard, docs, tokens, joins[s][j]))
    return Selection(sources, inputs, meta_bytes, props_type, joined_fps)


def _input(
    s: int, j: int, shard: dict[str, Any], docs: list[int], tokens: list[int], joined: list
) -> dict[str, Any]:
    return {
        "source": s,
        "shard": j,
        "rel": shard["prefix"],
        "docs": docs,
        "tokens": tokens,
        **({"annotations": joined} if joined else {}),
    }


def read_selection(
    directory: str, loaded: list[tuple[str, dict[str, Any]]], annotations: list[str]
) -> Selection:
    """The ``Selection`` of ``select_all`` from what the selection units wrote in
    ``directory`` (their groups' files, in order, covering every input)."""
    with open(os.path.join(directory, os.path.basename(TYPE_FILE))) as f:
        props_type = props.type_from_text(json.load(f)["props_type"])
    _, joins, joined_fps = _joined_type(props.unify_all([]), annotations, loaded)
    flat = [
        (s, j, shard)
        for s, (_, data) in enumerate(loaded)
        for j, shard in enumerate(data["shards"])
    ]
    inputs: list[dict[str, Any]] = []
    meta_bytes = 0
    group = 0
    while len(inputs) < len(flat) or group == 0:
        name = os.path.join(directory, f"select-{group:05d}.json")
        with open(name) as f:
            found = json.load(f)
        lo, hi = found["lo"], found["hi"]
        if lo != len(inputs) or hi > len(flat) or len(found["docs"]) != hi - lo:
            raise ManifestError(f"{name}: inputs [{lo}, {hi}) are not the next of {len(flat)}")
        for k, (docs, tokens) in enumerate(zip(found["docs"], found["tokens"], strict=True)):
            s, j, shard = flat[lo + k]
            inputs.append(_input(s, j, shard, docs, tokens, joins[s][j]))
        meta_bytes += found["meta_bytes"]
        group += 1
    sources = [_source_entry(path, data) for path, data in loaded]
    return Selection(sources, inputs, meta_bytes, props_type, joined_fps)


# ------------------------------------------------------------ the planning job's units


def deferred(
    *, kwargs: dict[str, Any], out: str, what: str, group_inputs: int = GROUP_INPUTS
) -> units.Plan:
    """The planning job of a pool (``planning.deferred`` with ``plan_pool`` as planner and
    ``kwargs`` its arguments) whose reading of the sidecars runs as units over groups of
    ``group_inputs`` input shards. Reads the inputs' manifests (their headers) to count
    their shards."""
    group_inputs = limits.check_int("group_inputs", group_inputs, 1, limits.MAX_COUNT)
    counts = [mf.num_shards(load_tokenized(storage.resolve(p))) for p in kwargs["tokenized"]]
    spans = _groups(counts, group_inputs)
    phases = [
        [{"id": f"schema-{k:05d}", "step": "schema", **span} for k, span in enumerate(spans)],
        [{"id": "props-type", "step": "unify", "groups": len(spans)}],
        [{"id": f"select-{k:05d}", "step": "select", **span} for k, span in enumerate(spans)],
    ]
    return planning.deferred(
        planner=PLANNER,
        kwargs=kwargs,
        out=out,
        what=what,
        prepare=planning.Prepared(steps=f"{__name__}.STEPS", phases=phases),
    )


def _groups(counts: list[int], size: int) -> list[dict[str, Any]]:
    """Consecutive ranges of ``size`` inputs (the sources' shards in order; at least one
    range, empty when there is no input): each range's bounds and its inputs as spans
    ``[source, first shard, end shard]``."""
    total = sum(counts)
    starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    out = []
    for lo in range(0, max(total, 1), size):
        hi = min(lo + size, total)
        spans = []
        for s, count in enumerate(counts):
            first, end = max(lo - int(starts[s]), 0), min(hi - int(starts[s]), count)
            if first < end:
                spans.append([s, first, end])
        out.append({"lo": lo, "hi": hi, "spans": spans})
    return out


def _loaded(kwargs: dict[str, Any], spans: list[list[int]] | None = None) -> list:
    """(path, manifest) of the pool's inputs (``spans``: only those these spans read)."""
    paths = [storage.resolve(p) for p in kwargs["tokenized"]]
    wanted = range(len(paths)) if spans is None else [s for s, _, _ in spans]
    return [(paths[s], load_tokenized(paths[s])) for s in wanted]


def _run(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    return _RUNS[unit["step"]](plan, unit)


def _run_schema(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    """The properties' type over the group's sidecars (their footers), as text."""
    sidecars = []
    for (path, data), (_, first, end) in zip(
        _loaded(plan.params["kwargs"], unit["spans"]), unit["spans"], strict=True
    ):
        local = artifact_cache.local_artifact(path)
        sidecars += [_sidecar(local, data["shards"][j]) for j in range(first, end)]
    found = filters.sidecars_props_type(sidecars)
    return {"props_type": props.type_to_text(found), "inputs": unit["hi"] - unit["lo"]}


def _run_unify(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    """The one type over every input, with the joined annotations' columns."""
    kwargs = plan.params["kwargs"]
    types = []
    for k in range(unit["groups"]):
        done = units.unit_result(plan.out, f"schema-{k:05d}")
        if done is None:
            raise RuntimeError(f"{plan.out}: unit schema-{k:05d} has not run")
        types.append(props.type_from_text(done["props_type"]))
    props_type = props.unify_all(t for t in types if t is not None)
    props_type, _, _ = _joined_type(props_type, kwargs.get("annotations") or [], _loaded(kwargs))
    text = json.dumps({"format": FORMAT, "props_type": props.type_to_text(props_type)})
    os.makedirs(os.path.join(plan.out, DIR), exist_ok=True)
    atomic.write_text(os.path.join(plan.out, TYPE_FILE), text)
    return {"groups": unit["groups"]}


def _run_select(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    """The group's inputs through the filter: each one's counts, written to its file."""
    kwargs = plan.params["kwargs"]
    annotations = list(kwargs.get("annotations") or [])
    with open(os.path.join(plan.out, TYPE_FILE)) as f:
        props_type = props.type_from_text(json.load(f)["props_type"])
    how = {
        "filter": kwargs.get("filter"),
        "props_type": props_type,
        "val_fraction": float(limits.val_fraction(kwargs.get("val_fraction", 0.0))),
        "bos": bool(kwargs.get("bos", False)),
    }
    by_fp = annotation_join.by_tokenized(annotations)
    files = {path: mf.files_by_path(m) for found in by_fp.values() for path, m in found}
    docs, tokens, meta_bytes = [], [], 0
    for (path, data), (_, first, end) in zip(
        _loaded(kwargs, unit["spans"]), unit["spans"], strict=True
    ):
        local = artifact_cache.local_artifact(path)
        found = by_fp.get(data["fingerprint"], [])
        for j in range(first, end):
            joined = []
            for a, m in found:
                entry = annotation_join.shard_file(a, m, j, files[a])
                joined.append({**entry, "path": _local_path(entry["path"], annotations)})
            d, t, nbytes = _count_shard(
                local, path, data, data["shards"][j], how=how, joined=joined
            )
            docs.append(d)
            tokens.append(t)
            meta_bytes += nbytes
    record = {
        "format": FORMAT,
        "lo": unit["lo"],
        "hi": unit["hi"],
        "docs": docs,
        "tokens": tokens,
        "meta_bytes": meta_bytes,
    }
    os.makedirs(os.path.join(plan.out, DIR), exist_ok=True)
    text = json.dumps(record, sort_keys=True)
    atomic.write_text(os.path.join(plan.out, DIR, f"{unit['id']}.json"), text)
    return {"inputs": unit["hi"] - unit["lo"], "selected": sum(sum(d) for d in docs)}


_RUNS = {"schema": _run_schema, "unify": _run_unify, "select": _run_select}


def _reads(plan: units.Plan, unit: dict[str, Any]) -> list[str]:
    """What a unit reads of the planning's output: a schema unit nothing, the unify unit
    the schema units' markers, a selection unit the type, the plan unit every group's
    file and the type."""
    step = unit.get("step")
    if step == "schema":
        return []
    if step == "unify":
        return [units.marker_key(f"schema-{k:05d}") for k in range(unit["groups"])]
    if step == "select":
        return [TYPE_FILE]
    return [TYPE_FILE] + [f"{DIR}/{u['id']}.json" for u in plan.phases[-2]]


STEPS = planning.Steps(run=_run, reads=_reads, keyword="selection", directory=DIR)

"""Annotations read where properties are read: a pool (or a filter) that joins annotations
sees each one's columns as ``<annotator>.<column>`` (``lang_id.lang``, ``minhash.dup_rank``,
``pii.emails``), exactly as it sees a nested user property.

The rule: an annotation's columns become one struct property named after its annotator,
added to the documents' ``props`` (``shardcore.props``) row by row (annotation row i is
sidecar row i of the same tokenized shard; their ``doc_id`` must agree). Each column keeps
the type its annotator declares (``lang_id.lang`` string, ``pii.emails`` int32,
``minhash.exact_hash`` uint64...); across the inputs of a pool the module's unification
rule applies, so an input without an annotation of that annotator reads NULL there.
A pool joins at most one annotation per annotator and tokenized source, and an
annotator's name may not also be a user property of the inputs (refused, naming both).

Each annotation file joined is checked against its manifest's size and checksum first.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from shardcore import props, storage
from shardcore.annotate.artifact import DOC_ID
from shardcore.errors import InputError, ManifestError
from shardcore.manifest import check_kind, file_checksum, files_by_path, read_manifest
from shardcore.storage import artifact_cache

KIND = "annotation"


def load(path: str) -> dict[str, Any]:
    """An annotation's manifest (read from a checked local copy when remote)."""

    local = artifact_cache.local_artifact(path) if storage.is_remote(path) else path
    m = read_manifest(local)
    check_kind(m, KIND, path)
    return m


def struct_type(path: str, manifest: dict[str, Any]) -> pa.DataType:
    """The struct an annotation adds to ``props``: its columns with the types its files
    hold (those its annotator declares)."""
    import pyarrow.parquet as pq

    if manifest["shards"]:
        local = artifact_cache.local_artifact(path) if storage.is_remote(path) else path
        schema = pq.read_schema(os.path.join(local, f"{manifest['shards'][0]['prefix']}.parquet"))
        return pa.struct([f for f in schema if f.name != DOC_ID])
    fields = [f for f in manifest["annotator"]["fields"] if f["name"] != DOC_ID]
    return pa.struct([pa.field(f["name"], pa.type_for_alias(f["type"])) for f in fields])


def by_tokenized(annotations: Sequence[str]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """The annotations (path, manifest), by the fingerprint of the tokenized source each
    annotates, in the order given."""
    by_fp: dict[str, list[tuple[str, dict]]] = {}
    for path in annotations:
        path = storage.resolve(path)
        m = load(path)
        by_fp.setdefault(m["tokenized"]["fingerprint"], []).append((path, m))
    return by_fp


def shard_file(path: str, manifest: dict[str, Any], shard: int, files: Any) -> dict[str, Any]:
    """What a pool joins of shard ``shard`` of the annotation at ``path`` (``files``: its
    manifest's ``files_by_path``)."""
    s = manifest["shards"][shard]
    rel = f"{s['prefix']}.parquet"
    return {
        "name": manifest["annotator"]["name"],
        "path": storage.join(path, rel),
        "size": int(files[rel]["size"]),
        "xxh3": files[rel]["xxh3"],
        "documents": int(s["documents"]),
    }


def shard_specs(
    annotations: Sequence[str], tokenized: Sequence[tuple[str, dict[str, Any]]]
) -> tuple[list[list[list[dict[str, Any]]]], pa.DataType, list[str]]:
    """For a pool's inputs ``tokenized`` ((path, manifest) in order) and the annotations it
    joins: per input, per shard, the files to join (``[{"name", "path", "size", "xxh3"}]``);
    the struct type they add to ``props``; and the annotations' fingerprints (sorted). An
    annotation of no input, or two of one annotator on one input, is refused."""
    by_fp = by_tokenized(annotations)
    inputs = {d["fingerprint"] for _, d in tokenized}
    for fp, found in by_fp.items():
        if fp not in inputs:
            raise InputError(
                f"{found[0][0]}: annotates tokenized source {fp}, which is not an input of the pool"
            )
    fields: dict[str, pa.DataType] = {}
    per_input: list[list[list[dict[str, Any]]]] = []
    for tpath, data in tokenized:
        names: set[str] = set()
        shards: list[list[dict[str, Any]]] = [[] for _ in data["shards"]]
        for apath, m in by_fp.get(data["fingerprint"], []):
            name = m["annotator"]["name"]
            if name in names:
                raise InputError(
                    f"{tpath}: the pool joins two {name!r} annotations of it; choose one"
                )
            names.add(name)
            t = struct_type(apath, m)
            fields[name] = props.unify(fields[name], t) if name in fields else t
            files = files_by_path(m)
            if len(m["shards"]) != len(data["shards"]):
                raise ManifestError(
                    f"{apath}: {len(m['shards'])} shards for the {len(data['shards'])} of {tpath}"
                )
            for j in range(len(m["shards"])):
                shards[j].append(shard_file(apath, m, j, files))
        per_input.append(shards)
    fps = sorted(m["fingerprint"] for found in by_fp.values() for _, m in found)
    t = pa.struct([pa.field(n, fields[n]) for n in sorted(fields)]) if fields else pa.null()
    return per_input, t, fps


def check_names(props_type: pa.DataType, annotations_type: pa.DataType) -> None:
    """Refuse an annotator whose name is also a user property of the inputs."""
    if not (pa.types.is_struct(props_type) and pa.types.is_struct(annotations_type)):
        return
    taken = {f.name for f in props_type}
    for f in annotations_type:
        if f.name in taken:
            raise InputError(
                f"the pool joins the annotator {f.name!r}, and its inputs have a property "
                f"named {f.name!r}: a filter could not tell them apart"
            )


def attach(table: pa.Table, files: Sequence[dict[str, Any]], *, where: str) -> pa.Table:
    """``table`` (a documents sidecar) with each annotation file's columns added to its
    ``props`` as the struct named by the annotator (``files`` from ``shard_specs``)."""
    import pyarrow.parquet as pq

    if not files:
        return table
    added: list[tuple[str, pa.Array]] = []
    doc_ids = table.column(DOC_ID).combine_chunks() if table.num_rows else None
    for f in files:
        path = f["path"]
        size = os.path.getsize(path) if os.path.exists(path) else None
        if size != f["size"] or file_checksum(Path(path)) != f["xxh3"]:
            raise ManifestError(
                f"{path}: annotation file does not match its manifest (size {size}, "
                f"manifest {f['size']}); rebuild the annotation"
            )
        ann = pq.ParquetFile(path).read()
        if ann.num_rows != table.num_rows or (
            doc_ids is not None and not ann.column(DOC_ID).combine_chunks().equals(doc_ids)
        ):
            raise ManifestError(
                f"{path}: its {ann.num_rows} rows are not the documents of {where} "
                f"({table.num_rows} rows)"
            )
        cols = [c for c in ann.column_names if c != DOC_ID]
        added.append(
            (
                f["name"],
                pa.StructArray.from_arrays(
                    [ann.column(c).combine_chunks() for c in cols], names=cols
                ),
            )
        )
    i = table.schema.get_field_index(props.PROPS)
    base = None
    if i >= 0 and pa.types.is_struct(table.schema.field(i).type):
        base = table.column(i).combine_chunks()
    arrays, names = [], []
    if base is not None:
        for field in base.type:
            if field.name in {n for n, _ in added}:
                raise InputError(
                    f"{where}: has a property named {field.name!r}, the name of an "
                    "annotator the pool joins"
                )
            arrays.append(props._field(base, field.name))
            names.append(field.name)
    for name, arr in sorted(added, key=lambda x: x[0]):  # the order of shard_specs' type
        arrays.append(arr)
        names.append(name)
    merged = pa.StructArray.from_arrays(arrays, names=names)
    if i >= 0:
        return table.set_column(i, props.PROPS, merged)
    return table.append_column(props.PROPS, merged)

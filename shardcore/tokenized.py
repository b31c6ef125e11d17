"""Read a tokenized source: its manifest, its IndexedDataset shards (memory-mapped) and its
per-document Parquet sidecars.

Documents are numbered 0..N-1 in source order across shards (``doc_id``); sidecar row i of
a shard describes sequence i of that shard; the user's properties are its struct column
``props`` (shardcore.props). Select documents with ``shardcore.filters`` or SQL over
``documents()`` and fetch their tokens with ``tokens(doc_id)``.
"""

from __future__ import annotations

import math
import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from shardcore import manifest as mf
from shardcore import props, storage
from shardcore.errors import CorruptDataError
from shardcore.formats import IndexedReader
from shardcore.manifest import files_by_path, read_manifest
from shardcore.storage import artifact_cache

if TYPE_CHECKING:
    import pyarrow as pa

KIND = "tokenized"


class TokenizedSource:
    """A finished tokenized source directory (its manifest must exist)."""

    def __init__(self, path: str | os.PathLike):

        # A tokenized source on object storage is read from a checked local copy.
        self.path = Path(artifact_cache.local_artifact(path))
        self.manifest: dict[str, Any] = read_manifest(self.path, kind=KIND)
        self._shard_meta = self.manifest["shards"]
        counts = np.asarray(mf.shard_column(self.manifest, "documents"), dtype=np.int64)
        # first doc_id of each shard, then the total: doc d is in shard searchsorted(d) - 1
        self._first = np.concatenate([[0], np.cumsum(counts)])

    @property
    def num_documents(self) -> int:
        return int(self._first[-1])

    @property
    def num_tokens(self) -> int:
        return int(self.manifest["totals"]["tokens"])

    @property
    def tokenizer(self) -> dict[str, Any]:
        return self.manifest["tokenizer"]

    @cached_property
    def shards(self) -> list[IndexedReader]:
        return [IndexedReader(self.path / s["prefix"]) for s in self._shard_meta]

    def sidecar_paths(self) -> list[str]:
        return [str(self.path / f"{s['prefix']}.docs.parquet") for s in self._shard_meta]

    def documents(self, columns: list[str] | None = None) -> pa.Table:
        """Every sidecar concatenated (a pyarrow Table, one row per document, by doc_id):
        Shardyard's columns and the user's properties as the struct ``props``, unified
        across shards by shardcore.props' rule."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = [pq.read_table(p, columns=columns) for p in self.sidecar_paths()]
        if not tables:
            return pa.table({"doc_id": pa.array([], pa.int64())})
        return props.concat(tables)

    def locate(self, doc_id: int) -> tuple[int, int]:
        """(shard index, sequence index within the shard) of a document."""
        if not 0 <= doc_id < self.num_documents:
            raise IndexError(f"{self.path}: doc_id {doc_id} out of range [0, {self.num_documents})")
        shard = int(np.searchsorted(self._first, doc_id, side="right")) - 1
        return shard, int(doc_id - self._first[shard])

    def tokens(self, doc_id: int) -> np.ndarray:
        """The stored sequence of a document (with its EOS, and BOS if configured)."""
        shard, i = self.locate(doc_id)
        return self.shards[shard][i]

    def __len__(self) -> int:
        return self.num_documents

    def __repr__(self) -> str:
        return f"<TokenizedSource {self.path} docs={self.num_documents} shards={len(self._shard_meta)}>"


def read_documents(path: str | os.PathLike, columns: list[str] | None = None) -> pa.Table:
    """``TokenizedSource(path).documents(columns)``, without the token shards: on object
    storage only the sidecars are read, each checked against the manifest's size and xxh3
    (a corrupt one is refused by name), never a copy of the whole artifact."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not storage.is_remote(path):
        return TokenizedSource(path).documents(columns)
    manifest = mf.read_manifest(path, kind=KIND)
    store, entries = storage.open_store(path), files_by_path(manifest)
    tables = []
    for shard in manifest["shards"]:
        rel = f"{shard['prefix']}.docs.parquet"
        data, entry = store.read_bytes(rel), entries.get(rel, {})
        if entry.get("size") is not None and len(data) != int(entry["size"]):
            raise CorruptDataError(
                f"{store.location(rel)}: {len(data)} bytes, the manifest says {entry['size']}"
            )
        if entry.get("xxh3") and xxhash.xxh3_64_hexdigest(data) != entry["xxh3"]:
            raise CorruptDataError(f"{store.location(rel)}: checksum differs from the manifest's")
        tables.append(pq.read_table(pa.BufferReader(data), columns=columns))
    if not tables:
        return pa.table({"doc_id": pa.array([], pa.int64())})
    return props.concat(tables)


def property_stats(
    path: str | os.PathLike, fields: list[str] | None = None, *, top: int = 30
) -> dict[str, Any]:
    """Composition and lengths of a tokenized source, from its sidecars: per property
    (``fields``, dotted paths allowed; default: every top-level property) the ``top`` most
    common values with their documents, tokens and bytes (nested values as JSON text,
    absent ones as ``"(absent)"``) in ``by_property``, the rest summed in ``others``
    (``{"values": how many, "documents", "tokens", "bytes"}``, for a property with more
    than ``top`` values: shares are of the whole), and a histogram of document lengths
    over power-of-two edges."""

    import pyarrow as pa
    import pyarrow.compute as pc

    table = read_documents(path)
    if fields is None or not list(fields):
        t = props.props_type(table.schema)  # null when the documents have no properties
        fields = [f.name for f in t] if table.num_rows and pa.types.is_struct(t) else []
    n_tokens = table.column("n_tokens").combine_chunks().cast(pa.int64())
    n_bytes = (  # UTF-8 bytes of the text; sidecars of format 1 did not record them
        table.column("n_bytes").combine_chunks().cast(pa.int64())
        if "n_bytes" in table.column_names
        else pa.nulls(table.num_rows, pa.int64())
    )
    by_property: dict[str, dict[str, dict[str, int]]] = {}
    others: dict[str, dict[str, int]] = {}
    for name in fields:
        col = props.column(table, name)
        if col is None:
            continue
        labels = pc.fill_null(props.as_text_if_nested(col).cast(pa.string()), "(absent)")
        every = (
            pa.table({"v": labels, "t": n_tokens, "b": n_bytes})
            .group_by("v")
            .aggregate([("v", "count"), ("t", "sum"), ("b", "sum")])
            .sort_by([("v_count", "descending"), ("v", "ascending")])
        )
        grouped, rest = every.slice(0, top), every.slice(top)
        if rest.num_rows:
            others[name] = {
                "values": rest.num_rows,
                "documents": int(pc.sum(rest["v_count"]).as_py() or 0),
                "tokens": int(pc.sum(rest["t_sum"]).as_py() or 0),
                "bytes": int(pc.sum(rest["b_sum"]).as_py() or 0),
            }
        by_property[name] = {
            str(v): {"documents": int(n), "tokens": int(t or 0), "bytes": int(b or 0)}
            for v, n, t, b in zip(
                grouped["v"].to_pylist(),
                grouped["v_count"].to_pylist(),
                grouped["t_sum"].to_pylist(),
                grouped["b_sum"].to_pylist(),
                strict=True,
            )
        }
    lengths = n_tokens.to_numpy(zero_copy_only=False)
    hi = int(lengths.max()) if lengths.size else 1
    edges = [2**i for i in range(0, max(1, math.ceil(math.log2(max(hi, 1)))) + 2)]
    counts = [0] * (len(edges) - 1)
    if lengths.size:
        bins = np.minimum(
            np.floor(np.log2(np.maximum(lengths, 1))).astype(np.int64), len(counts) - 1
        )
        counts = np.bincount(bins, minlength=len(counts)).astype(int).tolist()
    return {"by_property": by_property, "others": others, "edges": edges, "counts": counts}

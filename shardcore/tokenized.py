"""Read a tokenized source: its manifest, its IndexedDataset shards (memory-mapped) and its
per-document Parquet sidecars.

Documents are numbered 0..N-1 in source order across shards (``doc_id``); sidecar row i of
a shard describes sequence i of that shard. Select documents with SQL over
``sidecar_paths()`` (e.g. DuckDB ``read_parquet([...], union_by_name=true)``, since shards
may carry different property columns) and fetch their tokens with ``tokens(doc_id)``.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from shardcore.errors import ManifestError
from shardcore.formats import IndexedReader
from shardcore.manifest import read_manifest

KIND = "tokenized"


class TokenizedSource:
    """A finished tokenized source directory (its manifest must exist)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.manifest: dict[str, Any] = read_manifest(self.path)
        if self.manifest.get("kind") != KIND:
            raise ManifestError(
                f"{self.path}: kind {self.manifest.get('kind')!r}, expected {KIND!r}"
            )
        self._shard_meta = self.manifest["shards"]
        counts = np.array([s["documents"] for s in self._shard_meta], dtype=np.int64)
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

    def documents(self, columns: list[str] | None = None):
        """Every sidecar concatenated (a pyarrow Table, one row per document, by doc_id)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = [pq.read_table(p, columns=columns) for p in self.sidecar_paths()]
        if not tables:
            return pa.table({"doc_id": pa.array([], pa.int64())})
        return pa.concat_tables(tables, promote_options="permissive")

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

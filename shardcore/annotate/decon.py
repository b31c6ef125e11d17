"""Decontamination as an annotation: per document, the benchmark items it overlaps by word
n-grams (``shardcore.decon.index``: normalization, n-gram size, the minimum-overlap rule).

Parameters: ``benchmarks``, a benchmark spec file (``shardcore.decon.spec``) or a compiled
index directory (``shardyard decon compile``), local or ``s3://``; ``ngram`` (13 words);
``min_words`` (8: shorter items are skipped, items of ``min_words`` to ``ngram - 1`` words
match on their whole word sequence); ``threshold`` (0.5: the fraction of an item's
distinct n-grams a document must contain to overlap it).

Columns: ``items`` (how many items the document overlaps), ``max_overlap`` (the largest
fraction of one item's n-grams it contains, overlapping or not), ``benchmarks`` (the
benchmarks of the items it overlaps) and ``item_ids`` (those items, ``<benchmark>:<id>``).
The index's fingerprint enters the annotation's: other benchmarks, other bytes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa

from shardcore import limits
from shardcore.annotate import Annotator
from shardcore.decon.index import DeconIndex, check_params, open_index
from shardcore.errors import InputError


class Decontamination(Annotator):
    name: ClassVar[str] = "decon"
    version: ClassVar[str] = "1"
    defaults: ClassVar[dict[str, Any]] = {
        "benchmarks": "",
        "ngram": 13,
        "min_words": 8,
        "threshold": 0.5,
    }

    def check_params(self) -> None:
        check_params(self.params["ngram"], self.params["min_words"])
        limits.check_float("threshold", self.params["threshold"], 0.0, 1.0, low_open=True)

    _index: DeconIndex | None = None

    def index(self) -> DeconIndex:
        """The benchmark index, opened once per annotator (``open_index`` keeps it for the
        process too)."""
        if self._index is not None:
            return self._index
        if not str(self.params["benchmarks"]).strip():
            raise InputError(
                "annotator 'decon': parameter benchmarks: name a benchmark spec file or a "
                "compiled index"
            )
        self._index = open_index(
            self.params["benchmarks"],
            ngram=int(self.params["ngram"]),
            min_words=int(self.params["min_words"]),
        )
        return self._index

    def fields(self) -> list[pa.Field]:
        return [
            pa.field("items", pa.int32()),
            pa.field("max_overlap", pa.float32()),
            pa.field("benchmarks", pa.list_(pa.string())),
            pa.field("item_ids", pa.list_(pa.string())),
        ]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "index": self.index().describe()}

    def annotate(self, texts: list[str]) -> dict[str, Any]:
        index = self.index()
        count, best, items = index.match(texts, float(self.params["threshold"]))
        names = index.benchmarks
        ids = index.item_ids
        bench = index.item_benchmark
        return {
            "items": pa.array(count, pa.int32()),
            "max_overlap": pa.array(best, pa.float32()),
            "benchmarks": [sorted({names[bench[i]] for i in found}) for found in items],
            "item_ids": [[ids[i] for i in found] for found in items],
        }

"""An example of a team's own annotator: how often each document uses a list of words
(case-insensitive, whole words), registered through the ``shardyard.annotators`` entry
point of this package's pyproject.toml."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import pyarrow as pa

from shardcore.annotate import Annotator
from shardcore.errors import InputError


class KeywordHits(Annotator):
    name: ClassVar[str] = "keyword_hits"
    version: ClassVar[str] = "1"
    defaults: ClassVar[dict[str, Any]] = {"words": "todo,fixme"}

    def check_params(self) -> None:
        words = [w.strip().lower() for w in self.params["words"].split(",") if w.strip()]
        if not words:
            raise InputError("annotator 'keyword_hits': parameter 'words' names no word")
        self._pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + r")\b", re.I)

    def fields(self) -> list[pa.Field]:
        return [pa.field("hits", pa.int32()), pa.field("hits_per_kchar", pa.float32())]

    def annotate(self, texts: list[str]) -> dict[str, Any]:
        hits = [len(self._pattern.findall(t)) for t in texts]
        return {
            "hits": hits,
            "hits_per_kchar": [
                1000 * h / len(t) if t else 0.0 for h, t in zip(hits, texts, strict=True)
            ],
        }

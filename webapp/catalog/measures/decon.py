"""The measurement behind a pool's decontamination audit: which benchmark items the pool
holds, read from a decon annotation's overlapping documents and the pool's documents table.
Run by the fact's task (``decon_pool_items``), never by a page."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardcore.annotate.artifact import annotation_shards
from webapp.catalog.models import Annotation, Pool
from webapp.catalog.pool_documents import pool_documents_held

ITEMS_LISTED = 1000  # item ids a pool's fact lists per benchmark (its count is exact)


def benchmarks_of(ann: Annotation) -> list[dict]:
    """The benchmarks a decon annotation checked documents against, as its summary lists
    them."""
    return list(((ann.summary or {}).get("decon") or {}).get("benchmarks") or [])


def decon_pool_items_measure(*, pool: Pool, annotation: Annotation) -> dict:
    """What the task of the fact ``decon_pool_items`` measures: per benchmark of the
    annotation, how many of the documents overlapping it the pool holds (``held``) and
    how many its source has (``documents``), and the items of those it holds (``items``,
    the first ITEMS_LISTED, ``items_held`` counts them all). Reads the annotation's
    overlapping documents a shard at a time and the pool's documents table a batch at a
    time."""
    doc_ids: list[np.ndarray] = []
    lists: list[list[str]] = []
    for table in annotation_shards(annotation.path, columns=["doc_id", "items", "item_ids"]):
        hit = np.flatnonzero(table.column("items").to_numpy(zero_copy_only=False) > 0)
        if not hit.size:
            continue
        doc_ids.append(table.column("doc_id").to_numpy()[hit])
        ids = table.column("item_ids").to_pylist()
        lists += [ids[i] for i in hit]
    ids = np.concatenate(doc_ids) if doc_ids else np.zeros(0, dtype=np.int64)
    held = pool_documents_held(pool=pool, tokenized=annotation.tokenized_source, doc_ids=ids)
    is_held = np.isin(ids, held)
    per: dict[str, dict[str, Any]] = {}
    for b in benchmarks_of(annotation):
        per[b["name"]] = {"name": b["name"], "documents": 0, "held": 0, "items": set()}
    for found, keep in zip(lists, is_held.tolist(), strict=True):
        names = {i.split(":", 1)[0] for i in found}
        for name in names:
            entry = per.setdefault(name, {"name": name, "documents": 0, "held": 0, "items": set()})
            entry["documents"] += 1
            entry["held"] += int(keep)
        if keep:
            for i in found:
                per[i.split(":", 1)[0]]["items"].add(i.split(":", 1)[1])
    out = []
    for entry in per.values():
        items = sorted(entry.pop("items"))
        out.append(
            {
                **entry,
                "removed": entry["documents"] - entry["held"],
                "items_held": len(items),
                "items": items[:ITEMS_LISTED],
            }
        )
    return {"annotation": annotation.pk, "benchmarks": sorted(out, key=lambda e: e["name"])}

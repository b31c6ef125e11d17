"""The stage ``annotation``: an annotation artifact (``shardcore.annotate.artifact``) built
under the unit-of-work protocol (``shardcore.units``), so that a job engine runs it as one
unit per input shard on any number of workers or hosts, local or ``s3://``.

Phase 1, one unit per shard of the tokenized source: ``annotate_shard`` (it writes the
shard's Parquet file, or a corpus-level annotator's scratch file, under a temporary name
renamed into place). ``finalize`` then computes the corpus-level columns when the
annotator has any, and writes the manifest last: the commit point. A unit killed anywhere
leaves no file of its own in place, and its rerun writes the same bytes; a finished unit
is never run again (its marker), so a healed build is byte-identical to an undisturbed one.

The output directory is the annotation; the plan names the tokenized source by path (a
local directory or an object-store URL, listed in ``meta["artifacts"]`` so that each unit
reads a checked local copy).

On object storage the units declare what they read of the output (``_reads``): a shard
unit nothing, minhash's later units the files ``dedup_units.reads`` names; each unit that
writes a Parquet file records its manifest entry in its stats, so that finalize reads none
(``_finalize_reads``: but the files of units recorded before they did, and a corpus-level
annotator's scratch when its ``finish`` runs in finalize). ``work/`` is scratch, deleted
from the bucket by finalize.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shardcore import storage, units
from shardcore.annotate import Annotator, create, dedup_units
from shardcore.annotate import get as annotator_class
from shardcore.annotate.artifact import (
    DOC_ID,
    _path,
    _work_file,
    annotate_shard,
    file_entry,
    finalize,
    plan,
    read_annotation,
)
from shardcore.annotate.dedup import NearDuplicates
from shardcore.annotate.texts import TEXT_FROM
from shardcore.errors import InputError
from shardcore.manifest import read_manifest
from shardcore.storage import artifact_cache

if TYPE_CHECKING:
    import pyarrow as pa

STAGE = "annotation"


def plan_annotation(
    tokenized: str,
    out: str,
    *,
    annotator: str,
    params: dict[str, Any] | None = None,
    text_from: str = "auto",
    batch_size: int = 1024,
) -> units.Plan:
    """The plan of annotating ``tokenized`` with ``annotator`` (and its parameters) into
    ``out``: one unit per tokenized shard. Refuses an unknown annotator or parameter here,
    before anything is written."""
    if text_from not in TEXT_FROM:
        raise InputError(f"text_from must be one of {', '.join(TEXT_FROM)}; got {text_from!r}")
    if not 1 <= int(batch_size) <= 1 << 20:
        raise InputError(f"batch_size must be between 1 and {1 << 20}; got {batch_size}")
    instance = create(annotator, params or {})
    tokenized = storage.resolve(tokenized)
    p = plan(tokenized, instance)
    phase = [
        {"id": f"shard-{s['index']:05d}", "shard": s["index"], "documents": s["documents"]}
        for s in p["shards"]
    ]
    n = sum(s["documents"] for s in p["shards"])
    phases, more = [phase], {}
    if isinstance(instance, NearDuplicates):  # the clusters as units, not in finalize
        phases += dedup_units.phases(p["shards"], n, instance.params)
        more = dedup_units.meta(n, instance.params)
    return units.Plan(
        STAGE,
        storage.resolve(out),
        {
            "tokenized": tokenized,
            "annotator": instance.name,
            "params": instance.params,
            "text_from": text_from,
            "batch_size": int(batch_size),
        },
        phases,
        {
            "fingerprint": p["fingerprint"],
            "annotator": instance.describe(),
            "corpus_level": bool(annotator_class(annotator).corpus_level),
            "documents": n,
            "artifacts": [tokenized] if storage.is_remote(tokenized) else [],
            **more,
        },
    )


def _annotator(plan_: units.Plan) -> Annotator:
    return create(plan_.params["annotator"], plan_.params["params"])


def _run_unit(plan_: units.Plan, unit: dict) -> dict:
    if not unit["id"].startswith("shard-"):  # the clusters' units (minhash)
        return dedup_units.run_unit(plan_, unit)
    r = annotate_shard(
        plan_.params["tokenized"],
        plan_.out,
        _annotator(plan_),
        int(unit["shard"]),
        batch_size=int(plan_.params["batch_size"]),
        text_from=plan_.params["text_from"],
    )
    if "rounds" in plan_.meta:  # its bucket rows, for the clusters' units
        dedup_units.file_shard_keys(plan_, int(unit["shard"]))
    # Every document of the shard is annotated by this unit alone: the job sums them.
    stats = {"documents": int(r["documents"]), "text_from": r["text_from"]}
    if not plan_.meta.get("corpus_level"):  # its file's manifest entry: finalize reads none
        stats["file"] = file_entry(plan_.out, r["path"])
    return stats


def _tokenized(plan_: units.Plan) -> str:
    """The tokenized source, from its checked local copy when it is remote."""
    tokenized = plan_.params["tokenized"]
    if storage.is_remote(tokenized):
        tokenized = str(artifact_cache.local_artifact(tokenized))
    return tokenized


def _written(plan_: units.Plan, stats: list[dict]) -> list[tuple[dict, dict]]:
    """The units that write the annotation's files (a shard unit, or with the clusters as
    units a write unit), each with its stats."""
    kind = "write-" if "rounds" in plan_.meta else "shard-"
    every = (u for phase in plan_.phases for u in phase)
    return [(u, st) for u, st in zip(every, stats, strict=True) if u["id"].startswith(kind)]


def _finalize(plan_: units.Plan, stats: list[dict]) -> dict:
    entries = {st["file"]["path"]: st["file"] for _, st in _written(plan_, stats) if "file" in st}
    return finalize(_tokenized(plan_), plan_.out, _annotator(plan_), entries)


def _reads(plan_: units.Plan, unit: dict) -> list[str] | None:
    """The files of the annotation a unit reads (on object storage it fetches exactly these
    and lists nothing): a shard unit none (its input is the tokenized source), the
    clusters' units (minhash) what ``dedup_units.reads`` says."""
    if unit["id"].startswith("shard-"):
        return []
    return dedup_units.reads(plan_, unit)


def _finalize_reads(plan_: units.Plan, stats: list[dict]) -> list[str] | None:
    """Finalize reads the units' stats (each written file's entry), but for the files of
    units recorded before they held them; a corpus-level annotator without the clusters as
    units computes the columns here, from every shard's scratch (its ``work_files``; one
    that names none has finalize list the prefix)."""
    ann = _annotator(plan_)
    if ann.corpus_level and "rounds" not in plan_.meta:
        if not ann.work_files:
            return None
        shards = range(len(plan_.phases[0]))
        return [f"{_work_file(j)}/{name}" for j in shards for name in ann.work_files]
    shards = plan(_tokenized(plan_), ann)["shards"]
    return [_path(shards[u["shard"]]) for u, st in _written(plan_, stats) if "file" not in st]


units.register_stage(
    STAGE,
    run_unit=_run_unit,
    finalize=_finalize,
    reads=_reads,
    finalize_reads=_finalize_reads,
    scratch=("work/",),
)


# ----------------------------------------------------------------- what a page charts

HISTOGRAM_BINS = 20
TOP_VALUES = 20
TOP_CLUSTERS = 10


def summarize(path: str) -> dict[str, Any]:
    """What an annotation's page charts, from its columns (read once, by the job that built
    it; pages read this, never the Parquet files): per column a histogram (numbers) or its
    most frequent values (text); with ``lang`` and ``score`` columns the documents and the
    mean confidence per language; with ``dup_cluster``/``dup_size``/``dup_rank`` the
    duplicate rate and the largest duplicate clusters; with a ``cluster`` column the
    cluster sizes, each with the top terms and snippets of the ``summary.json`` a
    clustering annotator writes beside its columns (``_cluster_descriptions``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    local = artifact_cache.local_artifact(path) if storage.is_remote(path) else path
    manifest = read_manifest(local)
    table = read_annotation(local)
    out: dict[str, Any] = {"documents": table.num_rows, "columns": {}}
    for name in table.column_names:
        if name == DOC_ID:
            continue
        col = table.column(name)
        nulls = col.null_count
        if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
            values = np.asarray(col.drop_null().to_numpy(zero_copy_only=False), dtype=np.float64)
            values = values[np.isfinite(values)]
            entry: dict[str, Any] = {"kind": "number", "nulls": nulls, "count": int(values.size)}
            if values.size:
                whole = int if pa.types.is_integer(col.type) else float
                entry.update(
                    min=whole(values.min()),
                    max=whole(values.max()),
                    mean=round(float(values.mean()), 6),
                    nonzero=int((values != 0).sum()),
                )
                distinct = np.unique(values)
                if pa.types.is_integer(col.type) and distinct.size <= HISTOGRAM_BINS:
                    entry["values"] = [
                        [int(v), int((values == v).sum())] for v in distinct.tolist()
                    ]
                else:
                    counts, edges = np.histogram(values, bins=HISTOGRAM_BINS)
                    entry["histogram"] = {
                        "edges": [round(float(e), 6) for e in edges],
                        "counts": counts.astype(int).tolist(),
                    }
            out["columns"][name] = entry
        elif pa.types.is_boolean(col.type):
            true = int(pc.sum(col).as_py() or 0)
            out["columns"][name] = {
                "kind": "bool",
                "nulls": nulls,
                "true": true,
                "false": table.num_rows - nulls - true,
            }
        elif pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            flat = pc.list_flatten(col)
            vc = pc.value_counts(flat.cast(pa.string()))
            pairs = sorted(
                ((v["values"], int(v["counts"])) for v in vc.to_pylist()),
                key=lambda x: (-x[1], str(x[0])),
            )
            out["columns"][name] = {
                "kind": "list",
                "nulls": nulls,
                "distinct": len(pairs),
                "nonempty": int(pc.sum(pc.greater(pc.list_value_length(col), 0)).as_py() or 0),
                "top": [[v, c] for v, c in pairs[:TOP_VALUES]],
            }
        else:
            vc = pc.value_counts(col.cast(pa.string()) if not pa.types.is_string(col.type) else col)
            pairs = sorted(
                ((v["values"], int(v["counts"])) for v in vc.to_pylist()),
                key=lambda x: (-x[1], str(x[0])),
            )
            out["columns"][name] = {
                "kind": "text",
                "nulls": nulls,
                "distinct": len(pairs),
                "top": [[v, c] for v, c in pairs[:TOP_VALUES]],
            }
    names = set(table.column_names)
    if {"lang", "score"} <= names:
        langs = table.group_by("lang").aggregate([("score", "mean"), ("score", "count")])
        rows = sorted(
            (
                {
                    "lang": r["lang"],
                    "documents": int(r["score_count"]),
                    "mean_score": round(float(r["score_mean"] or 0.0), 4),
                }
                for r in langs.to_pylist()
            ),
            key=lambda r: (-r["documents"], str(r["lang"])),
        )
        out["languages"] = rows
    if {"dup_cluster", "dup_size", "dup_rank"} <= names:
        rank = table.column("dup_rank").to_numpy(zero_copy_only=False)
        size = table.column("dup_size").to_numpy(zero_copy_only=False)
        cluster = table.column("dup_cluster").to_numpy(zero_copy_only=False)
        doc = table.column(DOC_ID).to_numpy()
        # The clusters with copies that have documents here, each once with its first
        # document here: in a group across sources a cluster's rank-0 copy may be in
        # another source (then ``size`` counts the copies of every source).
        many = np.flatnonzero(size > 1)
        ids, at = np.unique(cluster[many], return_index=True)  # doc order: first row here
        big = np.lexsort((ids, -size[many][at]))[:TOP_CLUSTERS]
        out["duplicates"] = {
            "duplicate_documents": int((rank > 0).sum()),
            "duplicate_rate": round(float((rank > 0).mean()) if rank.size else 0.0, 6),
            "clusters_with_copies": int(ids.size),
            "largest": [
                {
                    "cluster": int(ids[i]),
                    "size": int(size[many][at[i]]),
                    "first_doc_id": int(doc[many][at[i]]),
                }
                for i in big
            ],
        }
    if "cluster" in names:
        vc = pc.value_counts(table.column("cluster")).to_pylist()
        described = _cluster_descriptions(local)
        sizes = sorted(
            ((int(v["values"]), int(v["counts"])) for v in vc if v["values"] is not None),
            key=lambda x: (-x[1], x[0]),
        )
        out["clusters"] = [
            {
                "cluster": c,
                "documents": n,
                "terms": described.get(c, {}).get("terms", [])[:10],
                "snippets": described.get(c, {}).get("snippets", [])[:3],
            }
            for c, n in sizes[:50]
        ]
    if (manifest.get("annotator") or {}).get("name") == "decon":
        out["decon"] = _decon_summary(table, manifest["annotator"].get("index") or {})
    out["bytes_per_document"] = manifest.get("totals", {}).get("bytes_per_document", 0.0)
    return out


DECON_TOP_ITEMS = 100


def _decon_summary(table: pa.Table, index: dict[str, Any]) -> dict[str, Any]:
    """Per benchmark of a decontamination: its items (indexed, skipped as too short), the
    documents overlapping any of them, the items some document overlaps, and those items
    with the most documents (at most ``DECON_TOP_ITEMS``)."""
    import pyarrow.compute as pc

    items = table.column("items").to_numpy(zero_copy_only=False)
    table = table.filter(pc.greater(table.column("items"), 0))  # the few overlapping rows
    ids = pc.list_flatten(table.column("item_ids")).to_pylist()
    per_item: dict[str, int] = {}
    for i in ids:
        per_item[i] = per_item.get(i, 0) + 1
    docs_per_bench: dict[str, int] = {}
    for names in table.column("benchmarks").to_pylist():
        for b in names or []:
            docs_per_bench[b] = docs_per_bench.get(b, 0) + 1
    benches = []
    for b in index.get("benchmarks") or []:
        name = b["name"]
        hit = {i: c for i, c in per_item.items() if i.split(":", 1)[0] == name}
        top = sorted(hit.items(), key=lambda x: (-x[1], x[0]))[:DECON_TOP_ITEMS]
        benches.append(
            {
                "name": name,
                "items": int(b.get("items", 0)),
                "indexed": int(b.get("indexed", 0)),
                "skipped": int(b.get("skipped", 0)),
                "skipped_ids": list(b.get("skipped_ids") or []),
                "documents": docs_per_bench.get(name, 0),
                "items_hit": len(hit),
                "top_items": [[i.split(":", 1)[1], c] for i, c in top],
            }
        )
    return {
        "documents": int((items > 0).sum()),
        "ngram": index.get("ngram"),
        "min_words": index.get("min_words"),
        "index_fingerprint": index.get("fingerprint"),
        "benchmarks": benches,
    }


def _cluster_descriptions(path: str) -> dict[int, dict[str, list[str]]]:
    """Per cluster id, its top terms and example snippets, from the ``summary.json`` a
    clustering annotator writes beside its columns (``{"clusters": [{"cluster", "size",
    "top_terms", "examples": [{"doc_id", "text", ...}]}]}``); empty when it writes none."""

    summary = Path(path) / "summary.json"
    if not summary.exists():
        return {}
    out: dict[int, dict[str, list[str]]] = {}
    for c in json.loads(summary.read_text()).get("clusters") or []:
        if not isinstance(c, dict) or not isinstance(c.get("cluster"), int):
            continue
        examples = c.get("examples") or []
        out[c["cluster"]] = {
            "terms": [str(t) for t in c.get("top_terms") or []],
            "snippets": [
                str(e.get("text", "") if isinstance(e, dict) else e)[:300] for e in examples
            ],
        }
    return out

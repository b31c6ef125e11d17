"""Near-duplicates across several tokenized sources, as units on the job engine
(``shardcore.units``: stage ``annotate.neardup``), within a memory budget.

The user chooses the sources, in order; the result is one ``minhash`` annotation per source
(``<out>/sources/<i>``, each a complete annotation artifact: ``read_annotation`` reads it,
a pool joins it), whose clusters span the sources. Documents are numbered globally: source
i's document d is ``offset[i] + d`` (the sources' document counts summed in order), so
``dup_cluster`` is the smallest global number of the cluster and ``dup_rank = 0`` keeps the
copy of the earliest source (the user's order is the priority), then the lowest doc_id.
With one source the columns equal the ``minhash`` annotator's (tested).

Phases (each unit writes its files under temporary names renamed into place; a unit that
finished is never run again, a killed one reruns to the same bytes):

1. ``sig-<i>-<j>``, one per (source, tokenized shard): the shard's MinHash signatures and
   exact hashes (``NearDuplicates.signatures``) into ``_work/sig/<i>-<j>.npy`` and
   ``.exact.npy``, and its bucket keys, split by partition: for every band b its band key
   (the band's r values folded, mixed with b), and the exact hash as one more band, each a
   (key, band, global document) row in ``_work/keys/<i>-<j>/p<p>.npy`` for
   ``p = key mod partitions``.
2. ``bucket-<p>``, one per partition: every signature unit's rows of partition p, sorted
   by (band, key, document); documents sharing a (band, key) are candidates, each joined to
   the first of its run when their signatures agree on at least ``threshold`` of the
   permutations (exact-hash rows are joined without the check). Its edges, both ways, are
   filed under the range of documents of their first end (``partitions`` ranges of
   consecutive global numbers).
3. the clusters, by rounds over those ranges (``shardcore.annotate.components``):
   ``round-<r>-<q>`` for r = 1 .. ``rounds``, each range's documents taking the smallest
   label their neighbours sent (a range that was sent nothing changes nothing), then
   ``resolve`` (one unit: what a cluster wider than the rounds still had in flight),
   ``count-<q>`` (each range's final labels, counted per label) and ``tally-<q>`` (per
   label its size, and how many of its documents lie in earlier ranges: the ranks).
4. ``write-<i>-<j>``, one per (source, shard): that shard's cluster, size and rank, read
   from the ranges it covers, as the annotation's Parquet file; ``finalize`` writes each
   source's manifest, then the group's manifest (kind ``annotation_group``, naming the
   sources and their annotations), and removes ``_work``. (A plan made before the rounds
   has one ``clusters`` unit holding every edge instead; it runs as it was planned.)

Memory: ``partitions`` is chosen so that one bucket unit, whose rows are 24 bytes per
document per band (bands + 1 with the exact hash) and whose sort takes about 4 times its
rows, stays within ``memory_mb``: ``ceil(4 * 24 * N * (bands + 1) / budget)``. The same
number of ranges splits the clusters: a range's unit holds its documents' edges (16 bytes
a half-edge, at most one edge per verified candidate row) and labels, so no unit holds
every edge or every document; the write units read only their ranges. How this grows:
bench/annotate/README.md.

On object storage each unit fetches the files it reads and lists nothing (``_reads``: a
signature unit none, a bucket unit every signature unit's rows of its partition, and the
signatures and exact hashes of its candidates only, by ranges (``buckets.row_files``: not
the whole corpus's signatures to every bucket unit), the clusters' units ``range_reads``, a write unit its ranges'
clusters and its exact hashes); a write unit records its file's manifest entry, so that
finalize reads no shard, and ``_work`` is scratch that finalize deletes from the bucket.

The API a job engine calls: ``plan_group(sources, out, params)`` gives a ``units.Plan``;
``units.run_unit(plan, unit_id)`` for every unit, phase by phase; ``units.finalize(plan)``
(or ``units.run_local(plan)`` for all of it); ``annotation_paths(out)`` lists the per-source
annotations of a finished group.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from shardcore import atomic, units
from shardcore.annotate.artifact import _path, _table, _write_parquet, commit, file_entry
from shardcore.annotate.artifact import plan as annotation_plan
from shardcore.annotate.buckets import ROW, PartitionKeys, row_files, verified_edges
from shardcore.annotate.components import ROUNDS, Components, file_split
from shardcore.annotate.dedup import NearDuplicates, _components
from shardcore.annotate.texts import shard_text_batches
from shardcore.errors import InputError
from shardcore.manifest import fingerprint, is_complete, read_manifest, write_manifest
from shardcore.npy_rows import RowsFile
from shardcore.tokenized import TokenizedSource

STAGE = "annotate.neardup"
KIND = "annotation_group"
WORK = "_work"
KEY_BATCH = 65_536  # documents whose bucket rows are filed at once


class GroupNearDuplicates(NearDuplicates):
    """The ``minhash`` annotator over a group of sources: its fingerprint names them all
    (the clusters of one depend on the others)."""

    def __init__(self, group: list[str], **params: Any):
        super().__init__(**params)
        self.group = list(group)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "group": self.group}


def _sources(paths: list[str]) -> list[dict[str, Any]]:
    out, offset = [], 0
    for path in paths:
        src = TokenizedSource(path)
        shards = [
            {"documents": int(s["documents"]), "first_doc_id": int(src._first[j])}
            for j, s in enumerate(src.manifest["shards"])
        ]
        n = sum(s["documents"] for s in shards)
        out.append(
            {
                "path": str(path),
                "fingerprint": src.manifest["fingerprint"],
                "offset": offset,
                "documents": n,
                "shards": shards,
            }
        )
        offset += n
    return out


# a bucket unit's peak over its rows' bytes: the rows, their sort order, the sorted copy
# and the candidate arrays (measured by bench/annotate/neardup_growth.py: 3.3x)
SORT_FACTOR = 4


def partitions_for(n: int, params: dict[str, Any]) -> int:
    """Partitions enough for a bucket unit over ``n`` documents to stay within
    ``memory_mb``: its rows are 24 bytes per document per band (and the exact hash)."""
    rows = ROW.itemsize * n * (params["bands"] + 1)
    return max(1, math.ceil(SORT_FACTOR * rows / (params["memory_mb"] << 20)))


def plan_group(
    sources: list[str],
    out: str,
    params: dict[str, Any] | None = None,
    *,
    partitions: int | None = None,
) -> units.Plan:
    """The units that cluster near-duplicates across ``sources`` (tokenized sources, in
    priority order) into ``out``; ``params`` are the ``minhash`` annotator's.
    ``partitions`` overrides the number the memory budget gives (the output is the same
    for any number)."""
    if not sources:
        raise InputError("near-duplicates: choose at least one tokenized source")
    if len(set(map(str, sources))) != len(sources):
        raise InputError("near-duplicates: a tokenized source is named twice")
    ann = NearDuplicates(**(params or {}))
    srcs = _sources([str(s) for s in sources])
    n = sum(s["documents"] for s in srcs)
    p = ann.params
    if partitions is None:
        partitions = partitions_for(n, p)
    elif partitions < 1:
        raise InputError("near-duplicates: partitions must be at least 1")
    group = [s["fingerprint"] for s in srcs]
    sig = [
        {"id": f"sig-{i}-{j}", "source": i, "shard": j}
        for i, s in enumerate(srcs)
        for j in range(len(s["shards"]))
    ]
    write = [{**u, "id": f"write-{u['source']}-{u['shard']}"} for u in sig]
    return units.Plan(
        STAGE,
        str(out),
        dict(ann.params),
        [
            sig,
            *cluster_phases(partitions),
            write,
        ],
        meta={
            "sources": srcs,
            "documents": n,
            "partitions": partitions,
            # Clusters by rounds over ranges of documents (shardcore.annotate.components);
            # a plan without it (made before) has one unit holding every edge.
            "rounds": ROUNDS,
            # Every round unit writes the files a later one reads (``Components.run_round``):
            # each unit's reads are known before it runs (a plan without it lists them).
            "declared_reads": True,
            # A bucket unit on object storage reads its candidates' signatures and exact
            # hashes by ranges (``buckets.row_files``); a plan without it fetches them whole.
            "ranged_signatures": True,
            "fingerprint": fingerprint(KIND, parents=group, params=dict(sorted(p.items()))),
            "artifacts": [s["path"] for s in srcs],
        },
    )


def cluster_phases(partitions: int) -> list[list[dict[str, Any]]]:
    """The phases between the signatures and the writing: the bucket units, then the
    clusters by rounds over ``partitions`` ranges (``shardcore.annotate.components``)."""
    ranges = range(partitions)
    rounds = [
        [{"id": f"round-{r}-{q}", "round": r, "part": q} for q in ranges]
        for r in range(1, ROUNDS + 1)
    ]
    return [
        [{"id": f"bucket-{q}", "partition": q} for q in ranges],
        *rounds,
        [{"id": "resolve"}],
        [{"id": f"count-{q}", "part": q} for q in ranges],
        [{"id": f"tally-{q}", "part": q} for q in ranges],
    ]


def run_on_ranges(comp: Components, unit: dict[str, Any]) -> dict[str, Any] | None:
    """Run a unit of the clusters' rounds (round, resolve, count, tally) on ``comp``;
    None for a unit of another kind."""
    kind = unit["id"].split("-", 1)[0]
    if kind == "round":
        return comp.run_round(unit["round"], unit["part"])
    if kind == "resolve":
        return comp.run_resolve(ROUNDS)
    if kind == "count":
        return comp.run_count(ROUNDS, unit["part"])
    if kind == "tally":
        return comp.run_tally(unit["part"])
    return None


def _labels_rounds(plan: units.Plan, r: int, parts: list[int]) -> list[int]:
    """For each range of ``parts``, the round whose file holds its labels after round r
    (``labels`` in the stats of its round-r unit, read from the markers)."""
    ids = [f"round-{r}-{q}" for q in parts]
    with ThreadPoolExecutor(min(units.PULL_THREADS, max(len(ids), 1))) as pool:
        stats = list(pool.map(lambda unit_id: units.unit_result(plan.out, unit_id), ids))
    missing = [i for i, st in zip(ids, stats, strict=True) if st is None]
    if missing:
        raise RuntimeError(f"{plan.out}: unit {missing[0]} has not finished")
    return [int(st["labels"]) for st in stats if st is not None]


def range_reads(plan: units.Plan, comp: Components, unit: dict[str, Any]) -> list[str] | None:
    """The files a unit of the clusters' rounds (round, resolve, count, tally) reads, for
    ``comp`` laid out relative to the output: a round-1 unit every bucket unit's
    adjacency, a later round the sent files of the round before, its range's labels and
    adjacency, ``resolve`` the last round's sent files and every range's labels, a count
    unit its range's labels and the resolved labels, a tally unit every count file. None
    for a plan made before every round unit wrote the files a later one reads (its units
    list the prefix)."""
    kind = unit["id"].split("-", 1)[0]

    def split(path: Path) -> list[str]:
        return [p.as_posix() for p in comp.split_files(path)]

    if kind == "tally":
        return [k for q in range(comp.parts) for k in split(comp.count_path(q))]
    if not plan.meta.get("declared_reads"):
        return None
    if kind == "round" and unit["round"] == 1:
        return [k for s in range(comp.sources) for k in split(comp.adjacency_file(s))]
    if kind == "round":
        r, q = unit["round"], unit["part"]
        (k,) = _labels_rounds(plan, r - 1, [q])
        sent = [key for s in range(comp.parts) for key in split(comp.sent_path(r - 1, s))]
        return [*sent, comp.labels_path(k, q).as_posix(), comp.range_adjacency_file(q).as_posix()]
    if kind == "resolve":
        ranges = list(range(comp.parts))
        sent = [key for s in ranges for key in split(comp.sent_path(ROUNDS, s))]
        labels = _labels_rounds(plan, ROUNDS, ranges)
        return [
            *sent,
            *(comp.labels_path(k, q).as_posix() for q, k in zip(ranges, labels, strict=True)),
        ]
    if kind == "count":
        (k,) = _labels_rounds(plan, ROUNDS, [unit["part"]])
        return [comp.labels_path(k, unit["part"]).as_posix(), comp.resolved_path().as_posix()]
    raise ValueError(f"no unit of the clusters' rounds: {unit['id']}")


def cluster_reads(comp: Components, lo: int, hi: int) -> list[str]:
    """The files ``Components.cluster_columns(lo, hi)`` reads (``comp`` laid out relative
    to the output): the final labels of the ranges nodes [lo, hi) lie in, every tally."""
    if hi <= lo:
        return []
    first, last = comp.part(np.array([lo, hi - 1])).tolist()
    finals = [comp.final_path(q).as_posix() for q in range(first, last + 1)]
    tallies = [
        p.as_posix() for lq in range(comp.parts) for p in comp.split_files(comp.tally_path(lq))
    ]
    return finals + tallies


def annotation_paths(out: str | Path) -> list[str]:
    """The per-source annotations of the finished group at ``out``, in source order."""
    m = read_manifest(out, kind=KIND)
    return [f"{str(out).rstrip('/')}/{s['annotation']}" for s in m["sources"]]


def _annotator(plan: units.Plan) -> GroupNearDuplicates:
    return GroupNearDuplicates([s["fingerprint"] for s in plan.meta["sources"]], **plan.params)


def _unit_dir(unit: dict[str, Any]) -> str:
    return f"{unit['source']}-{unit['shard']}"


def _starts(plan: units.Plan) -> tuple[np.ndarray, list[str]]:
    """Global number of each signature unit's first document, and the units' names."""
    names, starts = [], []
    for i, s in enumerate(plan.meta["sources"]):
        lo = s["offset"]
        for j, sh in enumerate(s["shards"]):
            names.append(f"{i}-{j}")
            starts.append(lo)
            lo += sh["documents"]
    return np.asarray([*starts, plan.meta["documents"]], dtype=np.int64), names


def _run_signatures(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    ann = _annotator(plan)
    src = plan.meta["sources"][unit["source"]]
    shard = src["shards"][unit["shard"]]
    batches, _, n = shard_text_batches(TokenizedSource(src["path"]), unit["shard"])
    if n != shard["documents"]:
        raise InputError(
            f"{src['path']}: shard {unit['shard']} has {n} documents, "
            f"the plan says {shard['documents']}"
        )
    first = src["offset"] + shard["first_doc_id"] - src["shards"][0]["first_doc_id"]
    size = 0
    with KeyWriter(plan, _unit_dir(unit), first) as keys:
        for texts in batches:
            keys.add(*ann.signatures(texts))
            size += sum(len(t.encode()) for t in texts)
    return {"documents": n, "bytes": size}


def write_keys(plan: units.Plan, name: str, sig: np.ndarray, exact: np.ndarray, first: int) -> None:
    """A signature unit's files: signatures, exact hashes, and bucket rows by partition
    for documents ``first``, ``first + 1``, ... (global numbers)."""
    with KeyWriter(plan, name, first) as keys:
        keys.add(sig, exact)


class KeyWriter:
    """A signature unit's files written a batch of documents at a time (what the unit holds
    is a batch): ``_work/sig/<name>.npy`` and ``.exact.npy`` and the bucket rows by
    partition in ``_work/keys/<name>/``, each renamed into place complete when the block
    ends without an error."""

    def __init__(self, plan: units.Plan, name: str, first: int) -> None:
        out = Path(plan.out)
        self.params = _annotator(plan).params
        self.sig_path = out / WORK / "sig" / f"{name}.npy"
        self.exact_path = out / WORK / "sig" / f"{name}.exact.npy"
        self.keys = PartitionKeys(
            out / WORK / "keys" / name, self.params, plan.meta["partitions"], first
        )

    def __enter__(self) -> KeyWriter:
        self.sig_path.parent.mkdir(parents=True, exist_ok=True)
        self._stack = contextlib.ExitStack()
        stack = self._stack.__enter__()
        stack.enter_context(self.keys)
        tmp_sig = stack.enter_context(atomic.atomic_path(self.sig_path))
        tmp_exact = stack.enter_context(atomic.atomic_path(self.exact_path))
        self.sig = stack.enter_context(RowsFile(tmp_sig, np.uint32, (self.params["num_perm"],)))
        self.exact = stack.enter_context(RowsFile(tmp_exact, np.uint64))
        return self

    def add(self, sig: np.ndarray, exact: np.ndarray) -> None:
        self.keys.add(sig, exact)
        self.sig.append(sig)
        self.exact.append(exact)

    def __exit__(self, *exc: Any) -> None:
        self._stack.__exit__(*exc)


def file_edges(comp: Components, q: int, a: np.ndarray, b: np.ndarray) -> None:
    """Bucket partition q's edges, both ways, filed under the range of their first end."""
    both = np.stack([np.r_[a, b], np.r_[b, a]])
    file_split(comp.adjacency_file(q), both, comp.part(both[0]), comp.parts)


def _run_bucket(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    out, ann = Path(plan.out), _annotator(plan)
    starts, names = _starts(plan)
    q = unit["partition"]
    rows = np.concatenate(
        [np.load(out / WORK / "keys" / name / f"p{q}.npy") for name in names] or [np.empty(0, ROW)]
    )
    ranged = bool(plan.meta.get("ranged_signatures"))
    sigs = row_files(out, [f"{WORK}/sig/{name}.npy" for name in names], ranged=ranged)
    if "rounds" in plan.meta:
        exacts = row_files(out, [f"{WORK}/sig/{name}.exact.npy" for name in names], ranged=ranged)
        a, b = verified_edges(rows, sigs, starts, ann.params, exacts)
        file_edges(_components_of(plan), q, a, b)
        return {"candidates": int(len(rows)), "edges": int(len(a))}
    a, b = verified_edges(rows, sigs, starts, ann.params)  # a plan made before the rounds
    final = out / WORK / "pairs" / f"p{q}.npy"
    final.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(final) as tmp, open(tmp, "wb") as f:
        np.save(f, np.stack([a, b]))
    return {"candidates": int(len(rows)), "edges": int(len(a))}


def _components_of(plan: units.Plan, root: str | Path | None = None) -> Components:
    """The plan's clusters under the output (or under ``root``: ``""`` for keys relative
    to it)."""
    parts = plan.meta["partitions"]
    where = Path(plan.out if root is None else root) / WORK / "cc"
    return Components(where, plan.meta["documents"], parts, parts)


def _run_clusters(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    """Every edge in one unit (plans made before the clusters went by rounds)."""
    out, n = Path(plan.out), plan.meta["documents"]
    pairs = [np.load(out / WORK / "pairs" / f"p{q}.npy") for q in range(plan.meta["partitions"])]
    a = np.concatenate([p[0] for p in pairs]) if pairs else np.empty(0, np.int64)
    b = np.concatenate([p[1] for p in pairs]) if pairs else np.empty(0, np.int64)
    roots = _components(n, a, b)
    size = np.bincount(roots, minlength=n)[roots] if n else np.empty(0, np.int64)
    order = np.lexsort((np.arange(n), roots))
    sorted_roots = roots[order]
    run = np.r_[0, np.flatnonzero(sorted_roots[1:] != sorted_roots[:-1]) + 1] if n else []
    group_start = np.repeat(run, np.diff(np.r_[run, n])) if n else np.empty(0, np.int64)
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - group_start
    final = out / WORK / "clusters.npy"
    with atomic.atomic_path(final) as tmp, open(tmp, "wb") as f:
        np.save(f, np.stack([roots, size, rank]).astype(np.int64))
    return {"edges": int(len(a)), "clustered": int((size > 1).sum())}


def _source_out(i: int) -> str:
    return f"sources/{i}"


def _run_write(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    out, ann = Path(plan.out), _annotator(plan)
    i, j = unit["source"], unit["shard"]
    src = plan.meta["sources"][i]
    p = annotation_plan(src["path"], ann)
    entry = p["shards"][j]
    starts, names = _starts(plan)
    lo = int(starts[names.index(f"{i}-{j}")])
    hi = lo + entry["documents"]
    if "rounds" in plan.meta:
        cluster, size, rank = _components_of(plan).cluster_columns(lo, hi)
    else:
        clusters = np.load(out / WORK / "clusters.npy", mmap_mode="r")
        cluster, size, rank = (np.asarray(clusters[k, lo:hi]) for k in range(3))
    exact = np.load(out / WORK / "sig" / f"{i}-{j}.exact.npy")
    cols = {
        "dup_cluster": pa.array(cluster, pa.int64()),
        "dup_size": pa.array(size.astype(np.int32), pa.int32()),
        "dup_rank": pa.array(rank.astype(np.int32), pa.int32()),
        "exact_hash": pa.array(exact, pa.uint64()),
    }
    dest = out / _source_out(i)
    (dest / "shards").mkdir(parents=True, exist_ok=True)
    _write_parquet(
        _table(ann, entry["first_doc_id"], cols, entry["documents"]), dest / _path(entry)
    )
    # (the signature unit of this shard counted its documents: a job counts each once)
    # Its file's manifest entry, so that finalize reads no shard.
    return {"written": entry["documents"], "file": file_entry(dest, _path(entry))}


def _run_unit(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    kind = unit["id"].split("-", 1)[0]
    if kind in ("round", "resolve", "count", "tally"):
        return run_on_ranges(_components_of(plan), unit) or {}
    run = {
        "sig": _run_signatures,
        "bucket": _run_bucket,
        "clusters": _run_clusters,
        "write": _run_write,
    }[kind]
    return run(plan, unit)


def _written(plan: units.Plan, stats: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    """The write units with their stats."""
    every = (u for phase in plan.phases for u in phase)
    return [(u, st) for u, st in zip(every, stats, strict=True) if u["id"].startswith("write-")]


def _finalize(plan: units.Plan, stats: list[dict[str, Any]]) -> dict[str, Any]:
    out, ann = Path(plan.out), _annotator(plan)
    listed = []
    entries: list[dict[str, dict[str, Any]]] = [{} for _ in plan.meta["sources"]]
    for u, st in _written(plan, stats):
        if "file" in st:  # (a unit recorded before they did: its file is read)
            entries[u["source"]][st["file"]["path"]] = st["file"]
    for i, src in enumerate(plan.meta["sources"]):
        p = annotation_plan(src["path"], ann)
        dest = out / _source_out(i)
        (dest / "shards").mkdir(parents=True, exist_ok=True)
        atomic.write_text(dest / "plan.json", json.dumps(p, indent=1, sort_keys=True))
        commit(dest, p, entries=entries[i])
        listed.append(
            {
                "path": src["path"],
                "fingerprint": src["fingerprint"],
                "documents": src["documents"],
                "offset": src["offset"],
                "annotation": _source_out(i),
                "annotation_fingerprint": p["fingerprint"],
            }
        )
    if "rounds" in plan.meta:  # the buckets' edges, the count units' clustered documents
        clusters = {
            "edges": sum(s.get("edges", 0) for s in stats if "candidates" in s),
            "clustered": sum(s.get("clustered", 0) for s in stats),
        }
    else:
        clusters = next(s for s in stats if "clustered" in s)
    manifest = {
        "kind": KIND,
        "fingerprint": plan.meta["fingerprint"],
        "parents": [s["fingerprint"] for s in plan.meta["sources"]],
        "annotator": ann.describe(),
        "sources": listed,
        "partitions": plan.meta["partitions"],
        "totals": {
            "documents": plan.meta["documents"],
            "edges": clusters["edges"],
            "clustered_documents": clusters["clustered"],
        },
    }
    write_manifest(out, manifest)
    shutil.rmtree(out / WORK, ignore_errors=True)
    return read_manifest(out)


def dedup_group(
    sources: list[str], out: str, params: dict[str, Any] | None = None, *, workers: int = 1
) -> dict[str, Any]:
    """Plan and run the group in this process (or a local pool); the group's manifest."""

    plan = plan_group(sources, out, params)
    if is_complete(out):
        m = read_manifest(out)
        if m.get("fingerprint") != plan.meta["fingerprint"]:
            raise InputError(f"{out} already holds another finished artifact")
        return m
    return units.run_local(plan, workers=workers)


def _reads(plan: units.Plan, unit: dict[str, Any]) -> list[str] | None:
    """The files of the output a unit reads (on object storage it fetches exactly these and
    lists nothing): a signature unit none (it reads its tokenized shard), a bucket unit
    every signature unit's rows of its partition (its candidates' signatures and exact
    hashes it reads by ranges; a plan made before that fetches them whole), the
    clusters' units what ``range_reads`` says, a write unit the clusters of its
    documents' ranges (``cluster_reads``) and its shard's exact hashes."""
    kind = unit["id"].split("-", 1)[0]
    _, names = _starts(plan)
    if kind == "sig":
        return []
    if kind == "bucket":
        q = unit["partition"]
        keys = [f"{WORK}/keys/{name}/p{q}.npy" for name in names]
        if plan.meta.get("ranged_signatures"):  # its candidates' rows read by ranges
            return keys
        exact = [f"{WORK}/sig/{name}.exact.npy" for name in names if "rounds" in plan.meta]
        return [*keys, *(f"{WORK}/sig/{name}.npy" for name in names), *exact]
    if kind == "clusters":
        return [f"{WORK}/pairs/p{q}.npy" for q in range(plan.meta["partitions"])]
    if kind == "write":
        i, j = unit["source"], unit["shard"]
        hashes = f"{WORK}/sig/{i}-{j}.exact.npy"
        if "rounds" not in plan.meta:
            return [f"{WORK}/clusters.npy", hashes]
        starts, _ = _starts(plan)
        lo = int(starts[names.index(f"{i}-{j}")])
        hi = lo + plan.meta["sources"][i]["shards"][j]["documents"]
        return [*cluster_reads(_components_of(plan, ""), lo, hi), hashes]
    return range_reads(plan, _components_of(plan, ""), unit)


def _finalize_reads(plan: units.Plan, stats: list[dict[str, Any]]) -> list[str]:
    """Finalize reads the units' stats only (the write units' file entries), but for the
    files of write units recorded before they held them."""
    reads = []
    for u, st in _written(plan, stats):
        if "file" not in st:
            src = plan.meta["sources"][u["source"]]
            p = annotation_plan(src["path"], _annotator(plan))
            reads.append(f"{_source_out(u['source'])}/{_path(p['shards'][u['shard']])}")
    return reads


units.register_stage(
    STAGE,
    run_unit=_run_unit,
    finalize=_finalize,
    reads=_reads,
    finalize_reads=_finalize_reads,
    scratch=(f"{WORK}/",),
)

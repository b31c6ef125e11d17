"""The annotation artifact: (tokenized source x annotator x parameters) -> per-document
columns aligned with the tokenized source's documents, written beside it, never a copy
of its text or tokens.

Layout of an annotation directory::

    shards/<shard name>.parquet   one per tokenized shard: ``doc_id`` then the annotator's
                                  fields, row i = sidecar row i of that tokenized shard
    plan.json                     the fingerprint being built (a rerun with other inputs
                                  or parameters into the same directory is refused)
    manifest.json                 written last: the commit point

The fingerprint hashes the tokenized source's fingerprint and content digest with the
annotator's name, version and parameters: the same inputs and parameters name the same
bytes, and several annotations of one tokenized source never touch each other.

Units are the tokenized source's shards (``annotate_shard``): each reads its documents'
text (``shardcore.annotate.texts``), runs the annotator batch by batch and writes its
Parquet file under a temporary name renamed into place, so a unit either finished or
left nothing; a rerun skips finished units and a killed run heals by running again.
Corpus-level annotators (near-duplicates) write a per-shard scratch file in the units
(``work/``), then ``finish`` computes every shard's columns from all of them at once.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shardcore import atomic, storage
from shardcore import manifest as mf
from shardcore.annotate import Annotator, create
from shardcore.annotate.texts import shard_text_batches
from shardcore.errors import InputError, ManifestError
from shardcore.manifest import (
    content_digest,
    file_checksum,
    fingerprint,
    is_complete,
    read_manifest,
    write_manifest,
)
from shardcore.tokenized import TokenizedSource

KIND = "annotation"
PLAN = "plan.json"
DOC_ID = "doc_id"
_COMPRESSION = "zstd"


SUFFIX = ".parquet"
# what a corpus-level annotator says about the whole corpus (``Annotator.summary``)
SUMMARY = "summary.json"


def _shard_prefix(prefix: str) -> str:
    """The annotation's shard for the tokenized shard ``prefix``: same name, in shards/."""
    return f"shards/{Path(prefix).name}"


def plan(tokenized: str | os.PathLike, annotator: Annotator) -> dict[str, Any]:
    """What annotating ``tokenized`` with ``annotator`` writes: fingerprint, parents and
    the per-shard units (no file is touched)."""

    source = TokenizedSource(tokenized)
    m = source.manifest
    desc = annotator.describe()
    parents = [str(m["fingerprint"]), content_digest(m)]
    return {
        "kind": KIND,
        "fingerprint": fingerprint(KIND, parents=parents, params=desc),
        "parents": parents,
        "tokenized": {"path": str(source.path), "fingerprint": m["fingerprint"]},
        "annotator": desc,
        "shards": [
            {
                "index": i,
                "prefix": _shard_prefix(s["prefix"]),
                "documents": int(s["documents"]),
                "first_doc_id": int(s.get("first_doc_id", source._first[i])),
            }
            for i, s in enumerate(m["shards"])
        ],
    }


def _path(shard: Mapping[str, Any]) -> str:
    """The Parquet file of one of the annotation's shards, relative to the artifact: its
    prefix (a column of the manifest's shard table) and ``SUFFIX``."""
    return f"{shard['prefix']}{SUFFIX}"


def _start(out: Path, p: dict[str, Any]) -> None:
    """Create ``out`` for plan ``p``, or check that the build already there is the same."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "shards").mkdir(exist_ok=True)
    path = out / PLAN
    if path.exists():
        theirs = json.loads(path.read_text()).get("fingerprint")
        if theirs != p["fingerprint"]:
            raise InputError(
                f"{out}: holds another annotation build (fingerprint {theirs}, this one "
                f"{p['fingerprint']}); choose another output directory"
            )
        return
    atomic.write_text(path, json.dumps(p, indent=1, sort_keys=True))


def _table(annotator: Annotator, first_doc_id: int, columns: dict[str, Any], n: int) -> pa.Table:
    arrays = [pa.array(range(first_doc_id, first_doc_id + n), pa.int64())]
    names = [DOC_ID]
    for f in annotator.fields():
        if f.name not in columns:
            raise InputError(f"annotator {annotator.name!r} returned no column {f.name!r}")
        values = columns[f.name]
        arr = values if isinstance(values, pa.Array) else pa.array(values, type=f.type)
        if len(arr) != n:
            raise InputError(
                f"annotator {annotator.name!r}: column {f.name!r} has {len(arr)} values "
                f"for {n} documents"
            )
        arrays.append(arr.cast(f.type))
        names.append(f.name)
    return pa.Table.from_arrays(
        arrays, schema=pa.schema([pa.field(DOC_ID, pa.int64()), *annotator.fields()])
    )


def _write_parquet(table: pa.Table, final: Path) -> None:
    with atomic.atomic_path(final) as tmp:
        pq.write_table(table, tmp, compression=_COMPRESSION)


def annotate_shard(
    tokenized: str | os.PathLike,
    out: str | os.PathLike,
    annotator: Annotator,
    shard: int,
    *,
    batch_size: int = 1024,
    text_from: str = "auto",
) -> dict[str, Any]:
    """One unit: annotate tokenized shard ``shard`` (skipped when its file exists).
    Returns ``{"shard", "skipped", "documents", "text_from", "path"}`` (``path``: the file,
    or a corpus-level annotator's scratch, relative to ``out``)."""

    out = Path(out)
    p = plan(tokenized, annotator)
    _start(out, p)
    entry = p["shards"][shard]
    rel = _work_file(shard) if annotator.corpus_level else _path(entry)
    final = out / rel
    if final.exists():
        return {
            "shard": shard,
            "skipped": True,
            "documents": entry["documents"],
            "text_from": None,
            "path": rel,
        }
    source = TokenizedSource(tokenized)
    batches, origin, n = shard_text_batches(source, shard, text_from=text_from)
    if n != entry["documents"]:
        raise ManifestError(
            f"{source.path}: shard {shard} sidecar has {n} rows, "
            f"the manifest says {entry['documents']}"
        )
    if annotator.corpus_level:
        final.parent.mkdir(exist_ok=True)
        annotator.prepare(batches, final, first_doc_id=entry["first_doc_id"])
    else:
        parts: dict[str, list] = {}
        for texts in batches:
            for lo in range(0, len(texts), batch_size):
                cols = annotator.annotate(texts[lo : lo + batch_size])
                for k, v in cols.items():
                    parts.setdefault(k, []).append(v if isinstance(v, pa.Array) else pa.array(v))
        columns = {
            k: pa.concat_arrays([a.cast(_type(annotator, k)) for a in v]) for k, v in parts.items()
        }
        if not n:
            columns = {f.name: pa.array([], f.type) for f in annotator.fields()}
        _write_parquet(_table(annotator, entry["first_doc_id"], columns, n), final)
    return {"shard": shard, "skipped": False, "documents": n, "text_from": origin, "path": rel}


def _type(annotator: Annotator, name: str) -> pa.DataType:
    for f in annotator.fields():
        if f.name == name:
            return f.type
    raise InputError(f"annotator {annotator.name!r} returned an undeclared column {name!r}")


def _work_file(shard: int) -> str:
    return f"work/shard-{shard:05d}"


def finalize(
    tokenized: str | os.PathLike,
    out: str | os.PathLike,
    annotator: Annotator,
    entries: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """After every unit: (corpus-level annotators) compute and write every shard's
    columns, then write the manifest with each file's size and checksum. ``entries``:
    the manifest entries of files written already, by path (``file_entry``, as the units
    that wrote them recorded them): those files are neither written nor read here."""
    out = Path(out)
    p = plan(tokenized, annotator)
    entries = entries or {}
    if annotator.corpus_level:
        pending = [
            s for s in p["shards"] if _path(s) not in entries and not (out / _path(s)).exists()
        ]
        if annotator.has_summary and not (out / SUMMARY).exists():
            pending = p["shards"]
        if pending:
            work = [out / _work_file(s["index"]) for s in p["shards"]]
            missing = [str(w) for w in work if not w.exists()]
            if missing:
                raise ManifestError(f"{out}: unit not finished: {missing[0]}")
            per_shard = annotator.finish(work)
            if annotator.has_summary:  # before the columns: a rerun sees it missing first
                atomic.write_text(
                    out / SUMMARY,
                    json.dumps(annotator.summary(), indent=1, sort_keys=True, ensure_ascii=False),
                )
            for s, cols in zip(p["shards"], per_shard, strict=True):
                _write_parquet(
                    _table(annotator, s["first_doc_id"], cols, s["documents"]), out / _path(s)
                )
    commit(out, p, summary=annotator.has_summary, entries=entries)
    if annotator.corpus_level:
        shutil.rmtree(out / "work", ignore_errors=True)
    return read_manifest(out)


def file_entry(out: str | os.PathLike, rel: str) -> dict[str, Any]:
    """The manifest entry of the annotation's file ``rel``: path, size and checksum."""
    path = Path(out) / rel
    return {"path": rel, "size": path.stat().st_size, "xxh3": file_checksum(path)}


def commit(
    out: Path,
    p: dict[str, Any],
    *,
    summary: bool = False,
    entries: Mapping[str, dict[str, Any]] | None = None,
) -> None:
    """Write the manifest of the annotation ``out`` of plan ``p`` (every shard's file
    written): each file's size and checksum (from ``entries``, by path, when the unit
    that wrote the file recorded them; else read here), the totals; the commit point."""
    files, total_bytes = [], 0
    for s in p["shards"]:
        entry = (entries or {}).get(_path(s))
        if entry is None:
            if not (out / _path(s)).exists():
                raise ManifestError(f"{out}: unit {s['index']} not finished ({_path(s)} missing)")
            entry = file_entry(out, _path(s))
        total_bytes += entry["size"]
        files.append({"path": entry["path"], "size": entry["size"], "xxh3": entry["xxh3"]})
    # every unit is done, so no writer is live: temporaries left by killed ones go
    for stale in (out / "shards").glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    docs = sum(s["documents"] for s in p["shards"])
    if summary:
        size = (out / SUMMARY).stat().st_size
        total_bytes += size
        files.append({"path": SUMMARY, "size": size, "xxh3": file_checksum(out / SUMMARY)})
    manifest = {
        **p,
        "files": files,
        "totals": {
            "documents": docs,
            "bytes": total_bytes,
            "bytes_per_document": round(total_bytes / docs, 3) if docs else 0.0,
        },
    }
    write_manifest(out, manifest)


def annotate(
    tokenized: str | os.PathLike,
    out: str | os.PathLike,
    name: str,
    params: dict[str, Any] | None = None,
    *,
    batch_size: int = 1024,
    text_from: str = "auto",
    workers: int = 1,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Annotate every shard of ``tokenized`` with annotator ``name`` into ``out`` (units
    in ``workers`` processes) and return the manifest. A finished ``out`` of the same fingerprint is returned as it is;
    a partial one is completed (finished units are skipped)."""
    annotator = create(name, params)
    out = Path(out)
    p = plan(tokenized, annotator)
    if is_complete(out):
        m = read_manifest(out)
        if m.get("fingerprint") != p["fingerprint"]:
            raise InputError(
                f"{out} already holds a finished artifact; choose another output directory"
            )
        return m
    if workers < 1:
        raise InputError("workers must be at least 1")
    indices = [s["index"] for s in p["shards"]]
    if workers == 1 or len(indices) < 2:
        for i in indices:
            r = annotate_shard(
                tokenized, out, annotator, i, batch_size=batch_size, text_from=text_from
            )
            if progress is not None:
                progress(r)
    else:
        _start(out, p)  # once, before the workers race to create it
        ctx = multiprocessing.get_context("spawn")  # no forked model or thread state
        with ProcessPoolExecutor(min(workers, len(indices)), mp_context=ctx) as pool:
            futures = [
                pool.submit(
                    _unit,
                    str(tokenized),
                    str(out),
                    name,
                    annotator.params,
                    i,
                    batch_size,
                    text_from,
                )
                for i in indices
            ]
            for f in as_completed(futures):
                r = f.result()
                if progress is not None:
                    progress(r)
    return finalize(tokenized, out, annotator)


def _unit(
    tokenized: str, out: str, name: str, params: dict, shard: int, batch_size: int, text_from: str
) -> dict[str, Any]:
    return annotate_shard(
        tokenized, out, create(name, params), shard, batch_size=batch_size, text_from=text_from
    )


def read_summary(path: str | os.PathLike) -> dict[str, Any] | None:
    """The summary.json of a finished annotation (topic clusters' sizes, top terms and
    snippets), or None when its annotator writes none."""
    m = read_manifest(path)
    if not any(f["path"] == SUMMARY for f in m.get("files", [])):
        return None
    return json.loads((Path(path) / SUMMARY).read_text())


def read_annotation(path: str | os.PathLike, columns: list[str] | None = None) -> pa.Table:
    """Every shard of a finished annotation concatenated, by doc_id."""
    tables = list(annotation_shards(path, columns))
    return pa.concat_tables(tables) if tables else pa.table({DOC_ID: pa.array([], pa.int64())})


def annotation_shards(
    path: str | os.PathLike, columns: list[str] | None = None
) -> Iterator[pa.Table]:
    """The shards of a finished annotation one at a time, in order (one in memory). On
    object storage each shard's object is read and checked against the manifest, never a
    copy of the whole annotation."""
    m = read_manifest(path, kind=KIND)
    files = mf.files_by_path(m) if storage.is_remote(path) else None
    for s in m["shards"]:
        if files is None:
            yield pq.read_table(Path(path) / _path(s), columns=columns)
            continue
        entry = files.get(_path(s))
        if entry is None:
            raise ManifestError(f"{path}: its manifest lists no {_path(s)}")
        data = io.BytesIO(storage.read_checked(str(path), entry))
        yield pq.read_table(data, columns=columns)

"""Finalize: per split, the pool's ``documents.parquet``, checksums of every file and the
manifest (the validation pool's first, the main manifest last: the commit point).

The shards' checksums come from the units that wrote them (pass 2). A split of more than
FANOUT buckets keeps its documents table partitioned (its shards' sidecars, read in shard
order by ``PoolReader.documents``): its finalize reads no shard and writes only the
manifest, whatever the pool's size."""

from __future__ import annotations

import contextlib
import shutil
from array import array
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shardcore import atomic, units
from shardcore import manifest as mf
from shardcore.pool.io import file_entry
from shardcore.pool.layout import (
    DOCUMENTS_NAME,
    KIND,
    PARTITIONED,
    PASS1_DIR,
    SOURCE_COL,
    SOURCE_FP_COL,
    VAL_DIR,
    arrow_array,
    arrow_strings,
    as_numpy,
    partitioned,
    shard_prefix,
    split_dir,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq


def finalize_pool(plan: units.Plan, stats: Sequence[dict]) -> dict[str, Any]:
    """``stats``: every unit's, in plan order (``units.UnitResults``: read one at a time);
    pass 2's are the last ``len(plan.phases[-1])``. Returns the manifest as a reader gets it
    back (the shard table's views, not a list of every shard)."""
    phase2 = plan.phases[-1]
    first = len(stats) - len(phase2)

    def buckets(split: str) -> Iterator[tuple[int, dict]]:
        for i, u in enumerate(phase2):
            if u["split"] == split:
                yield u["bucket"], stats[first + i]

    val = None
    if any(u["split"] == "val" for u in phase2):
        val = _finalize_split(plan, "val", buckets)
    main = {}
    if val is not None:
        main["val"] = {
            "path": VAL_DIR,
            "fingerprint": val["fingerprint"],
            "num_records": val["num_records"],
            "documents": val["documents"],
        }
    _finalize_split(plan, "train", buckets, extra=main)
    shutil.rmtree(Path(plan.out) / PASS1_DIR, ignore_errors=True)
    return mf.read_manifest(plan.out)


def finalize_reads(plan: units.Plan, stats: Sequence[dict]) -> list[str]:
    """The files finalize reads (on object storage, it fetches exactly these): the
    documents sidecar of every shard, for the pool's documents table; none for a split
    whose table stays partitioned."""
    phase2 = plan.phases[-1]
    first = len(stats) - len(phase2)
    keys = []
    for i, u in enumerate(phase2):
        n = plan.meta["splits"][u["split"]]["num_buckets"]
        if partitioned(n):
            continue  # its stats are not read
        if stats[first + i]["records"]:
            base = "" if u["split"] == "train" else f"{VAL_DIR}/"
            keys.append(f"{base}{shard_prefix(u['bucket'], n)}.docs.parquet")
    return keys


def _finalize_split(
    plan: units.Plan,
    split: str,
    buckets: Callable[[str], Iterator[tuple[int, dict]]],
    extra: dict | None = None,
) -> dict:
    """Write the split's documents table (unless partitioned) and manifest (``extra``: more
    of the header); returns the manifest's header. Its shards' statistics are read one unit
    at a time into columns and its block checksums spilled to a file (``_ShardColumns``),
    so memory does not grow with the shards' dicts and checksum strings; a split whose
    units' stats do not fit columns (stats from before units listed their files, or files
    that are not each shard's own) is written from dicts as before."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta, params = plan.meta, plan.params
    info = meta["splits"][split]
    out_dir = split_dir(plan.out, split)
    out_dir.mkdir(parents=True, exist_ok=True)
    num_docs = num_tokens = padding = 0
    split_table = partitioned(info["num_buckets"])
    cols = _ShardColumns(info["num_buckets"])
    with (
        contextlib.nullcontext()
        if split_table
        else atomic.atomic_path(out_dir / DOCUMENTS_NAME) as tmp_docs,
        ThreadPoolExecutor(max_workers=1) as reads,
    ):
        writer = None
        fps = arrow_strings([s["fingerprint"] for s in meta["sources"]])
        pending = None  # the next shard's sidecar, read while the last one's rows are written
        for b, st in buckets(split):
            cols.add_files(st)
            if not st["records"]:
                continue
            prefix = shard_prefix(b, info["num_buckets"])
            cols.add_shard(prefix, st, first_document=num_docs)
            num_docs += st["documents"]
            num_tokens += st["tokens"]
            padding += st["padding"]
            if split_table:
                continue  # the shards' sidecars are the table: nothing read, nothing written
            ahead = reads.submit(_read_sidecar, out_dir / f"{prefix}.docs.parquet")
            if pending is not None:
                writer = _append_documents(writer, tmp_docs, pending.result(), fps)
            pending = ahead
        if pending is not None:
            writer = _append_documents(writer, tmp_docs, pending.result(), fps)
        if not split_table:
            if writer is None:
                writer = pq.ParquetWriter(tmp_docs, pa.schema([(SOURCE_COL, pa.int32())]))
            writer.close()
    header = {
        "kind": KIND,
        "split": split,
        "fingerprint": info["fingerprint"],
        "parents": [s["fingerprint"] for s in meta["sources"]],
        "sources": meta["sources"],
        "params": params,
        "shuffle": {
            "name": params["shuffle"],
            "num_buckets": info["num_buckets"],
            "seed": info["seed"],
            "options": params["shuffle_options"],
        },
        "tokenizer": meta["tokenizer"],
        "dtype": meta["dtype"],
        "seq_len": params["seq_len"],
        "record_tokens": params["seq_len"] + 1,
        "num_records": cols.records,
        "num_tokens": num_tokens,
        "padding_tokens": padding,
        "documents": num_docs,
        **(extra or {}),
    }
    if split_table:
        header["documents_table"] = PARTITIONED
    docs = file_entry(out_dir / DOCUMENTS_NAME, DOCUMENTS_NAME) if not split_table else None
    try:
        if cols.fits and cols.prefixes:
            cols.write(out_dir, header, docs)
            return header
    finally:
        cols.close()
    # Stats that do not fit columns: the shards and files as dicts, as before.
    pairs = list(buckets(split))
    shards, cumulative, first_document = [], [0], 0
    for b, st in pairs:
        if not st["records"]:
            continue
        shards.append(
            {
                "prefix": shard_prefix(b, info["num_buckets"]),
                "records": st["records"],
                "first_record": cumulative[-1],
                "documents": st["documents"],
                "first_document": first_document,
                "tokens": st["tokens"],
                "padding": st["padding"],
            }
        )
        cumulative.append(cumulative[-1] + st["records"])
        first_document += st["documents"]
    files = _file_entries(out_dir, pairs, documents=not split_table)
    manifest = {**header, "shards": shards, "cumulative_records": cumulative, "files": files}
    mf.write_manifest(out_dir, manifest)
    return header


def _read_sidecar(path: Path) -> pa.Table:
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as f:
        return f.read()


def _append_documents(
    writer: pq.ParquetWriter | None, path: Path | None, table: pa.Table, fps: pa.Array
) -> pq.ParquetWriter:
    """Append a shard's sidecar rows, with each row's source fingerprint, to the documents
    table at ``path`` (its writer opened on the first shard's schema)."""
    import pyarrow.parquet as pq

    src = as_numpy(table.column(SOURCE_COL))
    table = table.append_column(SOURCE_FP_COL, fps.take(arrow_array(src)))
    if writer is None:
        writer = pq.ParquetWriter(path, table.schema)
    writer.write_table(table.cast(writer.schema))
    return writer


_FIELDS = ("documents", "first_document", "first_record", "padding", "records", "tokens")


class _ShardColumns:
    """A split's shards as columns while its units' stats are read one by one: per-shard
    numbers (``_FIELDS``, in the order ``write_manifest`` sorts them), each suffix's file
    sizes, xxh3s and block sizes as integers, and the block checksums spilled to a file per
    suffix (``manifest.BlockSpill``). ``write`` gives the manifest ``write_manifest`` writes
    from the same shards as dicts, byte for byte. ``fits`` turns False when the stats do
    not fit this shape (then the caller writes from dicts)."""

    def __init__(self, num_buckets: int):
        self.num_buckets = num_buckets
        self.prefixes: list[str] = []
        self.fields = {name: array("q") for name in _FIELDS}
        self.cumulative = array("q", [0])
        self.suffixes: dict[str, dict] = {}
        self.fits = True

    @property
    def records(self) -> int:
        return self.cumulative[-1]

    def add_files(self, st: dict) -> None:
        if "files" not in st:
            self.fits = False
        elif st["files"] and not st["records"]:
            self.fits = False  # files of an empty shard: not a row of the table

    def add_shard(self, prefix: str, st: dict, *, first_document: int) -> None:
        values = {
            "documents": st["documents"],
            "first_document": first_document,
            "first_record": self.cumulative[-1],
            "padding": st["padding"],
            "records": st["records"],
            "tokens": st["tokens"],
        }
        for name in _FIELDS:
            if type(values[name]) is not int:
                self.fits = False
                return
            self.fields[name].append(values[name])
        self.cumulative.append(self.cumulative[-1] + st["records"])
        row = len(self.prefixes)
        self.prefixes.append(prefix)
        if not self.fits:
            return
        seen = set()
        for e in st.get("files") or ():
            rel = str(e["path"])
            head, sep, name = rel.rpartition("/")
            stem, dot, _ = name.partition(".")
            if not dot or f"{head}{sep}{stem}" != prefix:
                self.fits = False  # not the shard's own file: the dict writer places it
                return
            sfx = rel[len(prefix) :]
            cols = self.suffixes.get(sfx)
            if cols is None:
                if row:
                    self.fits = False  # a suffix the shards before lack
                    return
                cols = self.suffixes[sfx] = {
                    "size": array("Q"),
                    "xxh3": array("Q"),
                    "block_size": array("I"),
                    "block_count": array("q"),
                    "blocks": mf.BlockSpill(),
                }
            blocks = np.frombuffer(bytes.fromhex(e.get("blocks") or ""), dtype=">u8")
            has = bool(e.get("block_size")) and "blocks" in e
            cols["size"].append(int(e["size"]))
            cols["xxh3"].append(int(e["xxh3"], 16))
            cols["block_size"].append(int(e.get("block_size") or 0) if has else 0)
            cols["block_count"].append(len(blocks))
            cols["blocks"].append(blocks.astype(np.uint64))
            seen.add(sfx)
        if seen != set(self.suffixes):
            self.fits = False  # a shard without one of the suffixes

    def write(self, out_dir: Path, header: dict, docs: dict | None) -> None:
        shard_files = {
            sfx: {
                name: (values if name == "blocks" else np.frombuffer(values, dtype=values.typecode))
                for name, values in self.suffixes[sfx].items()
            }
            for sfx in sorted(self.suffixes)
        }
        mf.write_manifest_columns(
            out_dir,
            header,
            prefixes=self.prefixes,
            fields={name: np.frombuffer(self.fields[name], dtype=np.int64) for name in _FIELDS},
            cumulative=np.frombuffer(self.cumulative, dtype=np.int64),
            shard_files=shard_files,
            extra_files=[docs] if docs is not None else [],
            has_files=True,
        )

    def close(self) -> None:
        for cols in self.suffixes.values():
            cols["blocks"].close()


def _file_entries(
    out_dir: Path, buckets: list[tuple[int, dict]], *, documents: bool = True
) -> list[dict]:
    """Every file's manifest entry, in path order: the shards' from their units' stats
    (checksummed where they were written), ``documents.parquet``'s hashed here. Stats
    recorded before units reported their files: every file is hashed here."""
    if not all("files" in st for _, st in buckets):
        files = []
        for path in sorted(out_dir.rglob("*")):
            rel = path.relative_to(out_dir).as_posix()
            if path.is_file() and _is_artifact_file(rel):
                files.append(file_entry(path, rel))
        return files
    files = [e for _, st in buckets for e in st["files"]]
    if documents:
        files.append(file_entry(out_dir / DOCUMENTS_NAME, DOCUMENTS_NAME))
    return sorted(files, key=lambda e: e["path"])


def _is_artifact_file(rel: str) -> bool:
    top = rel.split("/", 1)[0]
    if top in (units.MARKER_DIR, PASS1_DIR, VAL_DIR) or rel.startswith("."):
        return False
    return rel not in (*mf.MANIFEST_FILES, units.PLAN_NAME) and not rel.endswith(".tmp")

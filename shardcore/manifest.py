"""Manifests, fingerprints and checksums: the bookkeeping every artifact carries.

An artifact is a directory of files plus ``manifest.json``. The manifest is written last,
atomically (``shardcore.atomic``): it is the commit point, so a directory without
one is an unfinished build, never a result. Fingerprints hash the inputs' fingerprints, the
parameters and the data format version, so the same inputs and seed name the same bytes.

Format 3 (written now) keeps the manifest small whatever the number of shards: the JSON
header holds what describes the artifact (kind, fingerprint, parents, parameters,
tokenizer, totals) and, under ``layout``, the description and xxh3 of two binary files
written before it: the shard table (``manifest.shards``: per-shard counts, cumulative
records, the size, xxh3 and first block checksum of each shard file, and integer keys
from which ``shardcore.formats.shard_name`` derives the shard names) and the block
checksums (``manifest.blocks``). Both are laid out in ``shardcore.formats``. A reader
parses the header only and memory-maps the two files (on object storage, range-reads
them): ``read_manifest`` returns the header as a dict whose ``shards``, ``files`` and
``cumulative_records`` are views onto the table (``ShardsView``, ``FilesView``, a
read-only int64 array), so ``manifest["shards"][k]`` or a binary search over
``manifest["cumulative_records"]`` costs the pages it touches, not the artifact's size.
Formats 1 and 2 (one JSON document with every shard and file, and each file's block
checksums as hex) still read, as plain lists.
"""

from __future__ import annotations

import heapq
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from shardcore import atomic, formats, storage
from shardcore.errors import ManifestError, WrongKindError
from shardcore.shard_table import (
    BLOCKS_NAME,
    TABLE_NAME,
    FilesView,
    RecordsColumn,
    ShardsView,
    ShardTable,
)
from shardcore.shard_table import bisect_records as bisect_records  # the public name

# 3: the header plus the shard table and block checksums files (module docstring).
# 2: documents sidecars keep the user's properties in the struct column ``props``
# (shardcore.props); format 1 kept them as top-level columns. All three are read.
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
# The version that enters fingerprints: that of the data files. Format 3 changed how the
# manifest is stored, not one byte of what it describes, so an artifact built again names
# the same bytes with the same fingerprint (and a format-2 copy of it stays its equal).
FINGERPRINT_FORMAT = 2
MANIFEST_NAME = "manifest.json"
# The manifest's files: none is listed among the artifact's files.
MANIFEST_FILES = (MANIFEST_NAME, TABLE_NAME, BLOCKS_NAME)
LAYOUT = "layout"
# Keys of a manifest dict that format 3 stores in the table, not in the header.
TABLE_KEYS = ("shards", "cumulative_records", "files")
_CHUNK = 8 << 20


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def fingerprint(kind: str, *, parents: list[str] | tuple[str, ...] = (), params: Any = None) -> str:
    """xxh3-128 of the kind, the parents' fingerprints, the parameters and
    FINGERPRINT_FORMAT."""
    payload = {
        "kind": kind,
        "format": FINGERPRINT_FORMAT,
        "parents": list(parents),
        "params": params,
    }
    return xxhash.xxh3_128_hexdigest(canonical_json(payload))


def file_entries(manifest: dict[str, Any]) -> Sequence[dict[str, Any]]:
    """The artifact's files: ``manifest["files"]``, entries ``{"path", "size", "xxh3",
    "block_size", "blocks"}`` (``path`` relative to the artifact), in the order written: a
    list (formats 1 and 2) or a ``FilesView`` onto the shard table (format 3). Mixtures
    and materialized copies built before held a mapping ``path -> entry`` instead, read
    here as the same list."""
    entries = manifest.get("files") or []
    if isinstance(entries, FilesView):
        return entries
    if isinstance(entries, dict):
        return [{"path": rel, **entry} for rel, entry in sorted(entries.items())]
    return list(entries)


def files_by_path(manifest: dict[str, Any]) -> Mapping[str, dict[str, Any]]:
    """``file_entries`` keyed by relative path (format 3: a lookup in the table, one
    binary search per path, nothing built whole)."""
    entries = manifest.get("files")
    if isinstance(entries, FilesView):
        return entries.by_path()
    return {str(e["path"]): e for e in file_entries(manifest)}


def content_digest(manifest: dict[str, Any]) -> str:
    """xxh3-128 of the manifest's file list (path, size, xxh3): what the artifact's bytes
    are, where its fingerprint says what they were built from. A stage's fingerprint
    includes its inputs' content digests, so an input whose bytes differ (a corrupted
    shard, checksummed as it was) never gives an output the clean input's fingerprint.
    Format 3 stores it in the header, computed the same way when it was written."""
    layout = manifest.get(LAYOUT)
    if layout and "content_digest" in layout:
        return str(layout["content_digest"])
    return _digest_of_files(
        (str(e.get("path")), e.get("size"), e.get("xxh3")) for e in file_entries(manifest)
    )


def _digest_of_files(files: Iterable[tuple[str, Any, Any]]) -> str:
    return xxhash.xxh3_128_hexdigest(canonical_json(sorted(files)))


def total_bytes(manifest: dict[str, Any]) -> int:
    """The bytes of the artifact's listed files (format 3: from the header)."""
    layout = manifest.get(LAYOUT)
    if layout and "file_bytes" in layout:
        return int(layout["file_bytes"])
    return sum(int(e.get("size") or 0) for e in file_entries(manifest))


def num_shards(manifest: dict[str, Any]) -> int:
    """How many shards the artifact has (format 3: from the header)."""
    layout = manifest.get(LAYOUT)
    if layout:
        return int(layout["table"]["rows"]) if layout.get("has_shards") else 0
    return len(manifest.get("shards") or [])


def shard_column(manifest: dict[str, Any], name: str) -> np.ndarray:
    """A per-shard number of every shard as an array (format 3: the table's column, not a
    copy; formats 1 and 2: gathered from the list)."""
    shards = manifest.get("shards") or []
    if isinstance(shards, ShardsView):
        return shards.column(name)
    return np.asarray([sh[name] for sh in shards], dtype=np.int64)


def shard_prefix(manifest: dict[str, Any], shard: int) -> str:
    """The name (path prefix) of shard ``shard`` (format 3: from its key, one read)."""
    shards = manifest["shards"]
    if isinstance(shards, ShardsView):
        if not 0 <= shard < len(shards):
            raise IndexError(f"shard {shard} out of range [0, {len(shards)})")
        return shards.table.name(shard)
    return str(shards[shard]["prefix"])


def sidecar_entries(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's own files besides ``manifest.json`` (format 3: the shard table and
    the block checksums), as entries ``{"path", "size", "xxh3"}``: copied and checked
    before the header, which is written last."""
    layout = manifest.get(LAYOUT)
    if not layout:
        return []
    return [
        {"path": layout[part]["path"], "size": layout[part]["size"], "xxh3": layout[part]["xxh3"]}
        for part in ("table", "blocks")
    ]


def _blocks_of(hex_blocks: str, where: str) -> np.ndarray:
    if len(hex_blocks) % 16:
        raise ManifestError(f"{where}: block checksums are not 16-digit hex")
    return np.frombuffer(bytes.fromhex(hex_blocks), dtype=">u8").astype(np.uint64)


def file_checksum(path: str | os.PathLike) -> str:
    """xxh3-64 of a file's bytes, streamed."""
    h = xxhash.xxh3_64()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(directory: str | os.PathLike, manifest: dict[str, Any]) -> Path:
    """Write the manifest of the artifact at ``directory``: the shard table and the block
    checksums, then ``manifest.json`` atomically, last; this marks the artifact complete.
    ``manifest`` is the dict a reader gets back: ``shards`` (dicts with a ``prefix`` and
    numbers), ``cumulative_records`` and ``files`` (entries as ``file_entries``) go to the
    table, everything else to the header."""
    header = {k: v for k, v in manifest.items() if k not in TABLE_KEYS and k != LAYOUT}
    header.pop("format_version", None)
    shards = manifest.get("shards")
    files = list(file_entries(manifest)) if "files" in manifest else None
    where = str(directory)
    if shards is not None:
        shards = list(shards)
        prefixes = [str(sh["prefix"]) for sh in shards]
        fields: dict[str, np.ndarray] = {}
        for name in sorted({k for sh in shards for k in sh if k != "prefix"}):
            values = [sh.get(name) for sh in shards]
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                raise ManifestError(
                    f"{where}: shard field {name!r} must be a number in every shard"
                )
            kind = np.int64 if all(isinstance(v, int) for v in values) else np.float64
            fields[name] = np.asarray(values, dtype=kind)
    else:
        prefixes, fields = [], {}
    row_of = {p: i for i, p in enumerate(prefixes)}
    # Files of a shard are its prefix plus a suffix; a suffix every shard has is a column.
    per_suffix: dict[str, dict[int, dict]] = {}
    for e in files or []:
        rel = str(e["path"])
        head, sep, name = rel.rpartition("/")
        stem, dot, _ = name.partition(".")
        row = row_of.get(f"{head}{sep}{stem}") if dot else None
        if row is not None:
            per_suffix.setdefault(rel[len(prefixes[row]) :], {})[row] = e
    suffixes = sorted(s for s, rows in per_suffix.items() if len(rows) == len(prefixes))
    in_table = {id(per_suffix[s][r]) for s in suffixes for r in range(len(prefixes))}
    extra = [e for e in files or [] if id(e) not in in_table]
    shard_files = {
        sfx: _file_columns([per_suffix[sfx][r] for r in range(len(prefixes))], where)
        for sfx in suffixes
    }
    return write_manifest_columns(
        directory,
        header,
        prefixes=prefixes if shards is not None else None,
        fields=fields,
        cumulative=(
            np.asarray(manifest["cumulative_records"], dtype=np.int64)
            if "cumulative_records" in manifest
            else None
        ),
        shard_files=shard_files,
        extra_files=extra,
        has_files=files is not None,
    )


def _file_columns(entries: list[dict], where: str) -> dict[str, np.ndarray]:
    """One suffix's file entries as columns: size, xxh3, block_size and the checksums."""
    sizes = np.asarray([int(e["size"]) for e in entries], dtype=np.uint64)
    xxh = np.asarray([int(e["xxh3"], 16) for e in entries], dtype=np.uint64)
    bs = np.asarray([int(e.get("block_size") or 0) for e in entries], dtype=np.uint32)
    blocks = [_blocks_of(e.get("blocks") or "", f"{where}: {e['path']}") for e in entries]
    counts = np.asarray([len(b) for b in blocks], dtype=np.int64)
    has = np.asarray([bool(e.get("block_size")) and "blocks" in e for e in entries], dtype=bool)
    return {
        "size": sizes,
        "xxh3": xxh,
        "block_size": np.where(has, bs, 0).astype(np.uint32),
        "block_count": counts,
        "blocks": np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.uint64),
    }


class BlockSpill:
    """Block checksums appended a file at a time to a temporary file (8 bytes each), read
    back in chunks when the manifest is written: a writer of many shards holds none of
    them in memory (``write_manifest_columns`` takes it as a suffix's ``blocks``)."""

    CHUNK = 1 << 20  # checksums per chunk read back

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="shardyard-blocks-")
        self._count = 0

    def append(self, blocks: np.ndarray) -> None:
        self._file.write(np.ascontiguousarray(blocks, dtype="<u8").tobytes())
        self._count += len(blocks)

    def __len__(self) -> int:
        return self._count

    def chunks(self) -> Iterator[np.ndarray]:
        self._file.flush()
        for start in range(0, self._count, self.CHUNK):
            n = min(self.CHUNK, self._count - start)
            raw = os.pread(self._file.fileno(), n * 8, start * 8)
            yield np.frombuffer(raw, dtype="<u8")

    def close(self) -> None:
        self._file.close()


def write_manifest_columns(
    directory: str | os.PathLike,
    header: dict[str, Any],
    *,
    prefixes: list[str] | None = None,
    keys: np.ndarray | None = None,
    names: dict[str, Any] | None = None,
    fields: dict[str, np.ndarray] | None = None,
    cumulative: np.ndarray | None = None,
    shard_files: dict[str, dict[str, np.ndarray]] | None = None,
    extra_files: list[dict[str, Any]] | None = None,
    has_files: bool = True,
) -> Path:
    """Write a format-3 manifest from columns (``write_manifest`` calls this; a writer with
    many shards can call it directly). Shards are named by ``prefixes`` or by ``keys`` and
    a ``names`` pattern (``formats.shard_name``); ``fields`` are per-shard numbers;
    ``shard_files`` maps a suffix (``.bin``) to its columns ``size``, ``xxh3`` (u64),
    ``block_size``, ``block_count`` and the concatenated checksums ``blocks``; other files
    are ``extra_files`` entries. The table and the checksums are written first, the header
    last."""
    out = Path(directory)
    where = str(out)
    fields = dict(fields or {})
    shard_files = dict(shard_files or {})
    has_shards = prefixes is not None or keys is not None
    columns: dict[str, np.ndarray] = {}
    if prefixes is not None:
        inferred = formats.infer_names(prefixes)
        if inferred is not None:
            names, keys = inferred
        else:
            encoded = [p.encode() for p in prefixes]
            offsets = np.zeros(len(encoded) + 1, dtype=np.uint64)
            np.cumsum([len(b) for b in encoded], out=offsets[1:])
            columns["name_offsets"] = offsets
            columns["name_bytes"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
            names = None
    rows = 0
    if keys is not None:
        keys = np.asarray(keys, dtype=np.int64)
        columns["key"] = keys
        rows = len(keys)
    elif prefixes is not None:
        rows = len(prefixes)
    for name, values in fields.items():
        if len(values) != rows:
            raise ManifestError(
                f"{where}: shard field {name!r} has {len(values)} values, {rows} shards"
            )
        columns[f"field.{name}"] = np.asarray(values)
    if cumulative is not None:
        columns["cumulative_records"] = np.asarray(cumulative, dtype=np.int64)
    # Block checksums: extra files first, then each suffix's files in shard order.
    block_parts, nblocks = [], 0
    extra_entries = []
    for e in sorted(extra_files or [], key=lambda e: str(e["path"])):
        blocks = _blocks_of(e.get("blocks") or "", f"{where}: {e['path']}")
        has = bool(e.get("block_size")) and "blocks" in e
        extra_entries.append(
            {
                "path": str(e["path"]),
                "size": int(e["size"]),
                "xxh3": str(e["xxh3"]),
                "block_size": int(e.get("block_size") or 0) if has else 0,
                "block": nblocks if has else -1,
                "block_count": len(blocks) if has else 0,
            }
        )
        if has:
            block_parts.append(blocks)
            nblocks += len(blocks)
    for sfx, cols in shard_files.items():
        counts = np.asarray(cols["block_count"], dtype=np.int64)
        if len(counts) != rows:
            raise ManifestError(f"{where}: {len(counts)} {sfx} files for {rows} shards")
        first = np.zeros(rows, dtype=np.int64)
        if rows:
            np.cumsum(counts[:-1], out=first[1:])
        has = np.asarray(cols["block_size"]) > 0  # type: ignore[assignment]
        columns[f"size{sfx}"] = np.asarray(cols["size"], dtype=np.uint64)
        columns[f"xxh3{sfx}"] = np.asarray(cols["xxh3"], dtype=np.uint64)
        columns[f"block_size{sfx}"] = np.asarray(cols["block_size"], dtype=np.uint32)
        columns[f"block{sfx}"] = np.where(has, first + nblocks, -1)
        blocks = cols["blocks"]
        if not isinstance(blocks, BlockSpill):
            blocks = np.asarray(blocks, dtype=np.uint64)
        if len(blocks) != int(counts.sum()):
            raise ManifestError(f"{where}: {sfx} block checksums do not add up to their counts")
        block_parts.append(blocks)
        nblocks += len(blocks)
    out.mkdir(parents=True, exist_ok=True)
    table = formats.write_table(out / TABLE_NAME, columns)
    # Written part by part (a spill file's chunk by chunk): the checksums are never all in
    # memory at once.
    blocks_desc = formats.write_column_parts(out / BLOCKS_NAME, "xxh3", block_parts, np.uint64)
    total_blocks = sum(len(part) for part in block_parts)
    content, file_bytes = _columns_digest(
        rows, keys, names, columns, shard_files, extra_entries, has_shards
    )
    layout = {
        "table": {"path": TABLE_NAME, "rows": rows, **table},
        "blocks": {"path": BLOCKS_NAME, "count": int(total_blocks), **blocks_desc},
        "names": names,
        "has_shards": has_shards,
        "has_files": has_files,
        "shard_fields": list(fields),
        "suffixes": list(shard_files),
        "extra_files": extra_entries,
        "content_digest": content,
        "file_bytes": file_bytes,
    }
    data = {"format_version": FORMAT_VERSION, **header, LAYOUT: layout}
    return atomic.write_bytes(
        out / MANIFEST_NAME, json.dumps(data, indent=1, sort_keys=True, default=str).encode()
    )


def _columns_digest(
    rows: int,
    keys: np.ndarray | None,
    names: dict[str, Any] | None,
    columns: dict[str, np.ndarray],
    shard_files: dict[str, dict[str, np.ndarray]],
    extra: list[dict[str, Any]],
    has_shards: bool,
) -> tuple[str, int]:
    """``content_digest`` and ``total_bytes`` of the files being written, from columns."""
    if has_shards and names is not None and keys is not None:  # names come with keys

        def prefix(i: int) -> str:
            return formats.shard_name(names, int(keys[i]))

    elif has_shards:
        offsets, raw = columns["name_offsets"], columns["name_bytes"].tobytes()

        def prefix(i: int) -> str:
            return raw[offsets[i] : offsets[i + 1]].decode()

    if has_shards and _streams_in_order(rows, prefix):
        return _streamed_digest(rows, prefix, shard_files, extra)
    prefixes = [prefix(i) for i in range(rows)] if has_shards else []
    files = [(e["path"], e["size"], e["xxh3"]) for e in extra]
    total = sum(e["size"] for e in extra)
    for sfx, cols in shard_files.items():
        sizes = np.asarray(cols["size"], dtype=np.uint64)
        total += int(sizes.sum())
        hexes = np.asarray(cols["xxh3"], dtype=np.uint64).astype(">u8").tobytes().hex()
        files += [
            (p + sfx, int(size), hexes[16 * i : 16 * i + 16])
            for i, (p, size) in enumerate(zip(prefixes, sizes.tolist(), strict=True))
        ]
    return _digest_of_files(files), total


def _streams_in_order(rows: int, prefix: Callable[[int], str]) -> bool:
    """Whether the shards' files, listed shard by shard (each shard's suffixes in order),
    are in path order: each prefix sorts before the next and is not a beginning of it
    (``pool-00007`` before ``pool-00008``, not ``pool-7`` before ``pool-70``)."""
    last = None
    for i in range(rows):
        name = prefix(i)
        if last is not None and (name <= last or name.startswith(last)):
            return False
        last = name
    return True


def _streamed_digest(
    rows: int,
    prefix: Callable[[int], str],
    shard_files: dict[str, dict[str, np.ndarray]],
    extra: list[dict[str, Any]],
) -> tuple[str, int]:
    """``_columns_digest`` without the list of every file: the files come in path order
    (``_streams_in_order``), merged with the extra files, and are hashed as the JSON of
    the sorted list is written, element by element."""
    suffixes = sorted(shard_files)
    sizes = {sfx: np.asarray(shard_files[sfx]["size"], dtype=np.uint64) for sfx in suffixes}
    xxh = {sfx: np.asarray(shard_files[sfx]["xxh3"], dtype=np.uint64) for sfx in suffixes}

    def shard_files_in_order() -> Iterator[tuple[str, int, str]]:
        for i in range(rows):
            p = prefix(i)
            for sfx in suffixes:
                yield (p + sfx, int(sizes[sfx][i]), f"{int(xxh[sfx][i]):016x}")

    extras = sorted((e["path"], e["size"], e["xxh3"]) for e in extra)
    digest = xxhash.xxh3_128()
    digest.update(b"[")
    for k, item in enumerate(heapq.merge(extras, shard_files_in_order())):
        digest.update((b"," if k else b"") + canonical_json(list(item)))
    digest.update(b"]")
    total = sum(e["size"] for e in extra) + sum(int(v.sum()) for v in sizes.values())
    return digest.hexdigest(), total


def parse_manifest(
    data: bytes | str, where: str, *, source: str | os.PathLike | Any | None = None
) -> dict[str, Any]:
    """A manifest from its bytes; ``where`` names it in errors. A format-3 header needs the
    ``source`` of its table: the artifact's local directory or its ``storage.Store``."""
    try:
        parsed = json.loads(data)
    except ValueError as exc:
        raise ManifestError(f"{where}: unreadable manifest: {exc}") from exc
    except RecursionError:
        # Python's JSON reader recurses once per level: a file nested thousands of levels
        # deep (no manifest is more than a few) would otherwise end the process's call.
        raise ManifestError(
            f"{where}: unreadable manifest: arrays or objects nested too deeply "
            "(a manifest nests a few levels)"
        ) from None
    if not isinstance(parsed, dict):
        raise ManifestError(f"{where}: unreadable manifest: not a JSON object")
    version = parsed.get("format_version")
    if version not in READABLE_VERSIONS:
        raise ManifestError(
            f"{where}: format_version {version!r}, this shardcore reads "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    if version >= 3:
        layout = parsed.get(LAYOUT)
        if not isinstance(layout, dict) or "table" not in layout or "blocks" not in layout:
            raise ManifestError(f"{where}: format 3 without its '{LAYOUT}' (table and blocks)")
        if source is None:
            source = str(Path(where).parent)
        table = ShardTable(layout, source, where)
        if layout.get("has_shards"):
            parsed["shards"] = ShardsView(table)
        if "cumulative_records" in layout["table"]["columns"]:
            parsed["cumulative_records"] = RecordsColumn(table, "cumulative_records")
        if layout.get("has_files", True):
            parsed["files"] = FilesView(table)
    return parsed


def check_kind(manifest: Mapping[str, Any], kind: str | tuple[str, ...], where: object) -> None:
    """Refuse a manifest whose ``kind`` is not ``kind`` (one kind or a tuple of accepted
    kinds) with a WrongKindError naming ``where`` (the artifact), the kind found and the
    kinds expected: the one check of every reader that takes a manifest read elsewhere."""
    expected = (kind,) if isinstance(kind, str) else tuple(kind)
    found = manifest.get("kind")
    if found not in expected:
        raise WrongKindError(str(where), found, expected)


def read_manifest(
    directory: str | os.PathLike, *, kind: str | tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The manifest of the artifact at ``directory`` (a local path or an s3:// URL). With
    ``kind`` (one kind or a tuple of accepted kinds), an artifact of another kind is
    refused by a WrongKindError (``check_kind``)."""
    manifest = _read_manifest(directory)
    if kind is not None:
        check_kind(manifest, kind, directory)
    return manifest


def _read_manifest(directory: str | os.PathLike) -> dict[str, Any]:
    if storage.is_remote(directory):
        store = storage.open_store(directory)
        # Format 3: the header only; the shard table and block checksums are range-read
        # from the store when a reader asks for them.
        return parse_manifest(manifest_bytes(store), store.location(MANIFEST_NAME), source=store)
    directory = Path(directory)
    path = directory / MANIFEST_NAME if directory.is_dir() or not directory.suffix else directory
    if not directory.exists():
        raise ManifestError(f"{directory}: no such file or directory")
    if not path.exists():
        raise ManifestError(
            f"{directory}: no {MANIFEST_NAME} (not an artifact, or its build did not finish)"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"{path}: unreadable manifest: {exc}") from exc
    return parse_manifest(data, str(path), source=path.parent)


def manifest_bytes(store: storage.Store) -> bytes:
    """The manifest file of the artifact in ``store``; a ManifestError says whether the
    artifact is unfinished or absent."""
    try:
        return store.read_bytes(MANIFEST_NAME)
    except FileNotFoundError:
        if store.list():
            raise ManifestError(
                f"{store.url}: no {MANIFEST_NAME} (not an artifact, or its build did not finish)"
            ) from None
        raise ManifestError(f"{store.url}: no such artifact") from None


def is_complete(directory: str | os.PathLike) -> bool:
    if storage.is_remote(directory):
        return storage.open_store(directory).exists(MANIFEST_NAME)
    return (Path(directory) / MANIFEST_NAME).exists()

"""Verify an artifact against its manifest, and describe files so that it can be verified.

Generic part (every kind): a manifest lists its files as ``file_entry`` dicts: relative
path, size, xxh3-64 of the whole file and xxh3-64 of each block (``block_size`` bytes, at
most ``MAX_BLOCKS`` blocks, so a 256 MB shard costs 2 KB of ``manifest.blocks`` in format 3,
read per file when a reader checks it; 4 KB of hex in format 2). ``verify`` re-reads
every file (and format 3's shard table and checksums, against the header) and reports a
missing file, a wrong size, or the exact block range whose bytes changed. Kind-specific checks register with ``register_check(kind, fn)`` and run after the
generic ones; the tokenized-source checks (IndexedDataset structure, EOS at every document
end, token ids inside the vocabulary, sidecar alignment) are here, and name the shard and
the byte offset of the first inconsistency they find.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from shardcore import manifest as mf
from shardcore import storage
from shardcore.errors import CorruptDataError, FormatError, ManifestError
from shardcore.formats import (
    IDX_SEQUENCES_OFFSET,
    IndexedReader,
    idx_document_offset,
    idx_length_offset,
    idx_pointer_offset,
)
from shardcore.manifest import (
    FilesView,
    file_checksum,
    file_entries,
    files_by_path,
    read_manifest,
    sidecar_entries,
)

MIN_BLOCK = 4096
MAX_BLOCKS = 256
_READ = 8 << 20
_CHECK_READ = 1 << 20


@dataclass(frozen=True)
class Problem:
    path: str  # relative to the artifact directory
    offset: int | None  # byte offset of the first bad byte (or of its block)
    message: str

    def __str__(self) -> str:
        where = self.path if self.offset is None else f"{self.path} at byte {self.offset}"
        return f"{where}: {self.message}"


@dataclass
class Report:
    directory: str
    kind: str
    files_checked: int
    bytes_checked: int
    problems: list[Problem]

    @property
    def ok(self) -> bool:
        return not self.problems


def block_size_for(size: int, *, most: int | None = None) -> int:
    """The smallest power of two >= MIN_BLOCK that cuts ``size`` into <= MAX_BLOCKS blocks,
    or at most ``most`` bytes (a file read by ranges a few samples at a time: a schedule)."""
    bs = MIN_BLOCK
    while bs * MAX_BLOCKS < size and (most is None or bs * 2 <= most):
        bs *= 2
    return bs


def _hash_blocks(path: Path, block_size: int) -> tuple[int, str, list[str]]:
    whole = xxhash.xxh3_64()
    blocks = []
    size = 0
    with open(path, "rb") as f:
        while True:
            data = f.read(max(_READ - _READ % block_size, block_size))
            if not data:
                break
            size += len(data)
            whole.update(data)
            for i in range(0, len(data), block_size):
                blocks.append(xxhash.xxh3_64_hexdigest(data[i : i + block_size]))
    return size, whole.hexdigest(), blocks


def file_entry(root: str | os.PathLike, relpath: str, *, most: int | None = None) -> dict[str, Any]:
    """The manifest entry of ``root/relpath``: path, size, xxh3 and block checksums
    (blocks of at most ``most`` bytes when given, see ``block_size_for``)."""
    path = Path(root) / relpath
    size = path.stat().st_size
    bs = block_size_for(size, most=most)
    n, whole, blocks = _hash_blocks(path, bs)
    return {"path": relpath, "size": n, "xxh3": whole, "block_size": bs, "blocks": "".join(blocks)}


# kind -> check(directory, manifest) -> problems
_CHECKS: dict[str, Callable[[Path, dict[str, Any]], list[Problem]]] = {}


def register_check(kind: str, check: Callable[[Path, dict[str, Any]], list[Problem]]) -> None:
    """Add the content checks of an artifact kind (run after the file checks)."""
    _CHECKS[kind] = check


def _check_file(root: Path, entry: dict[str, Any]) -> list[Problem]:
    rel = entry["path"]
    path = root / rel
    if not path.exists():
        return [Problem(rel, None, "missing")]
    size = path.stat().st_size
    if size != entry["size"]:
        return [
            Problem(
                rel, min(size, entry["size"]), f"size {size} bytes, manifest says {entry['size']}"
            )
        ]
    bs = entry.get("block_size")
    if not bs:
        actual = file_checksum(path)
        if actual != entry["xxh3"]:
            return [Problem(rel, None, f"xxh3 {actual}, manifest says {entry['xxh3']}")]
        return []
    _, whole, blocks = _hash_blocks(path, bs)
    if whole == entry["xxh3"]:
        return []
    expected = entry.get("blocks", "")
    for i, h in enumerate(blocks):
        if expected[16 * i : 16 * i + 16] != h:
            lo, hi = i * bs, min((i + 1) * bs, size)
            return [
                Problem(
                    rel, lo, f"checksum mismatch in bytes [{lo}, {hi}) (block {i} of {bs} bytes)"
                )
            ]
    return [Problem(rel, None, f"xxh3 {whole}, manifest says {entry['xxh3']}")]


def check_read(
    root: str | os.PathLike,
    entry: dict[str, Any],
    ranges: list[tuple[int, int]] | None = None,
) -> int:
    """Verify, before a stage uses them, the bytes of ``root/entry["path"]`` that it reads:
    the blocks covering ``ranges`` (byte ranges [lo, hi), ascending or not; None = the
    whole file) against the entry's block checksums. Raises CorruptDataError naming the
    file and the byte range of the first bad block; returns the number of bytes hashed."""
    path = Path(root) / entry["path"]
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise CorruptDataError(f"{path}: missing (the manifest lists it)") from None
    if size != entry["size"]:
        raise CorruptDataError(
            f"{path}: {size} bytes, its manifest says {entry['size']}: truncated or replaced"
        )
    bs = entry.get("block_size")
    if not bs:
        # Manifests without block checksums: the whole file, in bounded reads.
        whole = xxhash.xxh3_64()
        buf = bytearray(_CHECK_READ)
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                whole.update(memoryview(buf)[:n])
        if whole.hexdigest() != entry["xxh3"]:
            raise CorruptDataError(
                f"{path}: checksum mismatch in bytes [0, {size}) "
                f"(xxh3 {whole.hexdigest()}, manifest says {entry['xxh3']})"
            )
        return size
    nblocks = -(-size // bs)
    if ranges is None:
        wanted = np.arange(nblocks)
    else:
        r = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        r = r[r[:, 1] > r[:, 0]]
        if not r.size:
            return 0
        first, last = r[:, 0] // bs, (r[:, 1] - 1) // bs
        marks = np.zeros(nblocks + 1, dtype=np.int64)
        np.add.at(marks, first, 1)
        np.add.at(marks, last + 1, -1)
        wanted = np.flatnonzero(np.cumsum(marks[:-1]) > 0)
    expected = entry.get("blocks", "")
    hashed = 0
    # Runs of consecutive blocks, read with positioned reads of at most max(1 MiB, one
    # block) into one buffer: a stage's memory budget does not pay for its checks.
    breaks = np.flatnonzero(np.diff(wanted) != 1) + 1
    per_read = max(1, _CHECK_READ // bs)
    buf = bytearray(per_read * bs)
    fd = os.open(path, os.O_RDONLY)
    try:
        for run in np.split(wanted, breaks):
            if not run.size:
                continue
            for k in range(0, run.size, per_read):
                b0, b1 = int(run[k]), int(run[min(k + per_read, run.size) - 1]) + 1
                n = os.preadv(fd, [memoryview(buf)[: (b1 - b0) * bs]], b0 * bs)
                data = memoryview(buf)[:n]
                hashed += n
                for i in range(b0, b1):
                    chunk = data[(i - b0) * bs : (i - b0 + 1) * bs]
                    if xxhash.xxh3_64_hexdigest(chunk) != expected[16 * i : 16 * i + 16]:
                        lo, hi = i * bs, min((i + 1) * bs, size)
                        raise CorruptDataError(
                            f"{path}: checksum mismatch in bytes [{lo}, {hi}) (block {i} of "
                            f"{bs} bytes): the file changed since its manifest was written"
                        )
    finally:
        os.close(fd)
    return hashed


def check_files_read(root: str | os.PathLike, manifest: dict[str, Any], relpaths: list[str]) -> int:
    """``check_read`` of whole files of an artifact, by relative path."""
    entries = files_by_path(manifest)
    total = 0
    for rel in relpaths:
        if rel not in entries:
            raise ManifestError(f"{Path(root) / rel}: not listed in {root}/manifest.json")
        total += check_read(root, entries[rel])
    return total


def verify(directory: str | os.PathLike, *, content: bool = True) -> Report:
    """Re-read every file of the artifact at ``directory`` and check it against the
    manifest; ``content`` also runs the kind's own checks. Never raises for corruption:
    every finding is a Problem in the report. An artifact on object storage
    (``s3://``) is downloaded as it is (unchecked) into a scratch directory of the cache,
    verified there, and the scratch removed: the report names the URL."""

    if storage.is_remote(directory):
        return _verify_remote(storage.resolve(directory), content=content)
    root = Path(directory)
    try:
        manifest = read_manifest(root)
    except ManifestError as exc:
        return Report(str(root), "?", 0, 0, [Problem("manifest.json", None, str(exc))])
    kind = manifest.get("kind", "?")
    if not isinstance(manifest.get("files"), list | dict | FilesView):
        return Report(str(root), kind, 0, 0, [Problem("manifest.json", None, "no 'files' list")])
    problems: list[Problem] = []
    nbytes = 0
    # Format 3: the shard table and the block checksums, whole, against the header.
    for entry in sidecar_entries(manifest):
        problems += _check_file(root, entry)
    if problems:
        return Report(str(root), kind, 0, 0, problems)
    entries = file_entries(manifest)
    for entry in entries:
        problems += _check_file(root, entry)
        nbytes += int(entry.get("size", 0))
    if content:
        if kind not in _CHECKS and kind != "?":
            # a kind registers its checks on import of shardcore.<kind>
            with contextlib.suppress(ImportError):
                importlib.import_module(f"shardcore.{kind}")
        check = _CHECKS.get(kind)
        if check is not None:
            problems += check(root, manifest)
    return Report(str(root), kind, len(entries), nbytes, problems)


def _verify_remote(url: str, *, content: bool) -> Report:

    try:
        manifest = mf.read_manifest(url)
    except ManifestError as exc:
        return Report(url, "?", 0, 0, [Problem("manifest.json", None, str(exc))])
    store = storage.open_store(url)
    scratch = storage.cache_root() / "verify" / uuid.uuid4().hex
    try:
        present = store.sizes()
        for entry in [*sidecar_entries(manifest), *file_entries(manifest)]:
            rel = str(entry.get("path"))
            if rel in present:  # a missing object is reported by the local check
                store.get_file(rel, scratch / rel)
        store.get_file("manifest.json", scratch / "manifest.json")
        report = verify(scratch, content=content)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return dataclasses.replace(report, directory=url)


def _check_tokenized(root: Path, manifest: dict[str, Any]) -> list[Problem]:
    import pyarrow.parquet as pq

    problems: list[Problem] = []
    tok = manifest.get("tokenizer", {})
    vocab, eos = tok.get("vocab_size"), tok.get("eos_id")
    total_docs = 0
    for sh in manifest.get("shards", []):
        rel = sh["prefix"]
        try:
            r = IndexedReader(root / rel)
        except (FormatError, OSError) as exc:
            problems.append(Problem(f"{rel}.idx", None, str(exc)))
            continue
        idx = f"{rel}.idx"
        binrel = f"{rel}.bin"
        s = len(r)
        if s != sh["documents"]:
            problems.append(
                Problem(
                    idx, IDX_SEQUENCES_OFFSET, f"{s} sequences, manifest says {sh['documents']}"
                )
            )
        if r.index.num_tokens != sh["tokens"]:
            problems.append(
                Problem(idx, None, f"{r.index.num_tokens} tokens, manifest says {sh['tokens']}")
            )
        lengths = r.lengths.astype(np.int64)
        itemsize = r.dtype.itemsize
        expect_ptr = np.concatenate([[0], np.cumsum(lengths)[:-1] * itemsize]) if s else np.zeros(0)
        bad = np.flatnonzero(r.index.pointers != expect_ptr)
        if bad.size:
            i = int(bad[0])
            problems.append(
                Problem(
                    idx,
                    idx_pointer_offset(s, i),
                    f"pointer of sequence {i} is {int(r.index.pointers[i])}, expected {int(expect_ptr[i])}",
                )
            )
            continue
        bad = np.flatnonzero(r.index.document_indices != np.arange(s + 1))
        if bad.size:
            i = int(bad[0])
            problems.append(
                Problem(
                    idx,
                    idx_document_offset(s, i),
                    f"document index {i} is {int(r.index.document_indices[i])}, expected {i}",
                )
            )
        if s and (lengths < 1).any():
            i = int(np.flatnonzero(lengths < 1)[0])
            problems.append(
                Problem(idx, idx_length_offset(i), f"sequence {i} has length {int(lengths[i])}")
            )
            continue
        if s and eos is not None:
            ends = r.starts + lengths - 1
            bad = np.flatnonzero(np.asarray(r.tokens[ends]) != eos)
            if bad.size:
                i = int(bad[0])
                problems.append(
                    Problem(
                        binrel, int(ends[i]) * itemsize, f"document {i} does not end with EOS {eos}"
                    )
                )
        if vocab is not None and r.tokens.size:
            bad = np.flatnonzero((np.asarray(r.tokens) >= vocab) | (np.asarray(r.tokens) < 0))
            if bad.size:
                i = int(bad[0])
                problems.append(
                    Problem(
                        binrel,
                        i * itemsize,
                        f"token id {int(r.tokens[i])} is outside the vocabulary [0, {vocab})",
                    )
                )
        side = f"{rel}.docs.parquet"
        try:
            t = pq.read_table(root / side, columns=["doc_id", "n_tokens"])
        except Exception as exc:  # pyarrow raises several types for a damaged file
            problems.append(Problem(side, None, f"unreadable: {exc}"))
            continue
        if t.num_rows != s:
            problems.append(Problem(side, None, f"{t.num_rows} rows, the shard has {s} documents"))
            continue
        n_tok = t["n_tokens"].to_numpy()
        bad = np.flatnonzero(n_tok != lengths)
        if bad.size:
            i = int(bad[0])
            problems.append(
                Problem(
                    side,
                    None,
                    f"row {i}: n_tokens {int(n_tok[i])}, the shard stores {int(lengths[i])}",
                )
            )
        ids = t["doc_id"].to_numpy()
        first = sh.get("first_doc_id", total_docs)
        bad = np.flatnonzero(ids != first + np.arange(s))
        if bad.size:
            i = int(bad[0])
            problems.append(
                Problem(side, None, f"row {i}: doc_id {int(ids[i])}, expected {first + i}")
            )
        total_docs += s
    totals = manifest.get("totals", {})
    if "documents" in totals and total_docs != totals["documents"] and not problems:
        problems.append(
            Problem(
                "manifest.json",
                None,
                f"shards hold {total_docs} documents, totals say {totals['documents']}",
            )
        )
    return problems


register_check("tokenized", _check_tokenized)

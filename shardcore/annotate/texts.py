"""The text of a tokenized source's documents, read back without a copy: from the source
files through the positions its sidecars keep, or by decoding its tokens.

Each sidecar row holds the document's ``file``, ``line`` (the row number for Parquet) and
``byte_offset`` (absolute, for plain JSONL and line-mode text; None otherwise) and its
UTF-8 size ``n_bytes``. For a file that can be split (plain ``.jsonl``, line-mode
``.txt``) the byte range ``[first offset, last offset]`` of a shard's documents is read
once and matched by offset; other files (compressed, Parquet, whole-file text) are
streamed and matched by line or row number. Every text read is checked against
``n_bytes``: a source file edited since tokenizing is refused by ``file:line``.

``text_from``: ``"source"`` (files must be readable and of the size the manifest
recorded), ``"tokens"`` (decode the stored sequences without their EOS/BOS: exact for
byte-level BPE tokenizers, and the only way when the sources are gone), or ``"auto"``
(the sources when every one of the shard's files is present at its recorded size, else
the tokens).

``shard_text_batches`` gives them a batch at a time (what a unit holds is a batch, not a
shard): by row range, each batch's file range read once where files split; files that do
not split are read once for the whole shard.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import fsspec
import numpy as np

from shardcore.encoders import load_tokenizer
from shardcore.errors import CorruptDataError, InputError
from shardcore.formats import bin_path
from shardcore.readers import BadInput, Document, read_segment, splittable

if TYPE_CHECKING:
    import pyarrow as pa

    from shardcore.tokenized import TokenizedSource

TEXT_FROM = ("auto", "source", "tokens")


def _input_sizes(manifest: dict[str, Any]) -> dict[str, int | None]:
    return {str(i["file"]): i.get("size") for i in manifest.get("inputs", [])}


def _file_size(url: str) -> int | None:
    try:
        fs, path = fsspec.core.url_to_fs(url)
        return int(fs.size(path))
    except (OSError, ValueError):
        return None


def source_problem(manifest: dict[str, Any], files: list[str]) -> str | None:
    """Why ``files`` cannot be read as the tokenized source's inputs (missing, or a size
    other than the manifest's), or None."""
    sizes = _input_sizes(manifest)
    for f in files:
        actual = _file_size(f)
        if actual is None:
            return f"{f}: source file not found"
        if sizes.get(f) is not None and actual != sizes[f]:
            return f"{f}: {actual} bytes, the tokenized source's manifest recorded {sizes[f]}"
    return None


BATCH = 65_536  # documents a text batch holds


def shard_texts(
    source: TokenizedSource, shard: int, *, text_from: str = "auto"
) -> tuple[list[str], str]:
    """(the texts of shard ``shard`` of TokenizedSource ``source`` in row order, where they
    were read from: "source" or "tokens")."""
    batches, origin, _ = shard_text_batches(source, shard, text_from=text_from)
    return [t for batch in batches for t in batch], origin


def shard_text_batches(
    source: TokenizedSource, shard: int, *, text_from: str = "auto", batch: int = 0
) -> tuple[Iterator[list[str]], str, int]:
    """(the texts of shard ``shard`` in row order, ``batch`` documents at a time; where
    they are read from, "source" or "tokens"; the shard's number of documents). Which
    origin is decided here, before the first batch is read. ``batch`` 0: ``BATCH``."""
    import pyarrow.parquet as pq

    batch = batch or BATCH
    if text_from not in TEXT_FROM:
        raise InputError(f"text_from must be one of {', '.join(TEXT_FROM)}, got {text_from!r}")
    sidecar = source.sidecar_paths()[shard]
    n = pq.ParquetFile(sidecar).metadata.num_rows
    if text_from != "tokens":
        # The positions as Arrow columns (the file names a dictionary), made lists a batch
        # at a time: a shard's rows as Python lists would cost ~160 bytes a document.
        cols = pq.read_table(
            sidecar, columns=["file", "line", "byte_offset", "n_bytes"], read_dictionary=["file"]
        )
        files = sorted(cols.column("file").unique().to_pylist())
        problem = source_problem(source.manifest, files)
        if problem is None:
            return _source_batches(source.manifest, cols, files, batch), "source", n
        if text_from == "source":
            raise InputError(f"{problem} (annotate with text_from='tokens' to decode instead)")
    return _token_batches(source, shard, n, batch), "tokens", n


def _source_batches(
    manifest: dict[str, Any], cols: pa.Table, files: list[str], batch: int
) -> Iterator[list[str]]:
    txt_mode = manifest.get("params", {}).get("txt_mode", "file")
    splits = (
        all(splittable(f, txt_mode) for f in files) and cols.column("byte_offset").null_count == 0
    )
    n = cols.num_rows
    step = batch if splits else max(n, 1)  # a file that does not split is streamed once
    for lo in range(0, n, step):
        part = cols.slice(lo, step).to_pydict()
        part["file"] = [str(f) for f in part["file"]]
        yield _from_source(manifest, part)


def _from_source(manifest: dict[str, Any], cols: dict[str, list]) -> list[str]:
    params = manifest.get("params", {})
    text_field = params.get("text_field", "text")
    txt_mode = params.get("txt_mode", "file")
    n = len(cols["file"])
    out: list[str | None] = [None] * n
    # consecutive rows of one file form a group (a shard holds files in source order)
    start = 0
    while start < n:
        end = start
        while end < n and cols["file"][end] == cols["file"][start]:
            end += 1
        _read_group(cols, start, end, text_field, txt_mode, out)
        start = end
    return out  # type: ignore[return-value]


def _read_group(
    cols: dict[str, list],
    start: int,
    end: int,
    text_field: str,
    txt_mode: str,
    out: list[str | None],
) -> None:
    url = cols["file"][start]
    offsets = cols["byte_offset"][start:end]
    by_offset = splittable(url, txt_mode) and all(o is not None for o in offsets)
    if by_offset:
        want = {o: start + k for k, o in enumerate(offsets)}
        items = read_segment(
            url, start=min(offsets), end=max(offsets) + 1, text_field=text_field, txt_mode=txt_mode
        )
        key = "byte_offset"
    else:
        want = {ln: start + k for k, ln in enumerate(cols["line"][start:end])}
        items = read_segment(url, text_field=text_field, txt_mode=txt_mode)
        key = "line"
    found = 0
    for item in _documents(items, url):
        row = want.get(getattr(item, key))
        if row is None:
            continue
        if len(item.text.encode("utf-8")) != cols["n_bytes"][row]:
            raise CorruptDataError(
                f"{url}:{cols['line'][row]}: the text has {len(item.text.encode('utf-8'))} "
                f"bytes, the tokenized source recorded {cols['n_bytes'][row]} "
                "(the source file changed since it was tokenized)"
            )
        out[row] = item.text
        found += 1
        if found == len(want):
            break
    if found != len(want):
        missing = next(r for r in range(start, end) if out[r] is None)
        raise CorruptDataError(
            f"{url}:{cols['line'][missing]}: no document at this position any more "
            "(the source file changed since it was tokenized)"
        )


def _documents(items: Iterator[Document | BadInput], url: str) -> Iterator[Document]:
    for item in items:
        if isinstance(item, BadInput):  # tokenize skipped it: not one of ours
            continue
        yield item


def _token_batches(source: TokenizedSource, shard: int, n: int, batch: int) -> Iterator[list[str]]:
    """The shard's documents decoded ``batch`` at a time; each batch's tokens read from the
    ``.bin`` file (a copy the batch drops), not through a memory map whose pages the
    process would keep resident for the whole shard."""
    info = source.tokenizer
    tok = load_tokenizer(info["spec"])
    eos, bos = info.get("eos_id"), info.get("bos_id")
    strip_bos = bos is not None and bool(source.manifest.get("params", {}).get("bos"))
    reader = source.shards[shard]
    item = reader.dtype.itemsize
    with open(bin_path(reader.prefix), "rb") as f:
        for lo in range(0, n, batch):
            hi = min(n, lo + batch)
            lengths = np.asarray(reader.lengths[lo:hi], dtype=np.int64)
            first = int(reader.starts[lo]) if hi > lo else 0
            raw = os.pread(f.fileno(), int(lengths.sum()) * item, first * item)
            tokens = np.frombuffer(raw, dtype=reader.dtype)
            ends = np.cumsum(lengths)
            starts = ends - lengths
            # Each document without its BOS (when the source adds one) and its EOS.
            if strip_bos and tokens.size:
                starts += (ends > starts) & (tokens[np.minimum(starts, tokens.size - 1)] == bos)
            if eos is not None and tokens.size:
                ends -= (ends > starts) & (tokens[np.maximum(ends - 1, 0)] == eos)
            yield tok.decode_ranges(tokens, starts, ends)

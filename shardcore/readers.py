"""Read documents from source files through fsspec, and say exactly what is wrong with bad
input instead of crashing or dropping it.

Formats, by file name: ``.jsonl``/``.ndjson`` (one JSON object per line), the same with
``.gz`` or ``.zst``/``.zstd``, ``.parquet`` (streamed batch by batch, never whole), and
``.txt`` (optionally ``.gz``/``.zst``): the whole file is one document (``txt_mode="file"``)
or each non-blank line is one (``txt_mode="line"``). Paths are anything fsspec opens: local
paths (opened directly, fsspec not imported), ``file://``, ``s3://`` (endpoint from
``AWS_ENDPOINT_URL`` or storage options).

A *segment* is a file, or for a plain ``.jsonl`` (or line-mode ``.txt``) a byte range
``[start, end)`` of it: the segment owns the lines whose first byte lies in the range, so
ranges that tile a file read every line exactly once, whatever the line lengths.
``read_segment`` yields ``Document`` and ``BadInput`` items in file order. Line numbers are
1-based and counted from the segment's first line (absolute when ``start == 0``); callers
that split a file add the line counts of the earlier segments (``SegmentStats.lines``).
Byte offsets are absolute: in the decompressed stream for compressed files, ``None`` for
Parquet rows (whose position is their row number, given as ``line``).

Bad input reasons (stable strings used by reports and the web app): see ``REASONS``.
Blank lines are not documents; they are counted in ``SegmentStats.blank_lines``.
"""

from __future__ import annotations

import bisect
import itertools
import json
import operator
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

import orjson
import zstandard

from shardcore.storage import s3fs_defaults

INVALID_JSON = "invalid_json"
MISSING_TEXT_FIELD = "missing_text_field"
TEXT_NOT_STRING = "text_not_string"
INVALID_UTF8 = "invalid_utf8"
EMPTY_DOCUMENT = "empty_document"
TRUNCATED_COMPRESSED = "truncated_compressed"
UNREADABLE_FILE = "unreadable_file"
EMPTY_FILE = "empty_file"
REASONS = (
    INVALID_JSON,
    MISSING_TEXT_FIELD,
    TEXT_NOT_STRING,
    INVALID_UTF8,
    EMPTY_DOCUMENT,
    TRUNCATED_COMPRESSED,
    UNREADABLE_FILE,
    EMPTY_FILE,
)

_ABSENT = object()
_BLOCK = 4 << 20  # raw bytes per read: large enough for throughput, small for memory
_EXCERPT = 120  # characters of a bad line quoted in reports


@dataclass(slots=True)
class Document:
    text: str
    props: dict[str, Any]  # every field of the record except the text field
    line: int  # 1-based line (or Parquet row) number within the segment
    byte_offset: int | None  # absolute offset of the line; None for Parquet
    nbytes: int  # UTF-8 bytes of ``text``


@dataclass(slots=True)
class BadInput:
    reason: str  # one of REASONS
    line: int | None  # 1-based line within the segment; None for whole-file problems
    message: str
    excerpt: str = ""

    def describe(self, file: str, line: int | None = None) -> str:
        """``file:line: reason: message`` (the format of reports and of --strict errors);
        ``line`` overrides the segment-relative line."""
        line = self.line if line is None else line
        where = file if line is None else f"{file}:{line}"
        return f"{where}: {self.reason}: {self.message}"


@dataclass(slots=True)
class Rows:
    """Consecutive documents of a ``.jsonl`` segment that are all good (each line a JSON
    object whose text is a non-blank string), as columns: what ``read_segment_rows``
    yields for a block of lines in one piece instead of a ``Document`` each."""

    texts: list[str]
    props: list[dict[str, Any]] | None  # None: no document of the run has a property
    lines: list[int]
    offsets: list[int]

    @property
    def nbytes(self) -> list[int]:
        """Each text's size in UTF-8 (counted when asked: a tokenizer that has read a text
        holds its UTF-8, and counting after it costs a copy, not an encoding)."""
        return utf8_sizes(self.texts)

    def documents(self) -> Iterator[Document]:
        props = self.props if self.props is not None else [{} for _ in self.texts]
        return map(Document, self.texts, props, self.lines, self.offsets, self.nbytes)


@dataclass
class SegmentStats:
    lines: int = 0  # lines (or rows) of the segment, blank and bad ones included
    blank_lines: int = 0
    raw_bytes: int = 0  # bytes read from storage (compressed size for compressed files)
    content_bytes: int = 0  # bytes after decompression
    extra: dict[str, Any] = field(default_factory=dict)


def source_format(url: str) -> tuple[str, str | None]:
    """(format, compression) from the file name: format is jsonl, parquet or txt."""
    name = url.rsplit("/", 1)[-1].lower()
    compression = None
    for suffix, comp in ((".gz", "gzip"), (".zst", "zstd"), (".zstd", "zstd")):
        if name.endswith(suffix):
            compression, name = comp, name[: -len(suffix)]
            break
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl", compression
    if name.endswith(".parquet") and compression is None:
        return "parquet", None
    if name.endswith(".txt"):
        return "txt", compression
    raise ValueError(
        f"{url}: unknown source format (expected .jsonl, .jsonl.gz, .jsonl.zst, .parquet or .txt)"
    )


def is_supported(url: str) -> bool:
    try:
        source_format(url)
    except ValueError:
        return False
    return True


def splittable(url: str, txt_mode: str = "file") -> bool:
    """Whether a file may be read as several byte ranges (plain line-oriented files)."""
    fmt, comp = source_format(url)
    return comp is None and (fmt == "jsonl" or (fmt == "txt" and txt_mode == "line"))


class _Truncated(Exception):
    """The compressed stream ended (or broke) before its end-of-stream marker."""

    def __init__(self, message: str, *, corrupt: bool):
        super().__init__(message)
        self.corrupt = corrupt  # bad data (vs. a stream that simply stops early)


def _excerpt(raw: bytes | str) -> str:
    if isinstance(raw, bytes):
        raw = raw[: _EXCERPT * 4].decode("utf-8", errors="replace")
    return raw[:_EXCERPT] + ("…" if len(raw) > _EXCERPT else "")


def _read_raw(f: IO[bytes], stats: SegmentStats) -> Iterator[bytes]:
    while True:
        block = f.read(_BLOCK)
        if not block:
            return
        stats.raw_bytes += len(block)
        yield block


class _Decompressor(Protocol):
    """What zlib's and zstandard's decompression objects have in common."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, /) -> bytes: ...

    def flush(self) -> bytes: ...


def _decompress(blocks: Iterator[bytes], compression: str) -> Iterator[bytes]:
    """Decompressed blocks of a gzip or zstd stream (multi-member/multi-frame), raising
    _Truncated when it stops before an end marker: zstd's stream reader would not."""
    if compression == "gzip":

        def new() -> _Decompressor:
            return zlib.decompressobj(wbits=31)

        errors: tuple[type[BaseException], ...] = (zlib.error,)
    else:
        dctx = zstandard.ZstdDecompressor()

        def new() -> _Decompressor:
            return dctx.decompressobj()

        errors = (zstandard.ZstdError,)
    d = new()
    produced = 0
    in_frame = False
    for block in blocks:
        data = block
        while data:
            try:
                out = d.decompress(data)
            except errors as exc:
                raise _Truncated(
                    f"corrupt compressed data after {produced} bytes: {exc}", corrupt=True
                ) from exc
            in_frame = True
            if out:
                produced += len(out)
                yield out
            if d.eof:
                data = d.unused_data
                d = new()
                in_frame = False
            else:
                data = b""
    if compression == "gzip" and in_frame:
        tail = d.flush()
        if tail:
            produced += len(tail)
            yield tail
    if in_frame and not d.eof:
        raise _Truncated(
            f"compressed stream ends before its end marker, after {produced} bytes",
            corrupt=False,
        )


def _line_blocks(
    blocks: Iterator[bytes], offset: int, skip_partial: bool
) -> Iterator[tuple[int, list[bytes]]]:
    """(absolute offset of the first line, lines without their newlines) for each block's
    complete lines, the last unterminated line as a block of its own. With
    ``skip_partial`` the text up to and including the first newline is skipped (it
    belongs to the previous segment)."""
    pending = b""
    for block in blocks:
        if skip_partial:
            nl = block.find(b"\n")
            if nl < 0:
                offset += len(block)
                continue
            offset += nl + 1
            block = block[nl + 1 :]
            skip_partial = False
        parts = block.split(b"\n")
        if pending:  # the line begun in the block before (joined, not the whole block)
            parts[0] = pending + parts[0]
        size = len(pending) + len(block)
        pending = parts.pop()
        if parts:
            yield offset, parts
            offset += size - len(pending)
    if pending and not skip_partial:
        yield offset, [pending]


def _lines(blocks: Iterator[bytes], offset: int, skip_partial: bool) -> Iterator[tuple[int, bytes]]:
    """(absolute offset, line without its newline) for each line (see _line_blocks)."""
    for first, parts in _line_blocks(blocks, offset, skip_partial):
        for line in parts:
            yield first, line
            first += len(line) + 1


# orjson parses a line 2-3x faster than json. It is the fast path only: a line it
# rejects (invalid UTF-8, NaN/Infinity, lone surrogates, other encodings...) is parsed
# again by json, so what is accepted and every bad-input report stay json's.
_BIG = float(1 << 63)


def _lossy(v: Any) -> bool:
    """Whether orjson may have read a value differently from json: it reads integers
    beyond 64 bits as floats, where json keeps them exact."""
    t = type(v)
    if t is float:
        return not -_BIG < v < _BIG or v != v
    if t is dict:
        return any(_lossy(x) for x in v.values())
    if t is list:
        return any(_lossy(x) for x in v)
    return False


def _loads(line: bytes) -> Any:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)
    if type(obj) is dict and any(_lossy(v) for v in obj.values() if type(v) is not str):
        return json.loads(line)
    return obj


def _jsonl_doc(line: bytes, lineno: int, offset: int, text_field: str) -> Document | BadInput:
    try:
        obj = _loads(line)
    except UnicodeDecodeError as exc:
        return BadInput(
            INVALID_UTF8, lineno, f"invalid UTF-8 at byte {exc.start}: {exc.reason}", _excerpt(line)
        )
    except ValueError as exc:
        return BadInput(INVALID_JSON, lineno, str(exc), _excerpt(line))
    if not isinstance(obj, dict):
        return BadInput(
            INVALID_JSON,
            lineno,
            f"expected a JSON object, got {type(obj).__name__}",
            _excerpt(line),
        )
    text = obj.pop(text_field, _ABSENT)
    return _check_text(text, obj, lineno, offset, text_field, line)


_EXACT_TYPES = {str, int, bool, type(None)}  # values orjson reads as json does


def _exact(props: dict[str, Any]) -> bool:
    """Whether orjson read these values as json does (only a float can differ)."""
    for v in props.values():
        t = type(v)
        if t is not str and t is not int and t is not bool and v is not None and _lossy(v):
            return False
    return True


def utf8_sizes(texts: list[str]) -> list[int]:
    """Each text's size in UTF-8 (an ASCII text's is its length: CPython knows it is ASCII
    without a scan). The texts encode: a Document's text is checked, and orjson never
    makes a lone surrogate."""
    return [len(t) if t.isascii() else len(t.encode("utf-8")) for t in texts]


def _good_run(lines: list[bytes], text_field: str) -> tuple[list[str], list[dict] | None] | None:
    """(texts, properties) of ``lines`` when every one is a good document read the same
    by orjson as by json (a JSON object whose text is a non-blank string): a few calls
    over all of them, none per line. None when any line is not one. The properties are
    None when no document has any: their empty objects are not kept (a run's thousands
    of them, kept to the end of a batch, would each survive into the collector's oldest
    generation and make its full passes over every object of the process more often)."""
    try:
        objs = list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:  # invalid UTF-8 too; blank lines are not JSON either
        return None
    if set(map(type, objs)) != {dict}:
        return None
    texts = list(map(dict.pop, objs, itertools.repeat(text_field), itertools.repeat(None)))
    if set(map(type, texts)) != {str} or not all(texts) or any(map(str.isspace, texts)):
        return None
    if not any(objs):
        return texts, None
    values = itertools.chain.from_iterable(map(dict.values, objs))
    if not set(map(type, values)) <= _EXACT_TYPES and not all(map(_exact, objs)):
        return None
    return texts, objs


_RUN_LINES = 256  # lines tried at once as a run of good documents


def _jsonl_block(
    lines: list[bytes], starts: list[int], lineno: int, text_field: str, stats: SegmentStats
) -> Iterator[Rows | Document | BadInput]:
    """The documents of a block of lines (the first numbered ``lineno + 1``), a run of
    ``_RUN_LINES`` at a time: a run of good documents as ``Rows``, without a call or an
    object per line; a run holding any other line line by line, as ``_jsonl_doc`` reads
    it (blank lines counted)."""
    for a in range(0, len(lines), _RUN_LINES):
        run = lines[a : a + _RUN_LINES]
        good = _good_run(run, text_field)
        if good is not None:
            texts, props = good
            numbers = list(range(lineno + a + 1, lineno + a + len(run) + 1))
            yield Rows(texts, props, numbers, starts[a : a + len(run)])
            continue
        for i, line in enumerate(run, start=a):
            if not line.strip():
                stats.blank_lines += 1
                continue
            yield _jsonl_doc(line, lineno + i + 1, starts[i], text_field)


def _read_jsonl(
    blocks: Iterator[bytes], start: int, end: int | None, text_field: str, stats: SegmentStats
) -> Iterator[Rows | Document | BadInput]:
    """The lines of a ``.jsonl`` segment, a block at a time (``_jsonl_block``): the same
    documents, bad inputs, line numbers and offsets as reading them one by one."""
    lineno = 0
    for first, parts in _line_blocks(blocks, max(start - 1, 0), skip_partial=start > 0):
        # Line i starts after the lines before it and their i newlines.
        ends = itertools.accumulate(map(len, parts), initial=first)
        starts = list(map(operator.add, ends, itertools.count()))
        last = end is not None and starts[-1] >= end  # the next line is not the segment's
        if end is not None:
            parts = parts[: bisect.bisect_left(starts, end, hi=len(parts))]
        n = len(parts)
        stats.content_bytes += starts[n] - first
        yield from _jsonl_block(parts, starts, lineno, text_field, stats)
        lineno += n
        stats.lines = lineno
        if last:
            return


def _check_text(
    text: object, props: dict, lineno: int, offset: int | None, text_field: str, raw: bytes | str
) -> Document | BadInput:
    if text is None:
        return BadInput(MISSING_TEXT_FIELD, lineno, f"{text_field!r} is null", _excerpt(raw))
    if text is _ABSENT:
        fields = ", ".join(sorted(props)[:10]) or "none"
        return BadInput(
            MISSING_TEXT_FIELD, lineno, f"no {text_field!r} field (fields: {fields})", _excerpt(raw)
        )
    if not isinstance(text, str):
        return BadInput(
            TEXT_NOT_STRING,
            lineno,
            f"{text_field!r} is {type(text).__name__}, expected a string",
            _excerpt(raw),
        )
    try:
        # An ASCII string (a flag CPython keeps: no scan) is its own UTF-8 and holds no
        # surrogate; any other is encoded to count its bytes and find lone surrogates.
        nbytes = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # lone surrogates, e.g. from a "\ud800" escape
        return BadInput(
            INVALID_UTF8,
            lineno,
            f"{text_field!r} has an unpaired surrogate at character {exc.start}",
            _excerpt(raw),
        )
    if not text or text.isspace():  # what `not text.strip()` says, without copying the text
        return BadInput(
            EMPTY_DOCUMENT, lineno, f"{text_field!r} is empty or whitespace", _excerpt(raw)
        )
    return Document(text, props, lineno, offset, nbytes)


def read_segment(url: str, **options: Any) -> Iterator[Document | BadInput]:
    """Yield the documents and bad inputs of ``url[start:end]`` in file order (``options``:
    ``read_segment_rows``'s). Never raises for bad data: an unreadable, empty or truncated
    file is a BadInput too."""
    for item in read_segment_rows(url, **options):
        if type(item) is Rows:
            yield from item.documents()
        else:
            yield item  # type: ignore[misc]  # a Document or a BadInput


def read_segment_rows(
    url: str,
    *,
    start: int = 0,
    end: int | None = None,
    text_field: str = "text",
    txt_mode: str = "file",
    storage_options: dict[str, Any] | None = None,
    stats: SegmentStats | None = None,
) -> Iterator[Rows | Document | BadInput]:
    """``read_segment``, with runs of good ``.jsonl`` documents as ``Rows`` (columns, no
    object per document): for a reader that takes documents by the batch."""
    stats = stats if stats is not None else SegmentStats()
    fmt, comp = source_format(url)
    if txt_mode not in ("file", "line"):
        raise ValueError(f"txt_mode must be 'file' or 'line', got {txt_mode!r}")
    if (start or end is not None) and not splittable(url, txt_mode):
        raise ValueError(f"{url}: a {fmt}/{comp} file can only be read whole")
    if "://" in url:
        s3fs_defaults()  # bounded timeouts: a store that stops answering is an error
    try:
        if "://" in url:
            import fsspec

            f = fsspec.open(url, "rb", **(storage_options or {})).open()
        else:  # a local path: what fsspec would open, without importing it (~0.04 CPU-s)
            f = open(url, "rb")  # closed below, after the generator's reads
    except Exception as exc:  # any backend error: missing, permission, network
        yield BadInput(UNREADABLE_FILE, None, f"cannot open: {type(exc).__name__}: {exc}")
        return
    try:
        if fmt == "parquet":
            yield from _read_parquet(url, f, text_field, stats)
        else:
            yield from _read_lines(f, fmt, comp, start, end, text_field, txt_mode, stats)
    finally:
        f.close()


def _read_lines(
    f: IO[bytes],
    fmt: str,
    comp: str | None,
    start: int,
    end: int | None,
    text_field: str,
    txt_mode: str,
    stats: SegmentStats,
) -> Iterator[Rows | Document | BadInput]:
    try:
        if start:
            f.seek(start - 1)
        raw = _read_raw(f, stats)
        blocks = _decompress(raw, comp) if comp else raw
        if fmt == "txt" and txt_mode == "file":
            yield from _read_txt_file(blocks, stats)
            return
        if fmt == "jsonl":
            yield from _read_jsonl(blocks, start, end, text_field, stats)
        else:
            yield from _read_text_lines(blocks, start, end, stats)
        if start == 0 and stats.content_bytes == 0 and stats.lines == 0:
            yield BadInput(EMPTY_FILE, None, "file is empty")
    except _Truncated as exc:
        if exc.corrupt and not stats.content_bytes and stats.lines == 0:
            yield BadInput(UNREADABLE_FILE, None, f"not a valid {comp} stream: {exc}")
        else:
            yield BadInput(TRUNCATED_COMPRESSED, stats.lines + 1, str(exc))
    except OSError as exc:
        yield BadInput(
            UNREADABLE_FILE, stats.lines + 1 if stats.lines else None, f"read failed: {exc}"
        )


def _read_text_lines(
    blocks: Iterator[bytes], start: int, end: int | None, stats: SegmentStats
) -> Iterator[Document | BadInput]:
    """The non-blank lines of a line-mode ``.txt`` segment, each a document."""
    lineno = 0
    for offset, line in _lines(blocks, max(start - 1, 0), skip_partial=start > 0):
        if end is not None and offset >= end:
            break
        lineno += 1
        stats.lines = lineno
        stats.content_bytes += len(line) + 1
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.strip():
            stats.blank_lines += 1
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield BadInput(
                INVALID_UTF8,
                lineno,
                f"invalid UTF-8 at byte {exc.start}: {exc.reason}",
                _excerpt(line),
            )
            continue
        yield _check_text(text, {}, lineno, offset, "line", line)


def _read_txt_file(blocks: Iterator[bytes], stats: SegmentStats) -> Iterator[Document | BadInput]:
    data = b"".join(blocks)
    stats.content_bytes = len(data)
    stats.lines = 1 if data else 0
    if not data:
        yield BadInput(EMPTY_FILE, None, "file is empty")
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        yield BadInput(
            INVALID_UTF8,
            1,
            f"invalid UTF-8 at byte {exc.start}: {exc.reason}",
            _excerpt(data[max(exc.start - 40, 0) :]),
        )
        return
    yield _check_text(text, {}, 1, 0, "text", data)


def _read_parquet(
    url: str, f: IO[bytes], text_field: str, stats: SegmentStats
) -> Iterator[Document | BadInput]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(f)
    except (pa.ArrowException, OSError) as exc:
        yield BadInput(UNREADABLE_FILE, None, f"not a readable Parquet file: {exc}")
        return
    if pf.metadata.num_rows == 0:
        yield BadInput(EMPTY_FILE, None, "Parquet file has no rows")
        return
    row = 0
    try:
        # A row group at a time: asked for all of them, the reader pre-buffers every row
        # group's column chunks (the whole file's text).
        batches = (
            b
            for g in range(pf.metadata.num_row_groups)
            for b in pf.iter_batches(batch_size=2048, row_groups=[g])
        )
        for batch in batches:
            stats.content_bytes += batch.nbytes
            for rec in batch.to_pylist():
                row += 1
                stats.lines = row
                text = rec.pop(text_field, _ABSENT)
                yield _check_text(
                    text,
                    rec,
                    row,
                    None,
                    text_field,
                    "" if text is _ABSENT else json.dumps(text, default=str)[:_EXCERPT],
                )
    except (pa.ArrowException, OSError) as exc:
        yield BadInput(UNREADABLE_FILE, row + 1, f"Parquet read failed at row {row + 1}: {exc}")
    stats.raw_bytes = getattr(f, "size", None) or stats.raw_bytes

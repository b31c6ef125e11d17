"""Pack a stream of documents into records of exactly seq_len + 1 tokens.

The documents (EOS already appended by tokenize; an optional BOS is prepended here) are
concatenated in their shuffled order and cut into consecutive, non-overlapping records of
``seq_len + 1`` tokens (inputs and shifted targets of one training sample). A document
longer than the rest of a record continues at the start of the next one. The last record
of a bucket is filled with ``pad_id`` tokens, so the waste is under one record per bucket.

For attention masks and labels, every record keeps its *segments*: maximal runs of tokens
of one document. The segments of all records of a shard are flat arrays:

==================  ======  ===================================================
seg_record_offsets  int64   [records + 1]: record r owns segments [o[r], o[r+1])
seg_start           int32   first token of the segment within its record
seg_length          int32   tokens in the segment
seg_doc             int64   document index (in the packed stream), -1 for padding
seg_doc_offset      int64   token offset of the segment within its document
==================  ======  ===================================================

Concatenating the records and dropping the final padding gives back the token stream.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import IO

import numpy as np

from shardcore import atomic

SEGMENT_FIELDS = ("seg_record_offsets", "seg_start", "seg_length", "seg_doc", "seg_doc_offset")


@dataclass(frozen=True)
class Segments:
    seg_record_offsets: np.ndarray
    seg_start: np.ndarray
    seg_length: np.ndarray
    seg_doc: np.ndarray
    seg_doc_offset: np.ndarray

    @property
    def num_records(self) -> int:
        return int(self.seg_record_offsets.size - 1)

    def of_record(self, r: int) -> dict[str, np.ndarray]:
        lo, hi = int(self.seg_record_offsets[r]), int(self.seg_record_offsets[r + 1])
        return {
            "start": self.seg_start[lo:hi],
            "length": self.seg_length[lo:hi],
            "doc": self.seg_doc[lo:hi],
            "doc_offset": self.seg_doc_offset[lo:hi],
        }

    def main_document(self) -> np.ndarray:
        """Per record, the document contributing most tokens (first one on ties; -1 for
        a record of padding only)."""
        if self.num_records == 0:
            return np.zeros(0, dtype=np.int64)
        length = np.where(self.seg_doc >= 0, self.seg_length.astype(np.int64), -1)
        record = np.repeat(np.arange(self.num_records), np.diff(self.seg_record_offsets))
        order = np.lexsort((np.arange(length.size), -length, record))
        return self.seg_doc[order[self.seg_record_offsets[:-1]]]


@dataclass(frozen=True)
class Packing:
    seq_len: int
    num_tokens: int  # document tokens
    num_records: int
    padding: int  # pad tokens in the last record
    segments: Segments

    @property
    def record_tokens(self) -> int:
        return self.seq_len + 1


def plan_packing(lengths: np.ndarray, seq_len: int) -> Packing:
    """Segments of packing documents of ``lengths`` tokens (in stream order)."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and lengths.min() < 0:
        raise ValueError("document lengths must be >= 0")
    width = seq_len + 1
    starts = np.zeros(lengths.size, dtype=np.int64)
    if lengths.size > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    total = int(lengths.sum())
    records = -(-total // width)
    end = records * width
    # Segment starts: every document start and every record start (both ascending), and
    # the padding's start; merged in one pass instead of sorted.
    bounds = np.arange(0, end, width, dtype=np.int64)
    if end > total:
        bounds = np.append(bounds, total)
    pos = _merge_sorted(starts[lengths > 0], bounds) if records else np.zeros(0, np.int64)
    doc = np.searchsorted(starts, pos, side="right") - 1
    in_docs = pos < total
    doc = np.where(in_docs, doc, -1)
    doc_offset = np.where(in_docs, pos - starts[np.maximum(doc, 0)] if doc.size else 0, 0)
    record = pos // width
    seg = Segments(
        seg_record_offsets=np.searchsorted(record, np.arange(records + 1), side="left").astype(
            np.int64
        ),
        seg_start=(pos % width).astype(np.int32),
        seg_length=np.diff(np.append(pos, end)).astype(np.int32),
        seg_doc=doc.astype(np.int64),
        seg_doc_offset=np.asarray(doc_offset, dtype=np.int64),
    )
    return Packing(seq_len, total, records, end - total, seg)


def _merge_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sorted union of two strictly ascending int64 arrays."""
    if not a.size:
        return b
    at = np.searchsorted(a, b)
    b = b[(at == a.size) | (a[np.minimum(at, a.size - 1)] != b)]
    out = np.empty(a.size + b.size, dtype=np.int64)
    where_b = np.searchsorted(a, b) + np.arange(b.size)
    keep = np.ones(out.size, dtype=bool)
    keep[where_b] = False
    out[where_b] = b
    out[keep] = a
    return out


def pad_stream(tokens: np.ndarray, packing: Packing, pad_id: int) -> np.ndarray:
    """The stream followed by its padding: reshaped to (records, seq_len + 1) it is the
    records."""
    if tokens.size != packing.num_tokens:
        raise ValueError(f"stream has {tokens.size} tokens, packing expects {packing.num_tokens}")
    if not packing.padding:
        return tokens
    return np.concatenate([tokens, np.full(packing.padding, pad_id, dtype=tokens.dtype)])


def unpack(records: np.ndarray, segments: Segments) -> np.ndarray:
    """The document tokens of ``records`` (shape (R, seq_len+1)), padding dropped: the
    inverse of packing."""
    flat = np.asarray(records).reshape(-1)
    width = records.shape[1] if records.ndim == 2 else flat.size
    record = np.repeat(np.arange(segments.num_records), np.diff(segments.seg_record_offsets))
    keep = segments.seg_doc >= 0
    starts = record[keep] * width + segments.seg_start[keep]
    return flat[ranges(starts, segments.seg_length[keep].astype(np.int64))]


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + n) for each (s, n): a gather index, vectorized."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths[:-1])]), lengths)
    return shift + np.arange(total, dtype=np.int64)


def save_segments(path: str | os.PathLike, segments: Segments) -> None:
    """Write segments as an ``.npz``, atomically (``shardcore.atomic``)."""
    with atomic.atomic_open(path) as f:
        np.savez(f, **{k: getattr(segments, k) for k in SEGMENT_FIELDS})


def load_segments(path: str | os.PathLike | IO[bytes]) -> Segments:
    with np.load(path, allow_pickle=False) as data:
        return Segments(**{f: data[f] for f in SEGMENT_FIELDS})

"""A flag's document indices (``models.FlagDocuments``): written in runs, read by count,
by page or whole as a sorted array.

A run is up to ``RUN`` sorted, distinct indices: the differences from its first index as
little-endian unsigned 64-bit integers, zlib-compressed (indices of nearby documents differ
by small numbers: one or two bytes a document). Every reader answers from the runs it needs:
how many indices lie below n (the runs wholly below summed in the database, one run decoded),
a page after an index (the runs from it), all of them (a sorted int64 array, 8 bytes a
document: what a taint task compares a pool's documents with)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np
from django.db.models import Sum

from shardcore.mixture.reader import sorted_distinct
from webapp.catalog.models import Flag, FlagDocuments

RUN = 1 << 16  # indices a row
PAGE = 100  # indices a page of the flag's page and API, unless asked otherwise
PAGE_MAX = 10_000


def encode(ids: np.ndarray) -> bytes:
    deltas = np.diff(ids, prepend=ids[:1]).astype("<u8")
    return zlib.compress(deltas.tobytes(), 1)


def decode(run: FlagDocuments) -> np.ndarray:
    deltas = np.frombuffer(zlib.decompress(bytes(run.data)), dtype="<u8").astype(np.int64)
    ids = np.cumsum(deltas) + run.first
    if ids.size != run.count or int(ids[-1]) != run.last:
        raise ValueError(f"flag {run.flag_id}: its documents from {run.first} do not decode")
    return ids


def normalized(document_ids) -> np.ndarray:
    """Sorted distinct indices as int64, from any iterable of integers or an array."""
    if not isinstance(document_ids, np.ndarray):
        document_ids = np.fromiter((int(i) for i in document_ids), dtype=np.int64)
    return sorted_distinct(document_ids)


def store(flag: Flag, ids: np.ndarray) -> int:
    """Replace the flag's documents with ``ids`` (sorted, distinct: ``normalized``) and set
    its ``num_documents``; call inside the transaction that records them. Returns the count."""
    FlagDocuments.objects.filter(flag=flag).delete()
    rows = []
    for a in range(0, int(ids.size), RUN):
        part = ids[a : a + RUN]
        rows.append(
            FlagDocuments(
                flag=flag,
                first=int(part[0]),
                last=int(part[-1]),
                count=int(part.size),
                data=encode(part),
            )
        )
        if len(rows) >= 64:
            FlagDocuments.objects.bulk_create(rows)
            rows = []
    FlagDocuments.objects.bulk_create(rows)
    Flag.objects.filter(pk=flag.pk).update(num_documents=int(ids.size))
    flag.num_documents = int(ids.size)
    return int(ids.size)


def runs(flag: Flag, *, after: int = -1, fetch: int = 16) -> Iterator[np.ndarray]:
    """The flag's indices greater than ``after``, a run at a time, in order (``fetch``
    runs a round trip)."""
    rows = FlagDocuments.objects.filter(flag=flag, last__gt=after).order_by("last")
    for run in rows.iterator(chunk_size=fetch):
        ids = decode(run)
        yield ids[ids > after] if run.first <= after else ids


def all_ids(flag: Flag) -> np.ndarray:
    """Every index the flag names, sorted (8 bytes a document)."""
    parts = list(runs(flag))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def count_below(flag: Flag, n: int) -> int:
    """How many of the flag's indices are below ``n``: the runs wholly below summed by the
    database, the one across ``n`` decoded."""
    below = FlagDocuments.objects.filter(flag=flag, last__lt=n).aggregate(s=Sum("count"))["s"]
    across = FlagDocuments.objects.filter(flag=flag, first__lt=n, last__gte=n).first()
    return int(below or 0) + (int((decode(across) < n).sum()) if across else 0)


def page(flag: Flag, *, after: int = -1, limit: int = PAGE) -> list[int]:
    """Up to ``limit`` of the flag's indices greater than ``after``, in order."""
    limit = max(1, min(int(limit), PAGE_MAX))
    out: list[int] = []
    for ids in runs(flag, after=after, fetch=1 + limit // RUN):
        out += ids[: limit - len(out)].tolist()
        if len(out) >= limit:
            break
    return out

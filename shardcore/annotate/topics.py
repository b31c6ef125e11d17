"""Topic clusters: an embedding of each document's beginning (``shardcore.annotate.embed``),
k-means fit on a sample of the documents and applied to all.

Per document: ``cluster`` (0 .. k-1) and ``distance`` (Euclidean, from the document's unit
vector to its cluster's centroid). With the annotation, in ``summary.json``: for each
cluster its size, its top terms (TF-IDF with the clusters as the documents, over the words
of the sampled documents' beginnings: a word's share of the cluster's words times
``log((1 + k) / (1 + df))``, df the number of clusters it occurs in, so a word of every
cluster scores 0; ties by count) and the documents
nearest its centroid as example snippets (doc_id and their first ``snippet_chars``
characters, whitespace folded) for the page.

Units (one per tokenized shard) embed the shard's documents (the first ``head_chars``
characters, at most ``max_tokens`` tokens) and keep, as scratch beside the annotation
(deleted when it is finished), the vectors and those beginnings. ``finish`` fits
scikit-learn's ``MiniBatchKMeans`` (seeded, so a rerun writes the same bytes) on
``sample`` documents drawn with the seed, assigns every document to its nearest centroid
shard by shard, then reads the beginnings of the sampled documents for the terms and of
the nearest ones for the snippets. Memory at ``finish``: the vectors, memory-mapped
(4 * dim bytes per document: 256 for ``static``), and the sample's beginnings.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from shardcore import atomic
from shardcore.annotate import Annotator
from shardcore.annotate.embed import ENCODERS, get_encoder
from shardcore.errors import InputError
from shardcore.npy_rows import RowsFile

_TERM = re.compile(r"[^\W\d_]{3,}", re.UNICODE)


def terms(text: str) -> list[str]:
    """The words a cluster's top terms are drawn from: letters only, at least 3, lowercase."""
    return _TERM.findall(text.lower())


def fit_centers(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    """k-means centroids of the rows of ``x`` (scikit-learn's MiniBatchKMeans, seeded)."""
    from sklearn.cluster import MiniBatchKMeans  # heavy; only the clustering needs it

    km = MiniBatchKMeans(n_clusters=k, random_state=seed, batch_size=2048, n_init=3, max_iter=100)
    return km.fit(x).cluster_centers_.astype(np.float32)


class TopicClusters(Annotator):
    name: ClassVar[str] = "topics"
    version: ClassVar[str] = "1"
    defaults: ClassVar[dict[str, Any]] = {
        "encoder": "static",
        "k": 64,
        "sample": 100_000,
        "max_tokens": 256,
        "head_chars": 2_000,
        "seed": 1,
        "top_terms": 10,
        "snippets": 3,
        "snippet_chars": 240,
    }
    corpus_level: ClassVar[bool] = True
    has_summary: ClassVar[bool] = True
    work_files: ClassVar[tuple[str, ...]] = ("vectors.npy", "heads.json", "meta.json")

    def check_params(self) -> None:
        p = self.params
        if p["encoder"] not in ENCODERS:
            raise InputError(
                f"annotator 'topics': encoder {p['encoder']!r} unknown "
                f"(encoders: {', '.join(sorted(ENCODERS))})"
            )
        for key in ("k", "sample", "max_tokens", "head_chars"):
            if p[key] < 1:
                raise InputError(f"annotator 'topics': {key} must be at least 1")
        if p["sample"] < p["k"]:
            raise InputError(
                f"annotator 'topics': sample ({p['sample']}) must be at least k ({p['k']})"
            )
        for key in ("top_terms", "snippets", "snippet_chars"):
            if p[key] < 0:
                raise InputError(f"annotator 'topics': {key} must not be negative")

    def fields(self) -> list[pa.Field]:
        return [pa.field("cluster", pa.int32()), pa.field("distance", pa.float32())]

    def embed(self, texts: list[str]) -> np.ndarray:
        p = self.params
        enc = get_encoder(p["encoder"], p["max_tokens"])
        heads = [t[: p["head_chars"]] for t in texts]
        return np.concatenate(
            [enc.encode(heads[lo : lo + 1024]) for lo in range(0, len(heads), 1024)]
            or [np.zeros((0, enc.dim), np.float32)]
        )

    # ---------------------------------------------------------------- units
    def prepare(self, batches: Iterable[list[str]], final: Path, *, first_doc_id: int) -> None:
        heads: list[str] = []
        with atomic.atomic_path(final) as tmp:
            tmp.mkdir()
            dim = get_encoder(self.params["encoder"], self.params["max_tokens"]).dim
            with RowsFile(tmp / "vectors.npy", np.float32, (dim,)) as vectors:
                for texts in batches:
                    vectors.append(self.embed(texts))
                    heads += [t[: self.params["head_chars"]] for t in texts]
            (tmp / "heads.json").write_text(json.dumps(heads, ensure_ascii=False))
            (tmp / "meta.json").write_text(json.dumps({"first_doc_id": first_doc_id}))

    # ---------------------------------------------------------------- finish
    def finish(self, work: list[Path]) -> list[dict[str, Any]]:
        p = self.params
        vecs = [np.load(w / "vectors.npy", mmap_mode="r") for w in work]
        firsts = [json.loads((w / "meta.json").read_text())["first_doc_id"] for w in work]
        counts = [len(v) for v in vecs]
        starts = np.cumsum([0, *counts])
        n = int(starts[-1])
        if n == 0:
            self._summary = {"documents": 0, "k": 0, "clusters": []}
            return [{"cluster": [], "distance": []} for _ in work]
        rng = np.random.default_rng(p["seed"])
        sample = np.sort(rng.choice(n, size=min(p["sample"], n), replace=False))
        k = min(p["k"], len(sample))
        fit_x = np.concatenate(
            [
                np.asarray(v[sample[(sample >= lo) & (sample < lo + len(v))] - lo])
                for v, lo in zip(vecs, starts[:-1], strict=True)
            ]
        )
        centers = fit_centers(fit_x, k, p["seed"])
        c_norm = (centers**2).sum(1)
        cluster = np.empty(n, np.int32)
        distance = np.empty(n, np.float32)
        for v, lo in zip(vecs, starts[:-1], strict=True):
            for a in range(0, len(v), 65_536):
                x = np.asarray(v[a : a + 65_536], dtype=np.float32)
                d2 = (x**2).sum(1)[:, None] - 2 * x @ centers.T + c_norm[None, :]
                best = d2.argmin(1)
                cluster[lo + a : lo + a + len(x)] = best
                distance[lo + a : lo + a + len(x)] = np.sqrt(
                    np.maximum(d2[np.arange(len(x)), best], 0)
                )
        self._summary = self._describe(work, starts, firsts, sample, cluster, distance, k)
        self._summary["inertia_per_document"] = round(float((distance**2).mean()), 6)
        return [
            {"cluster": cluster[lo:hi], "distance": distance[lo:hi]}
            for lo, hi in zip(starts[:-1], starts[1:], strict=True)
        ]

    def _describe(
        self,
        work: list[Path],
        starts: np.ndarray,
        firsts: list[int],
        sample: np.ndarray,
        cluster: np.ndarray,
        distance: np.ndarray,
        k: int,
    ) -> dict[str, Any]:
        p = self.params
        size = np.bincount(cluster, minlength=k)
        order = np.lexsort((np.arange(len(cluster)), distance, cluster))
        first_of = np.searchsorted(cluster[order], np.arange(k))
        nearest = {
            c: [int(i) for i in order[first_of[c] : first_of[c] + min(p["snippets"], size[c])]]
            for c in range(k)
        }
        wanted = set(sample.tolist()) | {i for ids in nearest.values() for i in ids}
        heads: dict[int, str] = {}
        for s, w in enumerate(work):
            lo, hi = int(starts[s]), int(starts[s + 1])
            if any(lo <= i < hi for i in wanted):
                shard_heads = json.loads((w / "heads.json").read_text())
                heads.update({i: shard_heads[i - lo] for i in wanted if lo <= i < hi})
        per_cluster: list[Counter] = [Counter() for _ in range(k)]
        for i in sample.tolist():
            per_cluster[int(cluster[i])].update(terms(heads[i]))
        df: Counter = Counter()  # clusters a word occurs in
        for counts in per_cluster:
            df.update(counts.keys())
        shard_of = np.searchsorted(starts, np.arange(len(cluster)), side="right") - 1

        def doc_id(i: int) -> int:
            s = int(shard_of[i])
            return int(firsts[s] + i - starts[s])

        clusters = []
        for c in range(k):
            total = sum(per_cluster[c].values()) or 1
            scored = sorted(
                (
                    (cnt / total * math.log((1 + k) / (1 + df[t])), cnt, t)
                    for t, cnt in per_cluster[c].items()
                ),
                key=lambda x: (-x[0], -x[1], x[2]),
            )
            clusters.append(
                {
                    "cluster": c,
                    "size": int(size[c]),
                    "top_terms": [t for _, _, t in scored[: p["top_terms"]]],
                    "examples": [
                        {
                            "doc_id": doc_id(i),
                            "distance": round(float(distance[i]), 4),
                            "text": " ".join(heads[i].split())[: p["snippet_chars"]],
                        }
                        for i in nearest[c]
                    ],
                }
            )
        return {
            "documents": int(len(cluster)),
            "k": int(k),
            "sample": int(len(sample)),
            "encoder": p["encoder"],
            "clusters": clusters,
        }

    def summary(self) -> dict[str, Any] | None:
        return getattr(self, "_summary", None)

"""Two sources of real text for near-duplicates across sources: ``a`` holds CPython
standard-library modules, ``b`` texts of its own, exact copies of some of ``a``'s and
planted near-copies (a known fraction of their words replaced): a small fraction whose
copies are near-duplicates (their Jaccard similarity well above the threshold), and a
large one whose copies are other texts (well below it), each measured by brute force."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from shardcore.annotate.dedup import jaccard, shingles
from tests.integration.test_jobs_workers import stdlib_docs, write_jsonl
from tests.unit.test_annotate_dedup import _mutate

EXACT = 6
NEAR = {0.003: 4, 0.006: 4, 0.05: 3}  # fraction of words replaced: copies planted


@dataclass
class Planted:
    a: list[str]
    b: list[str]
    own: int  # b's first ``own`` texts are its own
    copies: list[tuple[int, int]]  # (document of a, document of b): exact copies
    near: list[tuple[int, int, float]]  # (document of a, document of b, fraction changed)
    similarity: list[float]  # brute-force Jaccard of each near-copy with its original

    def duplicates(self, threshold: float) -> list[tuple[int, int]]:
        """(document of a, document of b) of every copy at ``threshold`` or more."""
        near = [
            (i, j)
            for (i, j, _), s in zip(self.near, self.similarity, strict=True)
            if s >= threshold
        ]
        return sorted([*self.copies, *near])


def planted_sources(root: Path, *, n_a: int = 60, n_own: int = 10, chars: int = 12_000) -> Planted:
    """Writes ``root/a/a.jsonl`` and ``root/b/b.jsonl``."""
    rng = random.Random(27)
    docs = [d["text"][:chars] for d in stdlib_docs(n_a + n_own, offset=20)]
    a, b = docs[:n_a], docs[n_a:]
    vocab = sorted({w for t in a for w in t.split()})
    chosen = rng.sample(range(n_a), EXACT + sum(NEAR.values()))
    copies, near = [], []
    for i in chosen[:EXACT]:
        copies.append((i, len(b)))
        b.append(a[i])
    k = EXACT
    for frac, count in NEAR.items():
        for i in chosen[k : k + count]:
            near.append((i, len(b), frac))
            b.append(_mutate(a[i], frac, rng, vocab))
        k += count
    write_jsonl(root / "a" / "a.jsonl", [{"text": t} for t in a])
    write_jsonl(root / "b" / "b.jsonl", [{"text": t} for t in b])
    similarity = [jaccard(shingles(a[i], 5), shingles(b[j], 5)) for i, j, _ in near]
    return Planted(a=a, b=b, own=n_own, copies=copies, near=near, similarity=similarity)

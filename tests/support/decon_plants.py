"""Planted contamination from real text, for the decontamination tests and bench/decon.

Benchmark items are docstrings of CPython's standard library (functions and classes of
one half of its top-level modules, then of its packages when more are asked: long items
of 20 to 120 words, short ones of 8 to 12 words).
Host documents are the source files of the other half, cut into pieces. Items that the
host documents already contain (a docstring copied between modules), or that share an
n-gram with another item, are dropped first, by a brute-force check, so that a clean host
is clean and a plant overlaps its own item only.

Each host document gets at most one plant, at a random word boundary:

- ``whole``: the item as it is;
- ``changed``: the item with its case, punctuation and whitespace changed (upper or
  title case, punctuation removed or added, newlines, tabs and runs of spaces,
  full-width letters that NFKC folds back);
- ``fragment``: a run of the item's words holding at least ``threshold + 0.1`` of its
  n-grams (long items only);
- ``near_miss``: a run holding at most ``threshold - 0.15`` of them (long items), or a
  short item missing one word;
- ``common``: no item, but short phrases of items (fewer words than an n-gram) and one
  single n-gram of a long item: phrases a clean document shares with benchmarks;
- ``clean``: nothing.

``truth[d]`` is the set of item ids planted above the threshold into document ``d``.
``reference`` computes what a document overlaps by brute force (Python sets of word
tuples): the oracle the fast index must equal.
"""

from __future__ import annotations

import ast
import math
import random
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from shardcore.decon.text import words

STDLIB = Path(sysconfig.get_paths()["stdlib"])
KINDS = ("whole", "changed", "fragment", "near_miss", "common", "clean")


@dataclass
class Plants:
    items: list[dict]  # {"id", "text"}
    docs: list[str]
    kinds: list[str]
    truth: list[set[str]]  # per document, the item ids planted above the threshold
    planted: list[str | None] = field(default_factory=list)  # the item of any plant


def docstrings(paths: list[Path]) -> list[str]:
    out: list[str] = []
    for p in paths:
        try:
            tree = ast.parse(p.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    out.append(" ".join(doc.split()))
    return out


def _ngrams(ws: list[str], n: int) -> set[tuple[str, ...]]:
    if len(ws) < n:
        return {tuple(ws)}
    return {tuple(ws[i : i + n]) for i in range(len(ws) - n + 1)}


def item_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    return _ngrams(words(text), n)


def reference(
    docs: list[str], items: list[dict], *, n: int = 13, min_words: int = 8, threshold: float = 0.5
) -> tuple[list[set[str]], list[float]]:
    """Per document: the ids of the items it overlaps and its largest overlap fraction,
    by brute force over Python sets (the minimum-overlap rule: an item shorter than n words
    is one n-gram of its own length; shorter than ``min_words``, skipped)."""
    grams = []
    for it in items:
        ws = words(it["text"])
        if len(ws) >= min_words:
            grams.append((it["id"], _ngrams(ws, n), len(ws)))
    lengths = sorted({min(k, n) for _, _, k in grams})
    by_gram: dict[tuple[str, ...], list[int]] = {}
    for i, (_, gs, _) in enumerate(grams):
        for g in gs:
            by_gram.setdefault(g, []).append(i)
    hits, best = [], []
    for d in docs:
        ws = words(d)
        found: dict[int, int] = {}
        seen: set[tuple[str, ...]] = set()
        for k in lengths:
            for j in range(len(ws) - k + 1):
                g = tuple(ws[j : j + k])
                if g in seen or g not in by_gram:
                    continue
                seen.add(g)
                for i in by_gram[g]:
                    found[i] = found.get(i, 0) + 1
        over = {
            grams[i][0]
            for i, c in found.items()
            if c >= math.ceil(threshold * len(grams[i][1]) - 1e-9)
        }
        hits.append(over)
        best.append(max((c / len(grams[i][1]) for i, c in found.items()), default=0.0))
    return hits, best


def _changed(text: str, rng: random.Random) -> str:
    ws = text.split()
    style = rng.randrange(3)
    if style == 0:
        ws = [w.upper() for w in ws]
    elif style == 1:
        ws = [w.title() for w in ws]
    else:  # full-width letters: NFKC folds them back
        ws = [
            "".join(chr(ord(c) + 0xFEE0) if "a" <= c <= "z" else c for c in w)
            if rng.random() < 0.3
            else w
            for w in ws
        ]
    out = []
    for w in ws:
        w = w.strip(".,;:!?()'\"") or w
        out.append(w + rng.choice(["", "", ",", ";", " -", "...", "!"]))
    seps = [rng.choice([" ", "  ", "\n", "\t", " \n "]) for _ in out]
    return "".join(w + s for w, s in zip(out, seps, strict=True)).strip()


def _insert(host: str, plant: str, rng: random.Random) -> str:
    ws = host.split(" ")
    at = rng.randrange(len(ws) + 1)
    return " ".join(ws[:at] + ["\n", plant, "\n"] + ws[at:])


def make(
    n_items: int,
    n_docs: int,
    *,
    seed: int = 0,
    n: int = 13,
    threshold: float = 0.5,
    doc_words: int = 400,
    short_share: float = 0.15,
) -> Plants:
    """``n_items`` benchmark items and ``n_docs`` documents, the kinds spread evenly
    (``KINDS``, in turn), reproducible from ``seed``."""
    rng = random.Random(seed)
    paths = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 2000)
    item_paths, host_paths = paths[0::2], paths[1::2]
    # host documents: pieces of ``doc_words`` words of the host modules' sources
    pieces: list[str] = []
    for p in host_paths:
        ws = p.read_text(encoding="utf-8", errors="replace").split(" ")
        for lo in range(0, len(ws), doc_words):
            piece = " ".join(ws[lo : lo + doc_words])
            if len(piece.split()) > 50:
                pieces.append(piece)
        if len(pieces) >= n_docs:
            break
    while len(pieces) < n_docs:
        pieces += pieces[: n_docs - len(pieces)]
    pieces = pieces[:n_docs]
    host_grams: set[tuple[str, ...]] = set()
    for piece in pieces:
        ws = words(piece)
        for k in range(8, n + 1):
            host_grams.update(tuple(ws[j : j + k]) for j in range(len(ws) - k + 1))
    longs: list[str] = []
    shorts: list[str] = []
    seen: set[tuple[str, ...]] = set()
    # the item side's top-level modules first, then (when more items are asked than they
    # give) the standard library's packages, each group in its own shuffled order
    for group in (item_paths, sorted(STDLIB.glob("*/*.py"))):
        more_long, more_short = [], []
        for doc in docstrings(group):
            ws = words(doc)
            key = tuple(ws)
            if key in seen:
                continue
            seen.add(key)
            if any(g in host_grams for g in _ngrams(ws, n)):
                continue  # the hosts already hold it: not a clean benchmark for them
            if 20 <= len(ws) <= 120:
                more_long.append(doc)
            elif 8 <= len(ws) < n:
                more_short.append(doc)
        rng.shuffle(more_long)
        rng.shuffle(more_short)
        longs += more_long
        shorts += more_short
        if len(longs) + len(shorts) >= 2 * n_items:
            break
    n_short = min(len(shorts), int(n_items * short_share))
    # items share no n-gram with each other (docstrings copied with a word changed are
    # one item for the truth): a document holding one holds no other
    taken: set[tuple[str, ...]] = set()
    chosen = []
    for group, want in ((shorts, n_short), (longs, n_items - n_short)):
        got = 0
        for doc in group:
            if got == want:
                break
            gs = _ngrams(words(doc), n)
            if gs & taken:
                continue
            taken |= gs
            chosen.append(doc)
            got += 1
    if len(chosen) < n_items:
        raise ValueError(f"the standard library gives {len(chosen)} items, {n_items} asked")
    items = [{"id": f"q{i}", "text": t} for i, t in enumerate(chosen)]
    long_ids = [i for i, t in enumerate(chosen) if len(words(t)) >= n]
    short_ids = [i for i, t in enumerate(chosen) if len(words(t)) < n]
    docs, kinds, truth, planted = [], [], [], []
    for d, host in enumerate(pieces):
        kind = KINDS[d % len(KINDS)]
        pool = long_ids if kind in ("fragment", "common") or not short_ids else None
        if pool is None:
            pool = short_ids if rng.random() < short_share else long_ids
        i = rng.choice(pool)
        text = chosen[i]
        ws = text.split()
        nw = len(words(text))
        hit: set[str] = set()
        plant: str | None = None
        if kind == "whole":
            plant, hit = text, {items[i]["id"]}
        elif kind == "changed":
            plant, hit = _changed(text, rng), {items[i]["id"]}
        elif kind == "fragment":
            grams = nw - n + 1
            need = math.ceil((threshold + 0.1) * grams)
            size = min(nw, need + n - 1)
            start = rng.randrange(nw - size + 1)
            plant, hit = " ".join(words(text)[start : start + size]), {items[i]["id"]}
        elif kind == "near_miss":
            if nw >= n:
                grams = nw - n + 1
                most = max(0, math.floor((threshold - 0.15) * grams))
                size = most + n - 1 if most else n - 1
                start = rng.randrange(nw - size + 1)
                plant = " ".join(words(text)[start : start + size])
            else:  # a short item missing one word
                ws = words(text)
                drop = rng.randrange(len(ws))
                plant = " ".join(ws[:drop] + ws[drop + 1 :])
        elif kind == "common":
            phrases = []
            for _ in range(3):
                j = rng.choice(long_ids + short_ids)
                ws = words(chosen[j])
                k = rng.randrange(3, min(7, len(ws)))
                s = rng.randrange(len(ws) - k + 1)
                phrases.append(" ".join(ws[s : s + k]))
            ws = words(text)
            s = rng.randrange(len(ws) - n + 1)
            phrases.append(" ".join(ws[s : s + n]))  # one n-gram of a long item
            plant = " . ".join(phrases)
        docs.append(host if plant is None else _insert(host, plant, rng))
        kinds.append(kind)
        truth.append(hit)
        planted.append(items[i]["id"] if plant is not None else None)
    return Plants(items, docs, kinds, truth, planted)


def scores(found: list[set[str]], plants: Plants) -> dict[str, float]:
    """Recall over the plants above the threshold, precision over every reported
    (document, item) pair, and per kind the share of documents reported with anything."""
    positives = sum(len(t) for t in plants.truth)
    caught = sum(len(t & f) for t, f in zip(plants.truth, found, strict=True))
    reported = sum(len(f) for f in found)
    right = caught
    out = {
        "recall": caught / positives if positives else 1.0,
        "precision": right / reported if reported else 1.0,
        "positives": positives,
        "reported": reported,
    }
    for kind in KINDS:
        docs = [f for f, k in zip(found, plants.kinds, strict=True) if k == kind]
        out[f"flagged_{kind}"] = sum(1 for f in docs if f) / len(docs) if docs else 0.0
    return out

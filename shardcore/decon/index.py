"""The compiled benchmark index and the match of documents against it.

Compiling reads every item of every benchmark of a spec (``shardcore.decon.spec``) once,
normalizes it (``shardcore.decon.text``) and keeps, in numpy arrays only:

- ``keys``: the distinct keys of every item's word n-grams, sorted (uint64);
- ``offsets``/``postings``: the items holding each key (CSR: ``postings[offsets[k]:
  offsets[k + 1]]``, int32 item numbers);
- per item its number of distinct keys (``item_ngrams``) and its benchmark;
- a one-hash Bloom filter over the keys (about 16 bits a key), which a document's n-grams
  pass before the binary search, so that most of them cost one array read.

Memory is bounded by the benchmarks (about 23 bytes per benchmark n-gram), never by the
corpus. The index's fingerprint hashes the arrays, the item ids and the parameters (not
the spec's location): the same benchmarks, read anywhere, give the same fingerprint.

**The minimum-overlap rule.** An item of at least ``ngram`` words is represented by its
distinct word ``ngram``-grams. An item of ``min_words`` to ``ngram - 1`` words is one
n-gram of its own length: its whole normalized word sequence, which a document must
contain to overlap it. An item of fewer than ``min_words`` words is skipped (a phrase
that short is everywhere); the index counts and names them per benchmark.

A document overlaps an item when it contains at least ``threshold`` of the item's
distinct n-grams (a fraction in (0, 1]); its ``max_overlap`` is the largest such fraction
over every item it shares an n-gram with, overlapping or not.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from shardcore import atomic, limits, storage
from shardcore.decon import text as tx
from shardcore.decon.spec import load_spec, read_items
from shardcore.errors import InputError, ManifestError
from shardcore.manifest import check_kind, fingerprint

KIND = "decon_index"
FORMAT = 1
ARRAYS = ("keys", "offsets", "postings", "item_ngrams", "item_benchmark")
ITEMS = "items.json"
HEADER = "index.json"
SKIPPED_SHOWN = 20  # the skipped item ids an index names per benchmark


def check_params(ngram: Any, min_words: Any) -> tuple[int, int]:
    """``ngram`` and ``min_words`` checked against ``shardcore.limits``."""
    n = limits.check_int("ngram", ngram, 1, limits.MAX_NGRAM)
    m = limits.check_int("min_words", min_words, 1, n)
    return n, m


class DeconIndex:
    """A compiled index (module docstring); built by ``compile_index`` or ``load_index``."""

    def __init__(
        self,
        *,
        ngram: int,
        min_words: int,
        benchmarks: list[str],
        item_ids: list[str],
        arrays: dict[str, np.ndarray],
        report: list[dict[str, Any]],
        short_lengths: Sequence[int],
    ):
        self.ngram, self.min_words = ngram, min_words
        self.benchmarks = list(benchmarks)
        self.item_ids = list(item_ids)  # qualified "<benchmark>:<id>", by item number
        self.keys: np.ndarray = arrays["keys"]
        self.offsets: np.ndarray = arrays["offsets"]
        self.postings: np.ndarray = arrays["postings"]
        self.item_ngrams: np.ndarray = arrays["item_ngrams"]
        self.item_benchmark: np.ndarray = arrays["item_benchmark"]
        # per benchmark: {"name", "items", "indexed", "skipped", "skipped_ids"}
        self.report = report
        self.short_lengths = sorted(int(x) for x in short_lengths)
        # the n-gram lengths looked up: ngram, and each shorter item's own length
        self.lengths = sorted(set(self.short_lengths) | {ngram})
        h = xxhash.xxh3_128()
        for name in ARRAYS:
            h.update(np.ascontiguousarray(arrays[name]).tobytes())
        params = {
            "format": FORMAT,
            "ngram": ngram,
            "min_words": min_words,
            "normalization": tx.NORMALIZATION,
            "benchmarks": self.benchmarks,
            "items": xxhash.xxh3_128_hexdigest("\n".join(self.item_ids).encode()),
            "arrays": h.hexdigest(),
            "report": report,
        }
        self.fingerprint = fingerprint(KIND, params=params)
        # one-hash Bloom filter: 16 bits a key (a false pass about 6%), at least 4 Ki bits
        bits = 1 << max(12, int(np.ceil(np.log2(max(1, self.keys.size) * 16))))
        self._shift = np.uint64(64 - (bits.bit_length() - 1))
        self._bloom = np.zeros(bits // 64, dtype=np.uint64)
        idx = self.keys >> self._shift
        np.bitwise_or.at(self._bloom, idx >> np.uint64(6), np.uint64(1) << (idx & np.uint64(63)))

    def nbytes(self) -> int:
        arrays = [getattr(self, a) for a in ARRAYS]
        return sum(a.nbytes for a in arrays) + self._bloom.nbytes

    def describe(self) -> dict[str, Any]:
        """What enters an annotation's fingerprint and manifest."""
        return {
            "fingerprint": self.fingerprint,
            "ngram": self.ngram,
            "min_words": self.min_words,
            "normalization": tx.NORMALIZATION,
            "items": len(self.item_ids),
            "ngrams": int(self.keys.size),
            "benchmarks": self.report,
        }

    # ------------------------------------------------------------------ matching

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """For each key, its index in ``keys`` of the index, or -1."""
        out = np.full(keys.size, -1, dtype=np.int64)
        if not keys.size or not self.keys.size:
            return out
        idx = keys >> self._shift
        maybe = (self._bloom[idx >> np.uint64(6)] >> (idx & np.uint64(63))) & np.uint64(1)
        cand = np.flatnonzero(maybe)
        if cand.size:
            pos = np.searchsorted(self.keys, keys[cand])
            pos = np.minimum(pos, self.keys.size - 1)
            hit = self.keys[pos] == keys[cand]
            out[cand[hit]] = pos[hit]
        return out

    def match(
        self, texts: Sequence[str], threshold: float
    ) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
        """Per text: the number of items it overlaps, its largest overlap fraction and the
        item numbers it overlaps (ascending)."""
        n = len(texts)
        pairs = self._hit_pairs([tx.normalize(t) for t in texts])
        count = np.zeros(n, dtype=np.int32)
        best = np.zeros(n, dtype=np.float32)
        items: list[list[int]] = [[] for _ in range(n)]
        if not pairs.size:
            return count, best, items
        docs = (pairs // np.int64(self.keys.size)).astype(np.int64)
        k = pairs % np.int64(self.keys.size)
        lo = self.offsets[k]
        lens = self.offsets[k + 1] - lo
        total = int(lens.sum())
        doc_rep = np.repeat(docs, lens)
        first = np.repeat(lo - (np.cumsum(lens) - lens), lens)
        item = self.postings[first + np.arange(total, dtype=np.int64)].astype(np.int64)
        pair = doc_rep * np.int64(len(self.item_ids)) + item
        pair.sort()
        edge = np.flatnonzero(np.diff(pair, prepend=np.int64(-1)))
        uniq = pair[edge]
        hits = np.diff(np.append(edge, pair.size))
        d = uniq // np.int64(len(self.item_ids))
        it = uniq % np.int64(len(self.item_ids))
        frac = hits / self.item_ngrams[it]
        np.maximum.at(best, d, frac.astype(np.float32))
        # a fraction compared as counts: hits >= threshold * ngrams, without rounding error
        over = hits >= np.ceil(threshold * self.item_ngrams[it] - 1e-9)
        for doc, i in zip(d[over].tolist(), it[over].tolist(), strict=True):
            items[doc].append(i)
        count[:] = np.bincount(d[over], minlength=n)[:n]
        return count, best, items

    def _hit_pairs(self, normalized: Sequence[str]) -> np.ndarray:
        """The distinct (text, key) pairs found, as ``text * K + key index``."""
        found: list[np.ndarray] = []
        for seg_text, seg_group, _whole in _segments(normalized, self.ngram):
            data = " ".join(seg_text).encode("utf-8")
            hashes, starts = tx.word_hashes(data)
            if not hashes.size:
                continue
            bounds = np.cumsum([0] + [len(s.encode("utf-8")) + 1 for s in seg_text[:-1]])
            seg = np.searchsorted(bounds, starts, side="right") - 1
            group = np.asarray(seg_group, dtype=np.int64)[seg]
            for _length, start, keys in tx.ngram_keys(hashes, seg, self.lengths):
                at = self.lookup(keys)
                ok = at >= 0
                if ok.any():
                    found.append(group[start[ok]] * np.int64(self.keys.size) + at[ok])
        if not found:
            return np.zeros(0, dtype=np.int64)
        return _distinct(np.concatenate(found))


def _distinct(a: np.ndarray) -> np.ndarray:
    """The distinct values of ``a``, ascending (a sort: faster than ``np.unique`` here)."""
    a = np.sort(a)
    if a.size:
        a = a[np.diff(a, prepend=a[0] - 1) != 0]
    return a


def _segments(
    normalized: Sequence[str], ngram: int
) -> Iterator[tuple[list[str], list[int], list[bool]]]:
    """Groups of (texts, their text numbers, whether each is a whole text) of about
    ``CHUNK_BYTES`` each; a text longer than that is cut at spaces into pieces overlapping
    by ``ngram - 1`` words."""
    batch: list[str] = []
    group: list[int] = []
    whole: list[bool] = []
    size = 0
    for i, t in enumerate(normalized):
        if not t:
            continue
        pieces = [t] if len(t) <= tx.CHUNK_BYTES else list(_pieces(t, ngram))
        for p in pieces:
            if batch and size + len(p) > tx.CHUNK_BYTES:
                yield batch, group, whole
                batch, group, whole, size = [], [], [], 0
            batch.append(p)
            group.append(i)
            whole.append(len(pieces) == 1)
            size += len(p) + 1
    if batch:
        yield batch, group, whole


def _pieces(t: str, ngram: int) -> Iterator[str]:
    lo = 0
    while lo < len(t):
        hi = t.find(" ", lo + tx.CHUNK_BYTES // 2)
        if hi < 0:
            yield t[lo:]
            return
        yield t[lo:hi]
        back = hi
        for _ in range(ngram - 1):
            prev = t.rfind(" ", lo, back)
            if prev < 0:
                break
            back = prev
        lo = back + 1 if back < hi else hi + 1


# ---------------------------------------------------------------------- compiling


def compile_index(spec: str | os.PathLike, *, ngram: int = 13, min_words: int = 8) -> DeconIndex:
    """The index of every item of the benchmarks the spec at ``spec`` names."""
    n, m = check_params(ngram, min_words)
    benchmarks = load_spec(spec)
    names = [b.name for b in benchmarks]
    item_ids: list[str] = []
    item_bench: list[int] = []
    report: list[dict[str, Any]] = []
    texts: list[str] = []
    for bi, b in enumerate(benchmarks):
        total = indexed = 0
        skipped: list[str] = []
        for item in read_items(b):
            total += 1
            norm = tx.normalize(item.text)
            if norm.count(" ") + 1 < m or not norm:
                skipped.append(item.id)
                continue
            indexed += 1
            item_ids.append(f"{b.name}:{item.id}")
            item_bench.append(bi)
            texts.append(norm)
        if not total:
            raise InputError(f"benchmark {b.name!r}: its files hold no item")
        report.append(
            {
                "name": b.name,
                "items": total,
                "indexed": indexed,
                "skipped": len(skipped),
                "skipped_ids": skipped[:SKIPPED_SHOWN],
            }
        )
    if len(item_ids) > limits.MAX_DECON_ITEMS:
        raise InputError(
            f"benchmarks: {len(item_ids)} items, more than the {limits.MAX_DECON_ITEMS} "
            "an index holds"
        )
    keys_all: list[np.ndarray] = []
    item_all: list[np.ndarray] = []
    short: set[int] = set()
    for seg_text, seg_group, seg_whole in _segments(texts, n):
        data = " ".join(seg_text).encode("utf-8")
        hashes, starts = tx.word_hashes(data)
        bounds = np.cumsum([0] + [len(s.encode("utf-8")) + 1 for s in seg_text[:-1]])
        seg = np.searchsorted(bounds, starts, side="right") - 1
        group = np.asarray(seg_group, dtype=np.int64)[seg]
        # a short item is one whole piece: its length in words (0 for the other pieces)
        seg_words = np.bincount(seg, minlength=len(seg_text)) * np.asarray(seg_whole)
        lengths_here = sorted({int(w) for w in seg_words if m <= w < n})
        short.update(lengths_here)
        for length, start, keys in tx.ngram_keys(hashes, seg, sorted({n, *lengths_here})):
            if length < n:
                keep = seg_words[seg[start]] == length
                keys, start = keys[keep], start[keep]
            keys_all.append(keys)
            item_all.append(group[start])
    keys = np.concatenate(keys_all) if keys_all else np.zeros(0, np.uint64)
    owner = np.concatenate(item_all) if item_all else np.zeros(0, np.int64)
    if keys.size > limits.MAX_DECON_NGRAMS:
        raise InputError(
            f"benchmarks: {keys.size} n-grams, more than the {limits.MAX_DECON_NGRAMS} an "
            "index holds"
        )
    order = np.lexsort((owner, keys))
    keys, owner = keys[order], owner[order]
    first = np.ones(keys.size, dtype=bool)
    first[1:] = (keys[1:] != keys[:-1]) | (owner[1:] != owner[:-1])
    keys, owner = keys[first], owner[first]  # distinct (key, item) pairs
    item_ngrams = np.bincount(owner, minlength=len(item_ids)).astype(np.int32)
    new_key = np.ones(keys.size, dtype=bool)
    new_key[1:] = keys[1:] != keys[:-1]
    uniq = keys[new_key]
    offsets = np.append(np.flatnonzero(new_key), keys.size).astype(np.int64)
    arrays = {
        "keys": uniq,
        "offsets": offsets,
        "postings": owner.astype(np.int32),
        "item_ngrams": item_ngrams,
        "item_benchmark": np.asarray(item_bench, dtype=np.int32),
    }
    return DeconIndex(
        ngram=n,
        min_words=m,
        benchmarks=names,
        item_ids=item_ids,
        arrays=arrays,
        report=report,
        short_lengths=sorted(short),
    )


# ---------------------------------------------------------------------- on disk


def save_index(index: DeconIndex, out: str | os.PathLike) -> Path:
    """Write ``index`` into the directory ``out``: its arrays (``.npy``), its item ids,
    then ``index.json`` last (the commit point)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in ARRAYS:
        with atomic.atomic_path(out / f"{name}.npy") as tmp, open(tmp, "wb") as f:
            np.save(f, getattr(index, name))
    atomic.write_text(out / ITEMS, json.dumps(index.item_ids, ensure_ascii=False))
    header = {
        "kind": KIND,
        "format": FORMAT,
        **index.describe(),
        "benchmark_names": index.benchmarks,
        "short_lengths": index.short_lengths,
    }
    atomic.write_text(out / HEADER, json.dumps(header, indent=1, sort_keys=True))
    return out


def is_index(path: str | os.PathLike) -> bool:
    """True when ``path`` holds a compiled index (its ``index.json``)."""
    url = storage.resolve(path)
    try:
        return storage.open_store(url).exists(HEADER)
    except (OSError, ValueError):
        return False


def load_index(path: str | os.PathLike) -> DeconIndex:
    """The compiled index in the directory ``path`` (local or ``s3://``)."""
    url = storage.resolve(path)
    store = storage.open_store(url)
    try:
        header = json.loads(store.read_bytes(HEADER))
    except FileNotFoundError:
        raise ManifestError(f"{url}: no {HEADER}: not a compiled benchmark index") from None
    check_kind(header, KIND, f"{url} ({HEADER})")
    if header.get("format") != FORMAT:
        raise ManifestError(f"{url}: {HEADER} is not a benchmark index of format {FORMAT}")
    arrays = {
        name: np.load(io.BytesIO(store.read_bytes(f"{name}.npy")), allow_pickle=False)
        for name in ARRAYS
    }
    index = DeconIndex(
        ngram=header["ngram"],
        min_words=header["min_words"],
        benchmarks=header["benchmark_names"],
        item_ids=json.loads(store.read_bytes(ITEMS)),
        arrays=arrays,
        report=header["benchmarks"],
        short_lengths=header["short_lengths"],
    )
    if index.fingerprint != header["fingerprint"]:
        raise ManifestError(
            f"{url}: its arrays give fingerprint {index.fingerprint}, {HEADER} says "
            f"{header['fingerprint']}"
        )
    return index


_cache: dict[tuple, DeconIndex] = {}


def open_index(benchmarks: str, *, ngram: int, min_words: int) -> DeconIndex:
    """The index named by ``benchmarks``: a compiled index directory (its own ``ngram``
    and ``min_words`` must be the ones asked for), or a spec file, compiled here. Kept for
    the process, keyed by the location and what the files' sizes and times say."""
    url = storage.resolve(benchmarks)
    if not storage.is_remote(url) and not os.path.exists(url):
        raise InputError(f"benchmarks: {url}: no such spec file or index directory")
    stamp = _stamp(url)
    key = (url, ngram, min_words, stamp)
    if key not in _cache:
        if is_index(url):
            index = load_index(url)
            if (index.ngram, index.min_words) != (ngram, min_words):
                raise InputError(
                    f"benchmarks: {url} was compiled with ngram={index.ngram}, "
                    f"min_words={index.min_words}; asked ngram={ngram}, min_words={min_words}"
                )
        else:
            index = compile_index(url, ngram=ngram, min_words=min_words)
        _cache.clear()  # one index per process: memory bounded by one set of benchmarks
        _cache[key] = index
    return _cache[key]


def _stamp(url: str) -> tuple:
    """Sizes and modification times of a local spec (and its benchmark files) or index:
    a file changed under a long-lived process is read again. Remote: the location only
    (an object store's objects are replaced by new names, never edited in place)."""
    if storage.is_remote(url):
        return ()
    paths = [os.path.join(url, HEADER)] if os.path.isdir(url) else [url]
    if not os.path.isdir(url):
        with contextlib.suppress(InputError):  # compiling says what is wrong with the spec
            paths += [f for b in load_spec(url) for f in b.files if not storage.is_remote(f)]
    out: list[tuple] = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            out.append((p, None))
            continue
        out.append((p, st.st_size, st.st_mtime_ns))
    return tuple(out)

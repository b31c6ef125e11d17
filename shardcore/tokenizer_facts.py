"""What loading a tokenizer establishes, kept on disk so that the next process need not
load it again to know it: its fingerprint, vocabulary size and special tokens, and
whether the fast engine gave the reference's ids on the probe texts.

Loading tiktoken's cl100k (parsing 100,277 base64 lines, hashing them into the
fingerprint) and probing the fast engine against it cost ~0.3 CPU-s a process, more than
a tokenize run of 10 MB spends on its text; every worker and every run paid it again for
the same files. The facts are a pure function of the files that define the tokenizer and
of the library versions that read them, so they are stored under a key of exactly those:

- a tiktoken encoding: the encoding's name, tiktoken's version, the source of the plugin
  module that defines it, tiktoken's cache settings, and the content of the one local
  ``.tiktoken`` file its ranks come from (re-hashed at every lookup: ~1 ms);
- a probe verdict: the tokenizer's fingerprint (vocabulary, merges, specials, split
  pattern), the fast engine's build (its extension file's size and time) and how its
  backend was made, the probe texts' content, and which call was probed.

An entry is used only when every one of these is unchanged; anything else is a miss and
the tokenizer is loaded and probed as before, then the entry is written. Entries live
under ``<cache root>/tokenizers/`` (``shardcore.storage.cache_root``); a cache that cannot
be written is skipped silently (it is an optimisation, never a source of truth), and an
unreadable or malformed entry is a miss.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import xxhash

from shardcore import atomic
from shardcore.storage import cache_root

VERSION = 1  # of the facts' meaning: bumped when what is stored or how it is derived changes


def _dir() -> Path:
    return cache_root() / "tokenizers"


def file_digest(path: str | os.PathLike[str]) -> str | None:
    """xxh3-128 of a file's content, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return xxhash.xxh3_128_hexdigest(f.read())
    except OSError:
        return None


def key(*parts: object) -> str:
    """A cache key from the parts that determine an entry (with the facts' version)."""
    h = xxhash.xxh3_128(f"shardyard tokenizer facts v{VERSION}\0".encode())
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode() + b"\0")
    return h.hexdigest()


def load(name: str) -> dict[str, Any] | None:
    """The entry ``name`` (a key), or None when absent or unreadable."""
    try:
        entry = json.loads((_dir() / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and entry.get("version") == VERSION else None


def save(name: str, entry: dict[str, Any]) -> None:
    """Write the entry ``name`` atomically; a cache that cannot be written is skipped."""
    try:
        path = _dir() / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, json.dumps({**entry, "version": VERSION}, sort_keys=True))
    except OSError:
        pass


# ---------------------------------------------------------------- tiktoken encodings


def tiktoken_key(encoding_name: str) -> str | None:
    """The key of a tiktoken encoding's facts before its files are checked: its name,
    tiktoken's version, its plugin module's source and tiktoken's cache settings (None
    when the encoding's constructor cannot be found without loading it)."""
    try:
        import tiktoken
        import tiktoken.registry as registry

        registry._find_constructors()
        ctor = (registry.ENCODING_CONSTRUCTORS or {}).get(encoding_name)
        module_file = getattr(sys.modules.get(getattr(ctor, "__module__", "")), "__file__", None)
    except Exception:  # tiktoken's registry is not a public API: any change is a miss
        return None
    source = file_digest(module_file) if module_file else None
    if source is None:
        return None
    env = {k: os.environ.get(k) for k in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    version = getattr(tiktoken, "__version__", None)
    return key("tiktoken", encoding_name, version, module_file, source, env)


def tiktoken_lookup(encoding_name: str) -> tuple[str | None, dict[str, Any] | None]:
    """(key, facts) of a tiktoken encoding: facts None on a miss (the key None when the
    encoding cannot be cached at all). A hit re-hashes the ranks file it names."""
    name = tiktoken_key(encoding_name)
    if name is None:
        return None, None
    entry = load(name)
    if entry is None:
        return name, None
    ranks = entry.get("ranks_file") or {}
    if not ranks.get("path") or file_digest(ranks["path"]) != ranks.get("xxh3"):
        return name, None
    return name, entry


# ---------------------------------------------------------------- Hugging Face tokenizers


def _package_files(name: str) -> list[list[object]] | None:
    """A package's top-level files (name, size, modification time): which build of it is
    installed, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
        folder = Path(spec.origin).parent if spec and spec.origin else None
        if folder is None:
            return None
        return sorted(
            [e.name, e.stat().st_size, e.stat().st_mtime_ns]
            for e in os.scandir(folder)
            if e.is_file()
        )
    except (ImportError, ValueError, OSError):
        return None


def hf_key(file: Path, config: Path) -> str | None:
    """The key of a Hugging Face tokenizer's facts: the content of its tokenizer.json and
    tokenizer_config.json (absent: none) and the tokenizers library's build (None when a
    file cannot be read)."""
    build = _package_files("tokenizers")
    digest = file_digest(file)
    conf = file_digest(config) if config.exists() else "absent"
    if build is None or digest is None or conf is None:
        return None
    return key("hf", digest, conf, build)


# ---------------------------------------------------------------- probe verdicts


def engine_build() -> list[object] | None:
    """The fast engine's build: its extension module's path, size and modification time
    (None when it cannot be found)."""
    try:
        import gigatoken.gigatoken_rs as rs

        st = os.stat(rs.__file__)
    except (ImportError, AttributeError, OSError, TypeError):
        return None
    return [rs.__file__, st.st_size, st.st_mtime_ns]


def probe_key(fingerprint: str, backend: str, call: str, probe_digest: str) -> str | None:
    build = engine_build()
    return None if build is None else key("probe", fingerprint, backend, call, probe_digest, build)


def probe_verdict(name: str | None) -> bool | None:
    """The stored verdict of a probe (None: not stored)."""
    entry = load(name) if name else None
    verdict = entry.get("matches") if entry else None
    return verdict if isinstance(verdict, bool) else None


def save_probe(name: str | None, matches: bool) -> None:
    if name:
        save(name, {"matches": matches})

"""Annotators: per-document properties computed from a tokenized source's text, written
beside it as an *annotation* artifact (``shardcore.annotate.artifact``), never as a copy
of the text or the tokens.

An annotator is one class (the shape of datatrove's pipeline steps, reduced to what a
column writer needs):

- ``name`` and ``version`` (a new version names new bytes: both enter the fingerprint);
- ``defaults``: its parameters and their default values; a parameter's type is its
  default's type (``--param k=v`` text is converted to it, an unknown name is refused);
- ``fields()``: the output schema, a list of ``pyarrow.Field``;
- ``annotate(texts) -> {column: values}``: one value per text for every field, in order.

Built-in annotators are registered by name below and imported only when used. A team adds
its own through the entry-point group ``shardyard.annotators`` (in its package metadata:
``[project.entry-points."shardyard.annotators"] my_name = "my_pkg.module:MyAnnotator"``);
the entry point's name must equal the class's ``name``. A built-in name cannot be taken.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from shardcore import limits
from shardcore.errors import InputError

ENTRY_POINT_GROUP = "shardyard.annotators"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# name -> "module:Class", imported on first use
BUILTIN: dict[str, str] = {
    "quality": "shardcore.annotate.quality:QualitySignals",
    "pii": "shardcore.annotate.pii:PersonalData",
    "lang_id": "shardcore.annotate.lang:LanguageId",
    "minhash": "shardcore.annotate.dedup:NearDuplicates",
    "topics": "shardcore.annotate.topics:TopicClusters",
    "decon": "shardcore.annotate.decon:Decontamination",
}


class Annotator:
    """Base class of every annotator; subclasses set the class attributes and implement
    ``fields`` and ``annotate``."""

    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    defaults: ClassVar[dict[str, Any]] = {}
    # True for annotators whose values depend on other documents (near-duplicates): the
    # artifact writer then calls ``prepare`` per shard and ``finish`` once instead of
    # ``annotate`` per batch.
    corpus_level: ClassVar[bool] = False
    # True when ``finish`` also describes the whole corpus (topic clusters' top terms and
    # snippets): ``summary()`` is then written beside the columns as summary.json.
    has_summary: ClassVar[bool] = False
    # (corpus-level) The files ``prepare`` writes in a shard's scratch directory, each of
    # which ``finish`` reads: what finalize fetches on object storage.
    work_files: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **params: Any):
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise InputError(
                f"annotator {self.name!r}: unknown parameter {unknown[0]!r} "
                f"(parameters: {', '.join(sorted(self.defaults)) or 'none'})"
            )
        # Every number within its bound (shardcore.limits) before any other check or work.
        self.params: dict[str, Any] = limits.annotator_params(
            self.name, {**self.defaults, **params}, self.defaults
        )
        self.check_params()

    def check_params(self) -> None:
        """Refuse parameter values out of range (raise InputError naming the parameter)."""

    def fields(self) -> list[pa.Field]:
        raise NotImplementedError

    def schema(self) -> pa.Schema:
        return pa.schema(self.fields())

    def annotate(self, texts: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def prepare(self, batches: Iterable[list[str]], final: Path, *, first_doc_id: int) -> None:
        """(corpus-level) One shard's texts, a batch at a time: write what ``finish`` needs
        beside ``final``."""
        raise NotImplementedError

    def finish(self, work: list[Path]) -> list[dict[str, Any]]:
        """(corpus-level) After every shard's ``prepare``: every shard's columns."""
        raise NotImplementedError

    def summary(self) -> dict[str, Any] | None:
        """After ``finish``: what the annotation says about the whole corpus, or None."""
        return None

    def describe(self) -> dict[str, Any]:
        """What enters the annotation's fingerprint and manifest."""
        return {
            "name": self.name,
            "version": str(self.version),
            "params": dict(sorted(self.params.items())),
            "fields": [{"name": f.name, "type": str(f.type)} for f in self.fields()],
        }

    def __repr__(self) -> str:
        return f"<Annotator {self.name} v{self.version} {self.params}>"


def _load(target: str, where: str) -> type[Annotator]:
    module, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"{where}: cannot load {target!r}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Annotator)):
        raise InputError(f"{where}: {target!r} is not a shardcore.annotate.Annotator subclass")
    return cls


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def names() -> list[str]:
    """Every annotator name: the built-ins, then those registered through entry points."""
    return sorted(BUILTIN) + sorted(set(_entry_points()) - set(BUILTIN))


def get(name: str) -> type[Annotator]:
    """The annotator class registered under ``name``."""
    if name in BUILTIN:
        return _load(BUILTIN[name], f"annotator {name!r}")
    eps = _entry_points()
    if name not in eps:
        raise InputError(f"no annotator named {name!r} (available: {', '.join(names())})")
    ep = eps[name]
    where = f"entry point {name!r} of group {ENTRY_POINT_GROUP} ({ep.value})"
    cls = _load(ep.value, where)
    if cls.name != name:
        raise InputError(f"{where}: the class names itself {cls.name!r}, not {name!r}")
    if not _NAME.match(name):
        raise InputError(f"{where}: an annotator name is lowercase letters, digits and _")
    return cls


def parse_params(cls: type[Annotator], pairs: list[str]) -> dict[str, Any]:
    """``["k=v", ...]`` (the command line's ``--param``) as typed parameters: each value is
    converted to the type of the parameter's default."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"--param {pair!r}: expected NAME=VALUE")
        if key not in cls.defaults:
            raise InputError(
                f"--param {key}: annotator {cls.name!r} has no such parameter "
                f"(parameters: {', '.join(sorted(cls.defaults)) or 'none'})"
            )
        out[key] = _convert(cls.defaults[key], text, key)
    return out


def _convert(default: Any, text: str, key: str) -> Any:
    try:
        if isinstance(default, bool):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true or false")
        if isinstance(default, int | float):
            # Read as typed numbers are everywhere (1e6, 1_000, 1M); the annotator checks
            # that an integer parameter got a whole number, and its range.
            return limits.parse(key, text)
    except (ValueError, InputError):
        what = "expected true or false" if isinstance(default, bool) else "not a number"
        raise InputError(f"--param {key}={text}: {what}") from None
    return text


def create(name: str, params: dict[str, Any] | None = None) -> Annotator:
    """An annotator instance by name with its parameters."""
    return get(name)(**(params or {}))

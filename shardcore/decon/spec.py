"""The benchmark spec: which benchmarks a decontamination checks documents against, and
how to read their items.

A spec is a JSON file::

    {"benchmarks": [
        {"name": "mmlu",                      # letters, digits, _ . - (no colon)
         "files": ["mmlu/test.jsonl"],        # relative to the spec's directory
         "fields": ["question", "choices", "answer"],   # an item's text, in this order
         "id": "id"}                          # optional: the item id field
    ]}

Files are ``.jsonl`` (``.jsonl.gz``), ``.json`` (a list of objects, or an object holding
one such list), ``.parquet`` or ``.csv``. A field may be a string, a number, or a list of
them (``choices``), flattened in order; a field name with dots reads nested objects
(``answer.text``). An item's text is its fields joined by spaces. Without ``id`` an item's
id is its position in the benchmark's files (0, 1, ...). Ids are unique per benchmark;
the item ids a document lists are qualified, ``<benchmark>:<id>``.

Every error names the spec, the benchmark, the file, the line or row and the field.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

from shardcore import storage
from shardcore.errors import InputError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
FORMATS = (".jsonl", ".jsonl.gz", ".json", ".parquet", ".csv")


@dataclass(frozen=True)
class Benchmark:
    name: str
    files: tuple[str, ...]  # resolved: absolute local paths or URLs
    fields: tuple[str, ...]
    id: str | None


@dataclass(frozen=True)
class Item:
    benchmark: str
    id: str
    text: str


def _read(url: str) -> bytes:
    head, _, name = url.rstrip("/").rpartition("/")
    return storage.open_store(head or ".").read_bytes(name)


def load_spec(path: str | os.PathLike) -> list[Benchmark]:
    """The benchmarks of the spec at ``path`` (local or ``s3://``), checked."""
    url = storage.resolve(path)
    try:
        raw = _read(url)
    except FileNotFoundError:
        raise InputError(f"benchmark spec {url}: no such file") from None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"benchmark spec {url}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise InputError(f'benchmark spec {url}: expected {{"benchmarks": [...]}}')
    if not doc["benchmarks"]:
        raise InputError(f"benchmark spec {url}: names no benchmark")
    unknown = sorted(set(doc) - {"benchmarks"})
    if unknown:
        raise InputError(f"benchmark spec {url}: unknown key {unknown[0]!r}")
    base = url.rstrip("/").rpartition("/")[0]
    out: list[Benchmark] = []
    for i, b in enumerate(doc["benchmarks"]):
        where = f"benchmark spec {url}: benchmarks[{i}]"
        if not isinstance(b, dict):
            raise InputError(f"{where}: expected an object")
        extra = sorted(set(b) - {"name", "files", "fields", "id"})
        if extra:
            raise InputError(f"{where}: unknown key {extra[0]!r}")
        name = b.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise InputError(
                f"{where}: name {name!r}: letters, digits, _ . - (at most 100, no colon)"
            )
        where = f"benchmark spec {url}: benchmark {name!r}"
        if any(o.name == name for o in out):
            raise InputError(f"{where}: named twice")
        files = b.get("files")
        if isinstance(files, str):
            files = [files]
        if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
            raise InputError(f"{where}: files: a non-empty list of paths")
        for f in files:
            if not f.endswith(FORMATS):
                raise InputError(f"{where}: file {f!r}: expected one of {', '.join(FORMATS)}")
        fields = b.get("fields")
        if isinstance(fields, str):
            fields = [fields]
        if (
            not isinstance(fields, list)
            or not fields
            or not all(isinstance(f, str) and f for f in fields)
        ):
            raise InputError(f"{where}: fields: a non-empty list of field names")
        ident = b.get("id")
        if ident is not None and (not isinstance(ident, str) or not ident):
            raise InputError(f"{where}: id: a field name")
        resolved = tuple(
            f if storage.is_remote(f) or os.path.isabs(f) else storage.join(base, f) for f in files
        )
        out.append(Benchmark(name, resolved, tuple(fields), ident))
    return out


def _rows(url: str, where: str) -> Iterator[tuple[str, Any]]:
    """(line or row label, record) of one benchmark file."""
    try:
        data = _read(url)
    except FileNotFoundError:
        raise InputError(f"{where}: no such file {url}") from None
    if url.endswith(".gz"):
        data = gzip.decompress(data)
    if url.endswith((".jsonl", ".jsonl.gz")):
        for n, line in enumerate(data.decode("utf-8", errors="strict").splitlines(), 1):
            if not line.strip():
                continue
            try:
                yield f"{url} line {n}", json.loads(line)
            except ValueError as exc:
                raise InputError(f"{where}: {url} line {n}: not JSON ({exc})") from None
    elif url.endswith(".json"):
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise InputError(f"{where}: {url}: not JSON ({exc})") from None
        if isinstance(doc, dict):
            lists = [v for v in doc.values() if isinstance(v, list)]
            if len(lists) != 1:
                raise InputError(
                    f"{where}: {url}: expected a list of items, or one object holding one"
                )
            doc = lists[0]
        if not isinstance(doc, list):
            raise InputError(f"{where}: {url}: expected a list of items")
        for n, rec in enumerate(doc):
            yield f"{url} item {n}", rec
    elif url.endswith(".parquet"):
        table = pq.read_table(io.BytesIO(data))
        for n, rec in enumerate(table.to_pylist()):
            yield f"{url} row {n}", rec
    else:
        reader = csv.DictReader(io.StringIO(data.decode("utf-8")))
        for n, rec in enumerate(reader, 2):
            yield f"{url} line {n}", rec


def _value(rec: dict, field: str) -> Any:
    cur: Any = rec
    for part in field.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise KeyError(field)
        cur = cur[part]
    return cur


def _flatten(value: Any, out: list[str]) -> bool:
    if value is None:
        return True
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        out.append(str(value))
        return True
    if isinstance(value, bool):
        out.append("true" if value else "false")
        return True
    if isinstance(value, list | tuple):
        return all(_flatten(v, out) for v in value)
    return False


def read_items(benchmark: Benchmark) -> Iterator[Item]:
    """The items of one benchmark, in file order; an error names file, line and field."""
    where = f"benchmark {benchmark.name!r}"
    seen: set[str] = set()
    position = 0
    for url in benchmark.files:
        for label, rec in _rows(url, where):
            if not isinstance(rec, dict):
                raise InputError(f"{where}: {label}: expected an object")
            parts: list[str] = []
            for field in benchmark.fields:
                try:
                    value = _value(rec, field)
                except KeyError:
                    raise InputError(f"{where}: {label}: no field {field!r}") from None
                if not _flatten(value, parts):
                    raise InputError(
                        f"{where}: {label}: field {field!r} is not text, a number or a list"
                    )
            if benchmark.id is None:
                ident = str(position)
            else:
                try:
                    raw = _value(rec, benchmark.id)
                except KeyError:
                    raise InputError(f"{where}: {label}: no id field {benchmark.id!r}") from None
                if raw is None or isinstance(raw, dict | list):
                    raise InputError(f"{where}: {label}: id field {benchmark.id!r} is {raw!r}")
                ident = str(raw)
            if ident in seen:
                raise InputError(f"{where}: {label}: id {ident!r} given twice")
            seen.add(ident)
            position += 1
            yield Item(benchmark.name, ident, " ".join(parts))

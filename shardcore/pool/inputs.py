"""The pool plan's input table: per input shard, its source, its shard number, its path
(relative to its source), its selected documents and tokens per split, and the annotation
files it joins, one column each in one binary file next to the plan's other files
(``_pass1/inputs.table``, written by ``units.save_plan``, removed with the scratch by
finalize). The plan's meta keeps only the table's layout (``meta["inputs_table"]``), so a
plan's header, which every unit loads, is the same size whatever the number of inputs; a
unit reads the rows it needs (pass 1 its input, pass 2 with "references" staging the inputs
of its bucket) with positioned reads, and the per-split document counts the shuffle's
``assign`` takes are memory-mapped (a page is resident only once read; the exact shuffle
reads one value).

Layout: ``MAGIC``, the xxh3-64 of the rest (8 bytes, little-endian), then the columns, each
at an offset the plan's layout gives, 8-byte aligned: ``source`` and ``shard`` (int32),
``docs_train``, ``docs_val``, ``tokens_train``, ``tokens_val`` (int64), and two string
columns (int64 offsets of rows + 1 values, then the UTF-8 bytes): ``prefix`` (the shard's
prefix in its source, as its manifest names it) and ``annotations`` (a JSON list per input,
empty for none: ``{"name", "dir", "path", "size", "xxh3", "documents"}``, ``path`` relative
to the annotation directory ``meta["annotation_dirs"][dir]``). Paths are relative so that
the plan's header alone names the artifacts, and ``units.with_local_inputs`` rewrites them
to local copies there.

Plans made before the table (their meta lists every input in ``meta["inputs"]`` and each
split's per-input counts in ``meta["splits"][split]["counts"]``) are read as they are: a job
interrupted across an upgrade resumes."""

from __future__ import annotations

import json
import os
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from shardcore import storage, units
from shardcore.errors import ManifestError
from shardcore.pool.layout import PASS1_DIR, SPLITS

TABLE_REL = f"{PASS1_DIR}/inputs.table"
MAGIC = b"SYPOOLIN"
FORMAT = 1
_HEAD = len(MAGIC) + 8
_NUMBERS = {
    "source": "<i4",
    "shard": "<i4",
    "docs_train": "<i8",
    "docs_val": "<i8",
    "tokens_train": "<i8",
    "tokens_val": "<i8",
}
_STRINGS = ("prefix", "annotations")


def encode(inputs: list[dict[str, Any]], annotation_dirs: list[str]) -> tuple[bytes, dict]:
    """The table of ``inputs`` (per input: ``source``, ``shard``, ``rel`` (its prefix in its
    source), ``docs`` and ``tokens`` per split, ``annotations``: the files it joins, each
    under one of ``annotation_dirs``) and its layout, for ``meta["inputs_table"]``."""
    parts: list[bytes] = []
    columns: dict[str, list[int]] = {}
    at = _HEAD

    def add(name: str, data: bytes) -> None:
        nonlocal at
        pad = -len(data) % 8
        columns[name] = [at, len(data)]
        parts.append(data + b"\0" * pad)
        at += len(data) + pad

    for name, dtype in _NUMBERS.items():
        field, _, split = name.partition("_")
        if split:
            k = SPLITS.index(split)
            values = [int(i[field][k]) for i in inputs]
        else:
            values = [int(i[name]) for i in inputs]
        add(name, np.asarray(values, dtype=dtype).tobytes())
    strings = {
        "prefix": [i["rel"] for i in inputs],
        "annotations": [
            _annotations_text(i.get("annotations") or [], annotation_dirs) for i in inputs
        ],
    }
    for name in _STRINGS:
        data = [s.encode() for s in strings[name]]
        offsets = np.zeros(len(data) + 1, dtype="<i8")
        np.cumsum([len(d) for d in data], out=offsets[1:])
        add(f"{name}_at", offsets.tobytes())
        add(name, b"".join(data))
    body = b"".join(parts)
    digest = xxhash.xxh3_64_intdigest(body)
    layout = {
        "path": TABLE_REL,
        "format": FORMAT,
        "rows": len(inputs),
        "size": _HEAD + len(body),
        "xxh3": f"{digest:016x}",
        "columns": columns,
    }
    return MAGIC + digest.to_bytes(8, "little") + body, layout


def _annotations_text(files: list[dict[str, Any]], dirs: list[str]) -> str:
    if not files:
        return ""
    out = []
    for f in files:
        for k, d in enumerate(dirs):
            base = d.rstrip("/") + "/"
            if f["path"].startswith(base):
                out.append({**f, "dir": k, "path": f["path"][len(base) :]})
                break
        else:
            raise ValueError(f"{f['path']}: not in an annotation directory of the pool")
    return json.dumps(out, sort_keys=True)


def _close(fd: list[int]) -> None:
    for f in fd:
        os.close(f)
    fd.clear()


class InputTable:
    """The plan's inputs (``len``, ``spec(i)``, ``prefix(i)``, ``counts(split)``), read from
    its table (the plan's in-memory file if it was not saved yet, else the output's) or,
    for a plan made before the table, from its meta."""

    def __init__(self, plan: units.Plan):
        self.meta = plan.meta
        self._legacy: list[dict[str, Any]] | None = plan.meta.get("inputs")
        self._data: bytes | None = None
        self._fd: list[int] = []
        self._path: Path | None = None
        if self._legacy is not None:
            self.rows = len(self._legacy)
            return
        if "inputs_table" not in plan.meta:
            raise ManifestError(
                f"{plan.out}: the pool's plan has neither inputs nor an input table"
            )
        self.layout = plan.meta["inputs_table"]
        self.rows = int(self.layout["rows"])
        if int(self.layout.get("format", 0)) != FORMAT:
            raise ManifestError(
                f"{plan.out}: input table format {self.layout.get('format')!r}; this version "
                f"reads format {FORMAT}: plan the pool again"
            )
        rel = self.layout["path"]
        if rel in plan.files:
            self._data = plan.files[rel]
            head = self._data[:_HEAD]
            size = len(self._data)
        else:
            self._path = Path(plan.out) / rel
            try:
                fd = os.open(self._path, os.O_RDONLY)
            except FileNotFoundError:
                raise ManifestError(
                    f"{self._path}: the plan's input table is missing (written with the plan, "
                    "removed by finalize): plan the pool again"
                ) from None
            self._fd.append(fd)
            weakref.finalize(self, _close, self._fd)
            head = os.pread(fd, _HEAD, 0)
            size = os.fstat(fd).st_size
        if (
            head[: len(MAGIC)] != MAGIC
            or f"{int.from_bytes(head[len(MAGIC) :], 'little'):016x}" != self.layout["xxh3"]
            or size != int(self.layout["size"])
        ):
            raise ManifestError(
                f"{self._path or rel}: not the input table of this plan (another plan's, or "
                "damaged): plan the pool again"
            )

    def __len__(self) -> int:
        return self.rows

    def _read(self, offset: int, nbytes: int) -> bytes:
        if self._data is not None:
            return self._data[offset : offset + nbytes]
        data = os.pread(self._fd[0], nbytes, offset)
        if len(data) != nbytes:
            raise ManifestError(f"{self._path}: ends before offset {offset + nbytes}")
        return data

    def _cell(self, name: str, i: int) -> int:
        if not 0 <= i < self.rows:
            raise IndexError(f"input {i} of {self.rows}")
        dtype = np.dtype(_NUMBERS.get(name, "<i8"))
        at = self.layout["columns"][name][0] + i * dtype.itemsize
        return int(np.frombuffer(self._read(at, dtype.itemsize), dtype=dtype)[0])

    def _string(self, name: str, i: int) -> str:
        at = self.layout["columns"][f"{name}_at"][0] + i * 8
        lo, hi = np.frombuffer(self._read(at, 16), dtype="<i8").tolist()
        if not 0 <= lo <= hi:
            raise ManifestError(f"{self._path}: bad offsets of {name} at row {i}")
        return self._read(self.layout["columns"][name][0] + lo, hi - lo).decode()

    def prefix(self, i: int) -> str:
        """Input ``i``'s shard prefix (its ``.bin``, ``.idx`` and ``.docs.parquet``)."""
        if self._legacy is not None:
            return self._legacy[i]["prefix"]
        source = self.meta["sources"][self._cell("source", i)]
        return storage.join(source["path"], self._string("prefix", i))

    def spec(self, i: int) -> dict[str, Any]:
        """Input ``i`` as plans listed it: ``source``, ``shard``, ``prefix``, ``sidecar``,
        ``docs`` and ``tokens`` per split, and ``annotations`` if it joins any."""
        if self._legacy is not None:
            return self._legacy[i]
        prefix = self.prefix(i)
        spec: dict[str, Any] = {
            "source": self._cell("source", i),
            "shard": self._cell("shard", i),
            "prefix": prefix,
            "sidecar": f"{prefix}.docs.parquet",
            "docs": [self._cell(f"docs_{s}", i) for s in SPLITS],
            "tokens": [self._cell(f"tokens_{s}", i) for s in SPLITS],
        }
        text = self._string("annotations", i)
        if text:
            dirs = self.meta["annotation_dirs"]
            spec["annotations"] = [
                {
                    **{k: v for k, v in f.items() if k != "dir"},
                    "path": storage.join(dirs[f["dir"]], f["path"]),
                }
                for f in json.loads(text)
            ]
        return spec

    def column(self, name: str) -> np.ndarray:
        """A numeric column whole (``docs_train``, ``tokens_val``...), memory-mapped from a
        saved table: pages are read (and resident) as they are used."""
        if self._legacy is not None:
            field, _, split = name.partition("_")
            if field == "docs" and "counts" in self.meta["splits"][split]:
                return np.asarray(self.meta["splits"][split]["counts"], dtype=np.int64)
            if split:
                k = SPLITS.index(split)
                return np.asarray([i[field][k] for i in self._legacy], dtype=np.int64)
            return np.asarray([i[name] for i in self._legacy], dtype=np.int64)
        dtype = np.dtype(_NUMBERS[name])
        offset = self.layout["columns"][name][0]
        if not self.rows:
            return np.zeros(0, dtype=dtype)
        if self._data is not None:
            return np.frombuffer(self._data, dtype=dtype, count=self.rows, offset=offset)
        assert self._path is not None
        return np.memmap(self._path, dtype=dtype, mode="r", offset=offset, shape=(self.rows,))

    def counts(self, split: str) -> np.ndarray:
        """The documents of ``split`` each input holds, in input order (what the shuffle's
        ``num_buckets`` and ``assign`` take)."""
        return self.column(f"docs_{split}")

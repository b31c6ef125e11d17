"""A demo corpus of real text that every machine with Python already has: the CPython
standard library of the running interpreter, split into sources with properties a
mixture can select on.

=============  ===================  ==============================================
source         format               documents
=============  ===================  ==============================================
stdlib-code    .jsonl.zst           one per module file (outside ``test/``)
stdlib-tests   .jsonl.gz            one per file under ``test/`` packages
docstrings     .jsonl               one per module, class or function docstring
reference      .parquet             one per topic of the language reference
                                    (``pydoc_data.topics``, the text of ``help()``)
=============  ===================  ==============================================

Every document has ``text`` and the properties ``kind`` (code, tests, prose, docs),
``lang`` (python or en), ``package`` (top-level module), ``license`` ("PSF-2.0") and
``path`` (relative to the standard library). Files are written in sorted path order, so
the same interpreter gives the same bytes.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from pydoc_data.topics import topics

import zstandard

LICENSE = "PSF-2.0"
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "idle_test", "lib2to3"}


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _python_files(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        out.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    return sorted(out)


def _is_test(rel: Path) -> bool:
    return "test" in rel.parts[:-1] or "tests" in rel.parts[:-1]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # a few test files are deliberately not UTF-8


def _doc(text: str, kind: str, lang: str, rel: Path, **extra: str) -> dict:
    return {
        "text": text,
        "kind": kind,
        "lang": lang,
        "package": rel.parts[0].removesuffix(".py"),
        "license": LICENSE,
        "path": rel.as_posix(),
        **extra,
    }


def iter_code(*, tests: bool) -> Iterator[dict]:
    root = stdlib_dir()
    for path in _python_files(root):
        rel = path.relative_to(root)
        if _is_test(rel) != tests:
            continue
        text = _read(path)
        if text and text.strip():
            yield _doc(text, "tests" if tests else "code", "python", rel)


def iter_docstrings() -> Iterator[dict]:
    root = stdlib_dir()
    for path in _python_files(root):
        rel = path.relative_to(root)
        if _is_test(rel):
            continue
        text = _read(path)
        if not text:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= 40:
                    obj = (
                        "module"
                        if isinstance(node, ast.Module)
                        else type(node).__name__.removesuffix("Def").lower()
                    )
                    yield _doc(doc, "prose", "en", rel, object_type=obj)


def iter_reference() -> Iterator[dict]:

    for name in sorted(topics):
        yield {
            "text": topics[name],
            "kind": "docs",
            "lang": "en",
            "package": "reference",
            "license": LICENSE,
            "path": f"reference/{name}",
            "topic": name,
        }


def _take(docs: Iterator[dict], max_bytes: int | None) -> Iterator[dict]:
    total = 0
    for doc in docs:
        if max_bytes is not None and total >= max_bytes:
            return
        total += len(doc["text"].encode())
        yield doc


def _jsonl_bytes(docs: Iterator[dict]) -> bytes:
    return b"".join(json.dumps(d, ensure_ascii=False).encode() + b"\n" for d in docs)


def build_demo_corpus(
    out: str | os.PathLike, *, max_bytes_per_source: int | None = None
) -> dict[str, Path]:
    """Write the four demo sources under ``out/<source>/`` and return source -> file path.
    ``max_bytes_per_source`` caps each source's text (tests use a few hundred KB)."""
    out = Path(out)
    paths: dict[str, Path] = {}

    def dest(name: str, filename: str) -> Path:
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        paths[name] = d / filename
        return paths[name]

    data = _jsonl_bytes(_take(iter_code(tests=False), max_bytes_per_source))
    # Level 3 and one thread: the same bytes on every machine with the same zstandard.
    dest("stdlib-code", "code.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor(level=3).compress(data)
    )

    data = _jsonl_bytes(_take(iter_code(tests=True), max_bytes_per_source))
    dest("stdlib-tests", "tests.jsonl.gz").write_bytes(
        gzip.compress(data, compresslevel=6, mtime=0)
    )

    dest("docstrings", "docstrings.jsonl").write_bytes(
        _jsonl_bytes(_take(iter_docstrings(), max_bytes_per_source))
    )

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(_take(iter_reference(), max_bytes_per_source))
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, dest("reference", "reference.parquet"), row_group_size=32)
    return paths

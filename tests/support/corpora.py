"""Small corpora in the schemas, file names and compressions that public pretraining
corpora ship (FineWeb/FineWeb-Edu, Dolma, RedPajama/SlimPajama, the Pile, C4, The Stack),
built offline from real text: the docstrings and sources of the running interpreter's
standard library. Each corpus knows its text field, a filter in the user's own property
names (nested where the schema nests) and which documents that filter must select,
computed here from the records themselves."""

from __future__ import annotations

import ast
import gzip
import json
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _modules() -> list[Path]:
    return sorted(p for p in STDLIB.glob("*.py") if 3000 < p.stat().st_size < 200_000)


def docstrings(n: int, offset: int = 0) -> list[tuple[str, str]]:
    """(module, docstring) pairs: real English prose, one per module and function (each
    text once: some docstrings repeat across classes)."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for p in _modules():
        try:
            tree = ast.parse(p.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in [tree, *ast.walk(tree)]:
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 200 and doc not in seen:
                    seen.add(doc)
                    out.append((p.stem, doc))
        if len(out) >= n + offset:
            break
    return out[offset : offset + n]


def sources(n: int, offset: int = 0, max_chars: int = 4000) -> list[tuple[str, str]]:
    """(relative path, source text) of stdlib modules: real code."""
    return [
        (p.name, p.read_text(encoding="utf-8", errors="replace")[:max_chars])
        for p in _modules()[offset : offset + n]
    ]


# ----------------------------------------------------------------------- writers


def _jsonl(records: list[dict]) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)


def write_json_gz(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(_jsonl(records), mtime=0))


def write_jsonl_zst(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(_jsonl(records)))


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_jsonl(records))


def write_parquet(path: Path, records: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=16)


# ----------------------------------------------------------------------- corpora


@dataclass
class Corpus:
    name: str
    text_field: str
    filter: str
    files: dict[str, list[dict]]  # relative path -> records
    writers: dict[str, Callable[[Path, list[dict]], None]]
    selects: Callable[[dict], bool]  # the filter, over a record, in Python
    nested: bool = True
    properties: list[str] = field(default_factory=list)

    def write(self, root: Path) -> Path:
        base = root / self.name
        for rel, records in self.files.items():
            self.writers[rel](base / rel, records)
        return base

    def records(self) -> list[dict]:
        """Every record in source order (files sorted by path, as a directory is read)."""
        return [r for rel in sorted(self.files) for r in self.files[rel]]

    def selected_texts(self) -> list[str]:
        return sorted(r[self.text_field] for r in self.records() if self.selects(r))


def fineweb() -> Corpus:
    docs = docstrings(60)
    records = []
    for i, (mod, text) in enumerate(docs):
        records.append(
            {
                "text": text,
                "id": f"<urn:uuid:{i:08x}-0000-4000-8000-{i:012x}>",
                "dump": "CC-MAIN-2024-10",
                "url": f"https://docs.python.org/3/library/{mod}.html#{i}",
                "date": f"2024-02-{1 + i % 28:02d}T12:00:00Z",
                "file_path": f"s3://commoncrawl/crawl-data/CC-MAIN-2024-10/{i:05d}.warc.gz",
                "language": "en",
                "language_score": round(0.80 + (i % 20) / 100, 4),
                "token_count": len(text.split()),
                "score": round(1.0 + (i * 7 % 30) / 10, 4),
                "int_score": int(round(1.0 + (i * 7 % 30) / 10)),
            }
        )
    files = {"data/CC-MAIN-2024-10/000_00000.parquet": records[:40],
             "data/CC-MAIN-2024-10/000_00001.parquet": records[40:]}  # fmt: skip
    return Corpus(
        "fineweb", "text", "int_score >= 3 AND language_score > 0.85", files,
        dict.fromkeys(files, write_parquet),
        lambda r: r["int_score"] >= 3 and r["language_score"] > 0.85,
        nested=False,
    )  # fmt: skip


def dolma() -> Corpus:
    docs = docstrings(60, offset=60)
    records = []
    for i, (mod, text) in enumerate(docs):
        meta: dict[str, Any] = {"path": f"Lib/{mod}.py", "length": len(text)}
        # metadata.score: a float in the first file, an int in the second (unified to
        # float64), absent in the third; metadata.version: int, then string (unified to
        # string).
        if i < 20:
            meta["score"] = round((i % 10) / 10, 2)
            meta["version"] = 3
        elif i < 40:
            meta["score"] = i % 2
            meta["version"] = "3.11"
        records.append(
            {
                "id": f"stdlib-{i:05d}",
                "text": text,
                "source": "stdlib-docstrings",
                "added": "2024-05-01T00:00:00.000Z",
                "created": f"2023-{1 + i % 12:02d}-01T00:00:00.000Z",
                "metadata": meta,
            }
        )
    files = {
        "documents/stdlib-0000.json.gz": records[:20],
        "documents/stdlib-0001.json.gz": records[20:40],
        "documents/stdlib-0002.json.gz": records[40:],
    }

    def sel(r):
        s = r["metadata"].get("score")
        return s is not None and s > 0.5

    return Corpus("dolma", "text", "metadata.score > 0.5", files,
                  dict.fromkeys(files, write_json_gz), sel)  # fmt: skip


def redpajama() -> Corpus:
    docs = docstrings(50, offset=120)
    sets = ["RedPajamaArXiv", "RedPajamaWikipedia", "RedPajamaBook"]
    records = [
        {"text": text, "meta": {"redpajama_set_name": sets[i % 3], "source": mod,
                                "timestamp": f"2023-03-{1 + i % 28:02d}"}}
        for i, (mod, text) in enumerate(docs)
    ]  # fmt: skip
    files = {"train/chunk1/example_train_0.jsonl.zst": records[:25],
             "train/chunk1/example_train_1.jsonl.zst": records[25:]}  # fmt: skip
    return Corpus(
        "slimpajama", "text", "meta.redpajama_set_name <> 'RedPajamaBook'", files,
        dict.fromkeys(files, write_jsonl_zst),
        lambda r: r["meta"]["redpajama_set_name"] != "RedPajamaBook",
    )  # fmt: skip


def pile() -> Corpus:
    prose = docstrings(30, offset=170)
    code = sources(30, offset=10)
    records = []
    for i in range(30):
        records.append({"text": prose[i][1], "meta": {"pile_set_name": "Pile-CC"}})
        records.append({"text": code[i][1], "meta": {"pile_set_name": "Github"}})
    files = {"train/00.jsonl.zst": records[:30], "train/01.jsonl.zst": records[30:]}
    return Corpus(
        "pile", "text", "meta.pile_set_name = 'Github'", files,
        dict.fromkeys(files, write_jsonl_zst),
        lambda r: r["meta"]["pile_set_name"] == "Github",
    )  # fmt: skip


def c4() -> Corpus:
    docs = docstrings(50, offset=200)
    records = [
        {"text": text, "timestamp": f"2019-04-{1 + i % 28:02d}T10:{i % 60:02d}:00Z",
         "url": f"https://docs.python.org/3/library/{mod}.html"}
        for i, (mod, text) in enumerate(docs)
    ]  # fmt: skip
    files = {"en/c4-train.00000-of-01024.json.gz": records[:25],
             "en/c4-train.00001-of-01024.json.gz": records[25:]}  # fmt: skip
    return Corpus(
        "c4", "text", "timestamp >= '2019-04-15'", files,
        dict.fromkeys(files, write_json_gz),
        lambda r: r["timestamp"] >= "2019-04-15",
        nested=False,
    )  # fmt: skip


def the_stack() -> Corpus:
    code = sources(48, offset=40)
    records = [
        {
            "content": text,
            "lang": "Python" if i % 4 else "Text",
            "max_stars_repo_path": f"Lib/{path}",
            "max_stars_repo_name": "python/cpython",
            "max_stars_count": (i * 37) % 100,
            "max_stars_repo_licenses": ["PSF-2.0"],
            "avg_line_length": round(len(text) / max(text.count("\n"), 1), 3),
            "alphanum_fraction": round(sum(c.isalnum() for c in text) / len(text), 4),
        }
        for i, (path, text) in enumerate(code)
    ]
    files = {"data/python/train-00000-of-00002.parquet": records[:24],
             "data/python/train-00001-of-00002.parquet": records[24:]}  # fmt: skip
    return Corpus(
        "the-stack", "content", "lang = 'Python' AND max_stars_count > 20", files,
        dict.fromkeys(files, write_parquet),
        lambda r: r["lang"] == "Python" and r["max_stars_count"] > 20,
    )  # fmt: skip


CORPORA: dict[str, Callable[[], Corpus]] = {
    "fineweb": fineweb,
    "dolma": dolma,
    "slimpajama": redpajama,
    "pile": pile,
    "c4": c4,
    "the-stack": the_stack,
}

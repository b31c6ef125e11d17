"""Real text for the tokenize tests: CPython's own standard library sources, read from the
running interpreter's installation (always present, no network), turned into source files
of every supported format by the tests themselves."""

from __future__ import annotations

import gzip
import json
import sysconfig
from pathlib import Path

import zstandard

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def stdlib_records(n: int, *, start: int = 0, max_chars: int = 6000) -> list[dict]:
    """``n`` records {"text", "module", "lines", "meta"} from stdlib modules, in a fixed order;
    text is cut at ``max_chars`` characters to keep the tests small."""
    paths = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 200)
    out = []
    for p in paths[start:]:
        text = p.read_text(encoding="utf-8", errors="strict")[:max_chars]
        out.append(
            {
                "text": text,
                "module": p.stem,
                "lines": text.count("\n"),
                "meta": {"private": p.stem.startswith("_"), "chars": len(text)},
            }
        )
        if len(out) == n:
            break
    return out


def jsonl_bytes(records: list[dict]) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)


def write_jsonl(path: Path, records: list[dict], compression: str | None = None) -> Path:
    data = jsonl_bytes(records)
    if compression == "gzip":
        data = gzip.compress(data, mtime=0)
    elif compression == "zstd":
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def write_parquet(path: Path, records: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=7)
    return path

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


def multilingual_texts(max_docs_per_kind: int = 40) -> list[str]:
    """Real non-English text available offline: CPython's CJK codec test texts (Chinese,
    Japanese, Korean, as UTF-8), the translated messages of the Debian packages installed
    here (gettext catalogs: German, Russian, Greek, Arabic, Hindi... one document per
    catalog) and the translated manual pages under /usr/share/man/<lang>."""
    import gettext

    texts = [
        p.read_text(encoding="utf-8")
        for p in sorted((STDLIB / "test" / "cjkencodings").glob("*-utf8.txt"))
    ]
    mos = sorted(Path("/usr/share/locale").glob("*/LC_MESSAGES/*.mo"))
    step = max(len(mos) // max_docs_per_kind, 1)
    for mo in mos[::step][:max_docs_per_kind]:
        try:
            with mo.open("rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog
        except (OSError, UnicodeDecodeError, ValueError, IndexError, SyntaxError):  # malformed
            continue
        # The entry of the empty message id is the catalog's header, not a translation.
        text = "\n\n".join(v for k, v in catalog.items() if k and isinstance(v, str) and v)
        if text:
            texts.append(text)
    pages = sorted(
        p for p in Path("/usr/share/man").glob("*/man*/*.gz") if p.parts[4][:1].islower()
    )
    step = max(len(pages) // max_docs_per_kind, 1)
    for p in pages[::step][:max_docs_per_kind]:
        try:
            texts.append(gzip.decompress(p.read_bytes()).decode("utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
    return [t for t in texts if t.strip()]


def special_token_texts() -> list[str]:
    """Real documents that spell special tokens: tiktoken's own source (``<|endoftext|>``,
    ``<|fim_prefix|>``), transformers' T5 tokenizer (``</s>``, ``<pad>``) and Code Llama
    tokenizer (``<EOT>``, ``<PRE>``) sources."""
    import tiktoken
    import transformers

    base = Path(transformers.__file__).parent / "models"
    paths = [
        Path(tiktoken.core.__file__),
        base / "t5" / "tokenization_t5.py",
        base / "code_llama" / "tokenization_code_llama.py",
    ]
    return [p.read_text(encoding="utf-8") for p in paths]

"""The demo corpus is real standard-library text, with properties, and reproducible."""

import gzip
import json

import pyarrow.parquet as pq
import zstandard

from shardcore.demo import build_demo_corpus


def _jsonl(path):
    raw = path.read_bytes()
    if path.suffix == ".zst":
        raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    elif path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return [json.loads(line) for line in raw.splitlines()]


def test_it_writes_four_sources_of_real_text_with_properties(tmp_path):
    paths = build_demo_corpus(tmp_path, max_bytes_per_source=200_000)
    assert set(paths) == {"stdlib-code", "stdlib-tests", "docstrings", "reference"}

    code = _jsonl(paths["stdlib-code"])
    assert any(d["path"] == "__future__.py" and "absolute_import" in d["text"] for d in code)
    assert {d["kind"] for d in code} == {"code"} and {d["license"] for d in code} == {"PSF-2.0"}

    tests = _jsonl(paths["stdlib-tests"])
    assert tests and all("/test" in "/" + d["path"] or "tests/" in d["path"] for d in tests)

    prose = _jsonl(paths["docstrings"])
    assert {d["lang"] for d in prose} == {"en"} and {d["object_type"] for d in prose} >= {
        "module",
        "function",
    }

    ref = pq.read_table(paths["reference"]).to_pylist()
    assert any(r["topic"] == "for" and "for_stmt" in r["text"] for r in ref)


def test_it_gives_the_same_bytes_twice(tmp_path):
    a = build_demo_corpus(tmp_path / "a", max_bytes_per_source=50_000)
    b = build_demo_corpus(tmp_path / "b", max_bytes_per_source=50_000)
    for name in a:
        assert a[name].read_bytes() == b[name].read_bytes(), name

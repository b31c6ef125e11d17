"""The schemas real corpora ship, end to end on the command line: tokenize (their own file
names, compressions and text fields) -> pool with a filter in the corpus's own property
names (nested fields by dotted path) -> mix -> export -> verify. What the pool must hold is
computed from the records themselves, not from Shardyard."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from shardcore.cli import main
from shardcore.encoders import load_tokenizer
from shardcore.pool import Pool
from shardcore.tokenized import TokenizedSource
from tests.support import corpora

SEQ = 64


def _pool_texts(pool_dir, tokenized_dir) -> list[str]:
    """The texts of the documents a pool holds (train and validation), decoded from the
    tokenized source by the pool's own document list."""
    ts = TokenizedSource(tokenized_dir)
    tok = load_tokenizer(ts.tokenizer["spec"])
    docs = Pool(pool_dir).documents.to_pylist()
    return sorted(tok.decode(ts.tokens(d["doc_id"])[:-1].tolist()) for d in docs)


@pytest.mark.parametrize("name", sorted(corpora.CORPORA))
def test_it_takes_a_real_corpus_schema_from_tokenize_to_verify(name, tmp_path, capsys):
    corpus = corpora.CORPORA[name]()
    src = corpus.write(tmp_path / "src")
    tok, pool, mix = tmp_path / "tok", tmp_path / "pool", tmp_path / "mix"

    args = ["tokenize", str(src), "--out", str(tok), "--quiet"]
    if corpus.text_field != "text":
        args += ["--text-field", corpus.text_field]
    assert main(args) == 0
    ts = TokenizedSource(tok)
    assert ts.num_documents == len(corpus.records())
    assert ts.manifest["bad_input"] == {}

    assert main(["pool", str(tok), "--out", str(pool), "--seq-len", str(SEQ),
                 "--filter", corpus.filter, "--quiet"]) == 0  # fmt: skip
    # Exactly the documents the corpus's own filter selects, nothing else.
    assert _pool_texts(pool, tok) == corpus.selected_texts()
    # Every property of the source round-trips into the pool's documents.
    want = {r[corpus.text_field]: {k: v for k, v in r.items() if k != corpus.text_field}
            for r in corpus.records()}  # fmt: skip
    ts_docs = ts.documents()
    tok_fn = load_tokenizer(ts.tokenizer["spec"])
    for d in Pool(pool).documents.to_pylist()[:10]:
        text = tok_fn.decode(ts.tokens(d["doc_id"])[:-1].tolist())
        stored = {k: v for k, v in d["props"].items() if v is not None}
        assert stored == _unified(want[text], ts_docs.schema.field("props").type)

    assert main(["mix", "--component", f"{pool}:1.0", "--tokens", str(SEQ * 20),
                 "--out", str(mix)]) == 0  # fmt: skip
    assert main(["export", str(mix), "--format", "json", "--out", str(tmp_path / "m.json")]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["num_samples"] == 20
    assert main(["export", str(mix), "--format", "megatron", "--out", str(tmp_path / "m.txt")]) == 0
    for artifact in (tok, pool, mix):
        assert main(["verify", str(artifact)]) == 0
    capsys.readouterr()


def _unified(record: dict, t: pa.DataType) -> dict:
    """A record's properties as the unified type stores them (None fields dropped)."""
    from shardcore import props

    value = props._fit(record, t)
    return {k: v for k, v in value.items() if v is not None}


def test_it_unifies_a_property_whose_type_differs_between_files(tmp_path):
    corpus = corpora.dolma()
    src = corpus.write(tmp_path / "src")
    assert main(["tokenize", str(src), "--out", str(tmp_path / "tok"), "--quiet"]) == 0
    t = TokenizedSource(tmp_path / "tok").documents()
    meta = t.schema.field("props").type.field("metadata").type
    assert meta.field("score").type == pa.float64()  # float, int, absent
    assert meta.field("version").type == pa.string()  # int in one file, text in another
    versions = [m["version"] if m else None for m in
                (p["metadata"] for p in t.column("props").to_pylist())]  # fmt: skip
    assert versions[:20] == ["3"] * 20 and versions[20:40] == ["3.11"] * 20
    assert versions[40:] == [None] * 20


def test_it_reads_a_property_absent_from_one_source_as_null_there(tmp_path):
    a = [{"text": t, "quality": {"score": 0.9 if i % 2 else 0.1}} for i, (_, t) in
         enumerate(corpora.docstrings(20))]  # fmt: skip
    b = [{"text": t} for _, t in corpora.docstrings(20, offset=20)]
    corpora.write_jsonl(tmp_path / "a" / "a.jsonl", a)
    corpora.write_jsonl(tmp_path / "b" / "b.jsonl", b)
    for s in ("a", "b"):
        assert (
            main(["tokenize", str(tmp_path / s), "--out", str(tmp_path / f"t{s}"), "--quiet"]) == 0
        )
    assert main(["pool", str(tmp_path / "ta"), str(tmp_path / "tb"), "--out",
                 str(tmp_path / "p"), "--seq-len", "64", "--quiet",
                 "--filter", "quality.score > 0.5 OR quality IS NULL"]) == 0  # fmt: skip
    docs = Pool(tmp_path / "p").documents
    per_source = np.bincount(docs.column("source").to_numpy(), minlength=2)
    assert per_source.tolist() == [10, 20]


INTERNAL = ["doc_id", "file", "line", "byte_offset", "n_tokens", "source", "source_shard",
            "source_row", "source_fingerprint", "__key", "__row", "props", "_doc"]  # fmt: skip


def test_it_round_trips_properties_named_like_every_internal_column(tmp_path):
    docs = corpora.docstrings(40)
    records = []
    for i, (_, text) in enumerate(docs):
        r = {"text": text}
        for j, name in enumerate(INTERNAL):
            r[name] = f"user-{name}-{i % (j + 2)}"
        records.append(r)
    corpora.write_jsonl(tmp_path / "src" / "part.jsonl", records)
    assert main(["tokenize", str(tmp_path / "src"), "--out", str(tmp_path / "tok"), "--quiet"]) == 0
    # The user's names in a filter mean the user's properties; `_doc.` names Shardyard's.
    expr = "source = 'user-source-0' AND n_tokens <> 'x' AND \"__row\" LIKE 'user-%'"
    assert main(["pool", str(tmp_path / "tok"), "--out", str(tmp_path / "pool"),
                 "--seq-len", "64", "--quiet", "--filter", expr]) == 0  # fmt: skip
    pool = Pool(tmp_path / "pool")
    stored = pool.documents.to_pylist()
    want = [r for r in records if r["source"] == "user-source-0"]
    assert len(stored) == len(want) > 0
    by_text = {r["text"]: r for r in want}
    ts = TokenizedSource(tmp_path / "tok")
    tok = load_tokenizer(ts.tokenizer["spec"])
    for d in stored:
        r = by_text[tok.decode(ts.tokens(d["doc_id"])[:-1].tolist())]
        assert d["props"] == {k: r[k] for k in INTERNAL}
        assert d["source"] == 0  # Shardyard's own column is intact beside it
    assert set(pool.document_values("source")) == {"user-source-0"}
    assert set(pool.document_values("_doc.source")) == {0}
    assert main(["pool", str(tmp_path / "tok"), "--out", str(tmp_path / "pool2"),
                 "--seq-len", "64", "--quiet", "--filter", "_doc.n_tokens > 100"]) == 0  # fmt: skip
    assert all(d["n_tokens"] > 100 for d in Pool(tmp_path / "pool2").documents.to_pylist())


def test_it_filters_lists_and_labels_by_shardyards_own_columns(tmp_path, capsys):
    corpus = corpora.the_stack()
    src = corpus.write(tmp_path / "src")
    tok, pool = tmp_path / "tok", tmp_path / "pool"
    assert main(["tokenize", str(src), "--out", str(tok), "--text-field", "content",
                 "--quiet"]) == 0  # fmt: skip
    expr = "list_contains(max_stars_repo_licenses, 'PSF-2.0') AND _doc.n_tokens > 10"
    assert main(["pool", str(tok), "--out", str(pool), "--seq-len", "64", "--quiet",
                 "--filter", expr]) == 0  # fmt: skip
    assert len(Pool(pool).documents) == len(corpus.records())
    assert main(["quality", str(pool), "--by", "_doc.source"]) == 0  # one value: no deviation
    assert main(["quality", str(pool), "--by", "lang"]) == 0
    assert "2 values of 'lang'" in capsys.readouterr().out

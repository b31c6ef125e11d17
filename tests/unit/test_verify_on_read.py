"""Checksums are checked where data is read: a pool build verifies the tokenized shards it
reads, a materialization verifies the pool blocks it copies, each failing with the file and
byte range of a flipped byte; and fingerprints cover the inputs' checksums, so a pool made
from different bytes never carries the clean pool's fingerprint. Real text (CPython's
standard library) through the real tokenize, pool, mixture and materialize stages."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from shardcore import manifest as mf
from shardcore import verify
from shardcore.errors import CorruptDataError
from shardcore.materialize import materialize
from shardcore.mixture import MixtureSpec, build_mixture
from shardcore.pool import build_pool
from shardcore.tokenize import tokenize
from tests.unit import tokenize_fixtures as tf

RANGE = re.compile(r"checksum mismatch in bytes \[(\d+), (\d+)\)")


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tok")
    src = tf.write_jsonl(root / "stdlib.jsonl", tf.stdlib_records(120))
    tokenize([str(src)], str(root / "tok"), shard_size=64 << 10)
    return root / "tok"


def _copy(tokenized: Path, dest: Path) -> Path:
    shutil.copytree(tokenized, dest)
    return dest


def _first_bin(artifact: Path) -> Path:
    return sorted((artifact / "shards").glob("*.bin"))[0]


def test_it_fails_a_pool_build_on_a_flipped_byte_naming_file_and_range(tokenized, tmp_path):
    src = _copy(tokenized, tmp_path / "tok")
    victim = _first_bin(src)
    offset = victim.stat().st_size // 2
    _flip(victim, offset)

    with pytest.raises(CorruptDataError) as err:
        build_pool([str(src)], str(tmp_path / "pool"), seq_len=128, seed=1)

    message = str(err.value)
    assert message.startswith(f"{victim}: checksum mismatch in bytes [")
    lo, hi = map(int, RANGE.search(message).groups())
    assert lo <= offset < hi
    assert not (tmp_path / "pool" / "manifest.json").exists()  # no pool was committed


def test_it_gives_a_pool_of_other_bytes_another_fingerprint(tokenized, tmp_path):
    clean = build_pool([str(tokenized)], str(tmp_path / "clean"), seq_len=128, seed=1)
    again = build_pool([str(tokenized)], str(tmp_path / "again"), seq_len=128, seed=1)
    assert again["fingerprint"] == clean["fingerprint"]

    # A shard corrupted before it was checksummed (so its manifest describes the bad
    # bytes): same source, same parameters, same tokenized fingerprint, other content.
    bad = _copy(tokenized, tmp_path / "bad")
    victim = _first_bin(bad)
    _flip(victim, 4)
    manifest = mf.read_manifest(bad)
    rel = victim.relative_to(bad).as_posix()
    manifest["files"] = [
        verify.file_entry(bad, rel) if e["path"] == rel else e for e in manifest["files"]
    ]
    mf.write_manifest(bad, {k: v for k, v in manifest.items() if k != "format_version"})
    assert mf.read_manifest(bad)["fingerprint"] == mf.read_manifest(tokenized)["fingerprint"]

    corrupt = build_pool([str(bad)], str(tmp_path / "corrupt"), seq_len=128, seed=1)
    assert corrupt["fingerprint"] != clean["fingerprint"]


def test_it_fails_a_materialization_on_a_flipped_pool_byte(tokenized, tmp_path):
    pool = tmp_path / "pool"
    build_pool([str(tokenized)], str(pool), seq_len=128, seed=1)
    spec = MixtureSpec.from_dict(
        {"tokens": 128 * 200, "seed": 5, "components": [{"pool": str(pool), "weight": 1.0}]}
    )
    build_mixture(spec, tmp_path / "mix")
    materialize(str(tmp_path / "mix"), str(tmp_path / "clean-copy"))  # reads it all: clean

    victim = _first_bin(pool)
    offset = 3 * 129 * 4 + 17  # inside record 3 (129 int32 tokens per record)
    _flip(victim, offset)
    with pytest.raises(CorruptDataError) as err:
        materialize(str(tmp_path / "mix"), str(tmp_path / "copy"))

    message = str(err.value)
    assert message.startswith(f"{victim}: checksum mismatch in bytes [")
    lo, hi = map(int, RANGE.search(message).groups())
    assert lo <= offset < hi
    assert not (tmp_path / "copy" / "manifest.json").exists()


def test_it_checks_only_the_blocks_a_reader_asks_for(tokenized, tmp_path):
    src = _copy(tokenized, tmp_path / "tok")
    victim = _first_bin(src)
    entry = mf.files_by_path(mf.read_manifest(src))[victim.relative_to(src).as_posix()]
    bs = entry["block_size"]
    assert entry["size"] > 2 * bs
    _flip(victim, bs + 1)  # block 1

    assert verify.check_read(src, entry, [(0, bs)]) == bs  # block 0 alone: clean
    with pytest.raises(CorruptDataError, match=rf"bytes \[{bs}, {2 * bs}\) \(block 1 of"):
        verify.check_read(src, entry, [(bs - 1, bs + 2)])
    with pytest.raises(CorruptDataError, match=rf"bytes \[{bs}, {2 * bs}\)"):
        verify.check_read(src, entry)


def test_it_fails_a_diversity_ordered_mixture_on_a_flipped_byte_in_a_pool_table(
    tokenized, tmp_path
):
    pool = tmp_path / "pool"
    build_pool([str(tokenized)], str(pool), seq_len=128, seed=1)
    spec = {
        "tokens": 128 * 100,
        "seed": 5,
        "order": "diversity",
        "components": [{"pool": str(pool), "weight": 1.0}],
    }
    build_mixture(MixtureSpec.from_dict(spec), tmp_path / "clean-mix")  # clean: it builds

    victim = pool / "documents.parquet"
    _flip(victim, 200)
    with pytest.raises(CorruptDataError, match=rf"^{re.escape(str(victim))}: checksum mismatch"):
        build_mixture(MixtureSpec.from_dict(spec), tmp_path / "mix")
    assert not (tmp_path / "mix" / "manifest.json").exists()

"""A schedule on S3 (moto's server, over HTTP) answers locate, resume counts, epochs, first
reads and continuations by checked ranges: the answers of the same schedule on disk, no
local copy of it made, and a damaged block an error naming the file and the block."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shardcore import flagged_reads as lineage
from shardcore import manifest as mf
from shardcore import storage
from shardcore.errors import CorruptDataError, InputError
from shardcore.locate import locate_mixture
from shardcore.manifest import read_manifest
from shardcore.mixture import POOL_FILE, Mixture, MixtureSpec, build_mixture, continuation
from shardcore.pool import PoolReader
from shardcore.storage import artifact_cache
from shardcore.storage import ranged as ranged_columns
from tests.unit import mix_fixtures

SEQ = 64
SAMPLES = 30_000  # the small pools repeat; chunks of 4,099; 15 blocks of the pool column


@pytest.fixture(scope="module")
def disk(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ranged")
    pools = mix_fixtures.build_pools(root / "pools", seq_len=SEQ)
    spec = mix_fixtures.three_pool_spec(
        pools, seq_len=SEQ, samples=SAMPLES, anneal_samples=3_001, seed=5
    )
    build_mixture(MixtureSpec.from_dict(spec), root / "mix", chunk_samples=4_099)
    return root / "mix"


@pytest.fixture
def on_s3(disk, s3_bucket, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    url = f"{s3_bucket}/mix"
    artifact_cache.publish_directory(disk, url)
    return url


def _cached(tmp_path: Path) -> list[str]:
    cache = tmp_path / "cache"
    return sorted(str(p) for p in cache.rglob("*") if p.is_file()) if cache.exists() else []


def test_a_schedule_on_s3_answers_by_ranges_as_on_disk(disk, on_s3, tmp_path):
    here, there = Mixture(disk), Mixture(on_s3, ranged=True)
    assert there.path == on_s3 and isinstance(there.pool_index, ranged_columns.RangedColumn)
    assert len(there.pool_index) == here.num_samples == SAMPLES
    for s in (0, 1, 4_098, 4_099, 4_100, 17_777, SAMPLES - 1, SAMPLES):
        np.testing.assert_array_equal(there.reads_before(s), here.reads_before(s))
        if s < SAMPLES:
            assert there.sample(s) == here.sample(s)
            assert locate_mixture(on_s3, sample=s) == locate_mixture(disk, sample=s)
    pidx = np.asarray(here.pool_index)
    for i in range(3):
        n = int(np.count_nonzero(pidx == i))
        for j in (0, 1, n // 3, n - 1, n):
            assert there.sample_of_read(i, j) == here.sample_of_read(i, j)
    assert there.epoch_starts() == here.epoch_starts() and len(here.epoch_starts()) >= 4
    a, b = continuation(on_s3, 12_345), continuation(disk, 12_345)
    assert [p["read"] for p in a["pools"]] == [p["read"] for p in b["pools"]]
    rng = np.random.default_rng(4)
    for trial in range(6):
        masks = {}
        for i, p in enumerate(here.pools):
            m = np.zeros(int(p["num_records"]), dtype=bool)
            m[rng.choice(m.size, size=1 + trial % 3, replace=False)] = True
            masks[i] = m
        for start in (0, 9_000, 28_000):
            got = lineage.first_sample(on_s3, masks, start=start)
            assert got == lineage.first_sample(disk, masks, start=start), (trial, start)
    # Slices read as numpy reads them, and the whole column when asked for it.
    np.testing.assert_array_equal(there.pool_index[4_000:9_000], here.pool_index[4_000:9_000])
    np.testing.assert_array_equal(np.asarray(there.record_index), np.asarray(here.record_index))
    assert there.pool_index[-1] == here.pool_index[-1]
    with pytest.raises(IndexError):
        there.pool_index[SAMPLES]
    # Nothing of the schedule was copied to the local cache.
    assert _cached(tmp_path) == []


def test_a_damaged_block_is_an_error_naming_the_file_and_the_block(disk, on_s3):
    store = storage.open_store(on_s3)
    data = bytearray(store.read_bytes(POOL_FILE))
    data[5 * 4096 + 17] ^= 0xFF  # one byte of block 5 (blocks of 4 KiB)
    store.put_bytes(POOL_FILE, bytes(data))
    mix = Mixture(on_s3, ranged=True)
    assert mix.sample(100) == Mixture(disk).sample(100)  # block 0 is intact
    with pytest.raises(CorruptDataError, match=rf"{POOL_FILE}: block 5 \(bytes 20480-24576\)"):
        mix.sample(5 * 4096 // 2 + 100)


def test_schedule_files_are_checked_in_blocks_of_at_most_a_mebibyte():
    from shardcore.mixture.build import SCHEDULE_BLOCK
    from shardcore.verify import block_size_for

    # A 2^31-sample record column (16 GiB): 64 MiB blocks for a shard file's 256 checksums;
    # a schedule's reader by ranges reads a MiB for one sample.
    assert block_size_for(16 << 30) == 64 << 20
    assert block_size_for(16 << 30, most=SCHEDULE_BLOCK) == SCHEDULE_BLOCK == 1 << 20
    assert block_size_for(100_000, most=SCHEDULE_BLOCK) == block_size_for(100_000) == 4096


def test_flagged_records_and_samples_on_s3_read_only_what_they_need(disk, on_s3, tmp_path):
    """A pool on S3: its flagged records from the segment arrays of the shards holding the
    flagged documents (each object checked), as on disk; a schedule on S3: the samples
    reading them counted by ranges. Nothing copied to the local cache; a changed segment
    object an error naming it."""
    pools = disk.parent / "pools"
    rng = np.random.default_rng(11)
    url = f"{on_s3.rsplit('/', 1)[0]}/pool-middle"
    artifact_cache.publish_directory(pools / "pool-middle", url)
    n_docs = int(mf.shard_column(read_manifest(pools / "pool-middle"), "documents").sum())
    for size in (1, 5, 40):
        rows = rng.choice(n_docs, size=size, replace=False)
        here = lineage.flagged_records(pools / "pool-middle", rows)
        assert here.dtype == np.int64 and np.all(np.diff(here) > 0) and here.size >= 1
        np.testing.assert_array_equal(lineage.flagged_records(url, rows), here)
        # The same records as a mask or as indices: the same samples, on S3 and on disk.
        mask = np.zeros(int(Mixture(disk).pools[1]["num_records"]), dtype=bool)
        mask[here] = True
        for stop in (None, 7_000, 25_000):
            want = lineage.flagged_samples(disk, {1: mask}, stop=stop)
            assert lineage.flagged_samples(on_s3, {1: here}, stop=stop) == want, (size, stop)
    assert _cached(tmp_path) == []
    store = storage.open_store(url)
    key = next(k for k in store.list() if k.endswith(".segments.npz"))
    store.put_bytes(key, store.read_bytes(key) + b"\0")
    with pytest.raises(CorruptDataError, match=rf"{key} does not match its manifest entry"):
        lineage.flagged_records(url, np.arange(n_docs))


def test_a_pools_documents_columns_on_s3_are_read_by_ranges(disk, on_s3, tmp_path):
    """A pool on S3 opened for its documents table: the columns a taint reads and the labels
    a version's quality measures come back as on disk, a batch at a time, without a copy of
    the pool; its tokens are not readable that way; a damaged block of the table is an
    error naming it."""
    local = disk.parent / "pools" / "pool-early"
    url = f"{on_s3.rsplit('/', 1)[0]}/pool-early"
    artifact_cache.publish_directory(local, url)
    names = ["_doc.source", "_doc.doc_id", "_doc.n_tokens"]
    here = PoolReader(local)
    there = PoolReader(url, ranged=True)
    for batch in (7, 1 << 20):
        a = list(here.iter_document_columns(names, batch_rows=batch))
        b = list(there.iter_document_columns(names, batch_rows=batch))
        assert [f for f, _ in a] == [f for f, _ in b] and len(a) >= 1
        for (_, x), (_, y) in zip(a, b, strict=True):
            for name in names:
                np.testing.assert_array_equal(x[name], y[name])
    assert there.document_schema == here.document_schema
    assert there.documents.equals(here.documents)  # read by ranges too
    with pytest.raises(InputError, match=rf"{url}: unknown property 'nope'"):
        there.document_values("nope")
    n, cols = there.document_columns(["_doc.doc_id"])
    assert n == len(here.documents) and cols["_doc.doc_id"].size == n
    # A measured sample's label: the segment arrays of the shards holding its record.
    records = np.random.default_rng(2).integers(0, here.num_records, 300)
    for prop in ("_doc.n_tokens", "_doc.doc_id"):
        np.testing.assert_array_equal(
            there.record_labels(prop, records), here.record_labels(prop, records)
        )
    assert _cached(tmp_path) == []
    with pytest.raises(InputError, match="opened without its tokens"):
        there.record(0)
    store = storage.open_store(url)
    table = next(k for k in store.list() if k.endswith(".parquet"))
    data = bytearray(store.read_bytes(table))
    data[len(data) // 2] ^= 0xFF
    store.put_bytes(table, bytes(data))
    with pytest.raises(CorruptDataError, match=rf"{table}: block \d+"):
        list(PoolReader(url, ranged=True).iter_document_columns(names))
    with pytest.raises(CorruptDataError, match=rf"{table}: block \d+"):
        # The footer too: a pool's properties are never read from an unchecked byte.
        data[len(data) // 2] ^= 0xFF
        data[-12] ^= 0xFF
        store.put_bytes(table, bytes(data))
        _ = PoolReader(url, ranged=True).document_schema

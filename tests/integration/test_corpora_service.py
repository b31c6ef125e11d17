"""The schemas real corpora ship, through the service: sources registered in the catalog,
tokenized and pooled by a real Celery worker into Postgres, a filter in each corpus's own
(nested) property names, one mixture of all six, exports and verify; the source page's
charts show each corpus's properties with their real counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardcore.verify import verify
from tests.integration.dashboard_fixtures import login, users
from tests.integration.test_jobs_workers import catalog_env, wait_job
from tests.support import corpora
from webapp.catalog.models import ArtifactStatus
from webapp.catalog.services.exports import mixture_version_export
from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
from webapp.catalog.services.pools import pool_build
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import JobState

pytestmark = pytest.mark.services
__all__ = ["catalog_env", "login", "users"]

SEQ = 64


def test_it_builds_every_real_schema_through_a_worker(
    postgres, redis_url, celery_workers, catalog_env, login
):
    celery_workers("w1")
    built = {}
    for name, make in sorted(corpora.CORPORA.items()):
        corpus = make()
        corpus.write(catalog_env)
        source = source_register(
            name=name, uri=str(catalog_env / name), text_field=corpus.text_field
        )
        assert source.num_files == len(corpus.files)
        ts = tokenized_source_build(source_id=source.pk, shard_size=16 << 10)
        built[name] = (corpus, source, ts)
    pools = {}
    for name, (corpus, _source, ts) in built.items():
        job = wait_job(ts.job_id)
        assert job.state == JobState.SUCCEEDED, job.log_tail
        ts.refresh_from_db()
        assert ts.num_documents == len(corpus.records())
        pools[name] = pool_build(
            name=f"{name}-selected", tokenized_ids=[ts.pk], seq_len=SEQ, filter=corpus.filter,
            memory=1 << 20, shard_size=8 << 10,
        )  # fmt: skip
    for name, pool in pools.items():
        job = wait_job(pool.job_id)
        assert job.state == JobState.SUCCEEDED, job.log_tail
        pool.refresh_from_db()
        assert pool.status == ArtifactStatus.READY
        corpus = built[name][0]
        assert pool.num_documents == sum(map(corpus.selects, corpus.records())) > 0
        assert (job.documents, job.tokens) == (pool.num_documents, pool.num_tokens)  # once each
        assert verify(pool.path).ok

    mixture = mixture_get_or_create(name="six-schemas")
    version = mixture_version_create(
        mixture_id=mixture.pk,
        components=[{"pool": p.pk, "weight": 1 / 6} for p in pools.values()],
        token_budget=SEQ * 60,
        seed=2,
    )
    assert wait_job(version.job_id).state == JobState.SUCCEEDED
    version.refresh_from_db()
    assert version.status == ArtifactStatus.READY and version.num_samples == 60
    assert verify(version.path).ok
    for fmt in ("megatron", "json"):
        export = mixture_version_export(version_id=version.pk, fmt=fmt)
        assert export.status == ArtifactStatus.READY
        assert Path(export.path).stat().st_size > 0
    plain = mixture_version_export(version_id=version.pk, fmt="json")
    assert json.loads(Path(plain.path).read_text())["num_samples"] == 60

    # The source page charts each corpus's own properties, counted from its records.
    client = login("viewer")
    corpus, source, _ = built["dolma"]
    page = client.get(f"/sources/{source.pk}/")
    assert page.status_code == 200
    figures = dict(page.context["composition_figures"])  # one chart per property
    bars = figures["source"]["data"]
    documents = dict(zip(bars[0]["x"], bars[0]["customdata"], strict=True))
    assert documents["stdlib-docstrings"] == len(corpus.records())
    meta_bars = figures["metadata"]["data"][0]
    metadata = dict(zip(meta_bars["x"], meta_bars["customdata"], strict=True))
    assert {m["metadata"]["path"] for m in corpus.records()} >= {
        json.loads(k)["path"] for k in metadata if not k.startswith("other (")
    }
    nbytes = dict(zip(bars[1]["x"], bars[1]["customdata"], strict=True))
    assert nbytes["stdlib-docstrings"] == sum(len(r["text"].encode()) for r in corpus.records())
    lengths = page.context["length_figure"]["data"][0]
    assert sum(lengths["y"]) == len(corpus.records())

    corpus, source, _ = built["the-stack"]
    page = client.get(f"/sources/{source.pk}/")
    bars = dict(page.context["composition_figures"])["lang"]["data"]
    documents = dict(zip(bars[0]["x"], bars[0]["customdata"], strict=True))
    langs = [r["lang"] for r in corpus.records()]
    assert documents["Python"] == langs.count("Python")
    assert documents["Text"] == langs.count("Text")

"""The Prometheus endpoint, scraped while a real Celery worker tokenizes a source: at every
scrape the unit counts add up to the job's units, and once the job is done the unit counts
and the token, document and byte totals equal the job's rows. The endpoint refuses a
request without credentials and takes an API token or the configured bearer."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.authtoken.models import Token

from shardcore.units import counts
from tests.integration.test_jobs_workers import stdlib_docs, write_jsonl
from tests.support.services import catalog_roots, wait_for
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import Job, JobState, JobUnit

pytestmark = pytest.mark.services


def scrape(client, **headers) -> dict[str, list]:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    families = {}
    for family in text_string_to_metric_families(response.content.decode()):
        families[family.name] = family.samples
    return families


def value(families, name, sample=None, **labels) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    sample = sample or name
    return sum(
        s.value
        for s in families.get(name, [])
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_metrics_need_credentials_like_the_api(client, db, settings, django_user_model):
    settings.SHARDYARD_METRICS_TOKEN = "scrape-secret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Token nope").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret").status_code == 200
    user = django_user_model.objects.create_user("prom", password="x-long-password")
    token = Token.objects.create(user=user)
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Token {token.key}").status_code == 200
    settings.SHARDYARD_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_metrics_scraped_during_a_tokenize_job_match_its_rows(
    postgres, redis_url, celery_workers, celery_queue, tmp_path, settings, monkeypatch, client
):
    settings.SHARDYARD_METRICS_TOKEN = "scrape-secret"
    auth = {"HTTP_AUTHORIZATION": "Bearer scrape-secret"}
    root, _ = catalog_roots(tmp_path, settings, monkeypatch)
    write_jsonl(root / "code" / "a.jsonl", stdlib_docs(40))
    source = source_register(name="code", uri=str(root / "code"))

    # Queued before any worker runs: the broker holds the units' messages.
    ts = tokenized_source_build(source_id=source.pk, shard_size=32 << 10, unit_bytes=32 << 10)
    job = Job.objects.get(pk=ts.job_id)
    before = scrape(client, **auth)
    assert value(before, "shardyard_units", kind="tokenize") == job.units_total > 4
    assert value(before, "shardyard_queue_depth", queue=celery_queue) >= 1

    celery_workers("metered")
    seen_running = False
    while True:
        families = scrape(client, **auth)
        job = Job.objects.get(pk=ts.job_id)
        # Every unit is counted in exactly one state at every scrape.
        assert value(families, "shardyard_units", kind="tokenize") == job.units_total
        seen_running |= value(families, "shardyard_jobs", kind="tokenize", state="running") == 1
        if job.state in (JobState.SUCCEEDED, JobState.FAILED):
            break
        wait_for(lambda: True, timeout=1, interval=0.05)
    assert job.state == JobState.SUCCEEDED, job.log_tail

    families = scrape(client, **auth)
    assert seen_running
    assert value(families, "shardyard_jobs", kind="tokenize", state="succeeded") == 1
    units = JobUnit.objects.filter(job=job)
    assert (
        value(families, "shardyard_units", kind="tokenize", state="succeeded")
        == (units.filter(state="succeeded").count())
        == job.units_total
    )
    assert value(families, "shardyard_tokens_processed", "shardyard_tokens_processed_total",
                 kind="tokenize") == job.tokens == sum(counts(u.stats)["tokens"] for u in units) > 0  # fmt: skip
    assert value(families, "shardyard_documents_processed", "shardyard_documents_processed_total",
                 kind="tokenize") == job.documents == 40  # fmt: skip
    assert value(families, "shardyard_bytes_processed", "shardyard_bytes_processed_total",
                 kind="tokenize") == job.bytes > 0  # fmt: skip
    ts.refresh_from_db()
    assert ts.num_tokens == job.tokens
    durations = "shardyard_unit_duration_seconds"
    assert value(families, durations, f"{durations}_count", kind="tokenize") == job.units_total
    assert value(families, durations, f"{durations}_bucket", kind="tokenize", le="+Inf") == (
        job.units_total
    )
    assert value(families, "shardyard_workers_live", queue=celery_queue) == 1
    assert value(families, "shardyard_queue_depth", queue=celery_queue) == 0
    assert "shardyard_runs_tainted" in families and "shardyard_scrub_findings" in families
    # Request latency of this process: the scrapes themselves were timed.
    assert value(
        families, "shardyard_request_duration_seconds",
        "shardyard_request_duration_seconds_count", route="metrics",
    ) >= 2  # fmt: skip

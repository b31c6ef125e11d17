"""Near-duplicates across sources and topic clusters through the service on Postgres (jobs
run in this process through the real engine, Celery's eager mode; the worker path with a
SIGKILLed worker is test_annotations_groups_workers): the API and the command line start
one group job over several tokenized sources and answer the same group with the same
annotations; the source page's form chooses the sources in priority order; the topics
annotator's columns are offered and joined, and its page lists each cluster's size, top
terms and snippets."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils.html import escape
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from shardcore import props
from shardcore.annotate import create
from shardcore.annotate.artifact import read_annotation, read_summary
from shardcore.pool import PoolReader
from tests.integration.annotation_group_fixtures import planted_sources
from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from webapp.catalog.models import Annotation, ArtifactStatus, Pool
from webapp.catalog.selectors import annotation_columns
from webapp.catalog.services.annotations import annotation_build
from webapp.catalog.services.pools import pool_build
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs.models import Job

pytestmark = pytest.mark.services


@pytest.fixture
def world(transactional_db, tmp_path, settings):
    from workers.celery import app

    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp_path], tmp_path / "data"
    app.conf.task_always_eager = True
    planted = planted_sources(tmp_path, n_a=30, n_own=6, chars=6000)
    tokenized = []
    for name in ("a", "b"):
        source = source_register(name=name, uri=str(tmp_path / name))
        ts = tokenized_source_build(source_id=source.pk, shard_size=48 << 10)
        ts.refresh_from_db()
        assert ts.status == ArtifactStatus.READY and ts.shards.count() >= 2
        tokenized.append(ts)
    yield planted, tokenized
    app.conf.task_always_eager = False


def _api(user) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return c


def test_the_api_the_command_line_and_the_page_cluster_across_sources(world, users, login):  # noqa: F811
    planted, (a, b) = world
    api = _api(users["editor"])
    dups = planted.duplicates(create("minhash").params["threshold"])
    url = "/api/annotations/near-duplicates/"

    resp = api.post(url, {"tokenized_sources": [a.pk, b.pk]}, "json")
    assert resp.status_code == 202, resp.content
    body = resp.json()
    assert [r["tokenized_source"] for r in body] == [a.pk, b.pk]
    assert {r["job"] for r in body} == {body[0]["job"]}
    assert resp["Location"].endswith(f"/api/jobs/{body[0]['job']}/")
    job = Job.objects.get(pk=body[0]["job"])
    assert job.kind == "annotate.neardup" and job.documents == len(planted.a) + len(planted.b)
    ann_a, ann_b = (Annotation.objects.get(pk=r["id"]) for r in body)
    assert ann_a.status == ann_b.status == ArtifactStatus.READY, job.log_tail
    assert ann_a.annotator == ann_b.annotator == "minhash"
    assert ann_a.summary["duplicates"]["duplicate_documents"] == 0
    assert ann_b.summary["duplicates"]["duplicate_documents"] == len(dups)
    detail = api.get(f"/api/annotations/{ann_b.pk}/").json()
    assert detail["summary"]["group"]["sources"] == 2

    # The same group answers the same annotations; a bad request says what is wrong.
    again = api.post(url, {"tokenized_sources": [a.pk, b.pk]}, "json")
    assert again.status_code == 200 and [r["id"] for r in again.json()] == [ann_a.pk, ann_b.pk]
    one = api.post(url, {"tokenized_sources": [a.pk]}, "json")
    assert one.status_code == 400 and "tokenized_sources" in one.json()
    twice = api.post(url, {"tokenized_sources": [a.pk, a.pk]}, "json")
    assert twice.status_code == 400 and "named twice" in twice.json()["detail"]
    bad = api.post(url, {"tokenized_sources": [a.pk, b.pk], "params": {"bands": 7}}, "json")
    assert bad.status_code == 400 and "multiple of bands (7)" in bad.json()["detail"]
    gone = api.post(url, {"tokenized_sources": [a.pk, 999]}, "json")
    assert gone.status_code == 400 and "no tokenized source 999" in gone.json()["detail"]

    # The command line: several sources, one job; another annotator is refused.
    out = StringIO()
    call_command("catalog", "annotate", str(a.pk), str(b.pk), "minhash", stdout=out)
    assert out.getvalue().splitlines() == [
        f"annotation {ann_a.pk} (minhash) of tokenized source {a.pk}: built already",
        f"annotation {ann_b.pk} (minhash) of tokenized source {b.pk}: built already",
    ]
    with pytest.raises(CommandError, match="clustered together by minhash only"):
        call_command("catalog", "annotate", str(a.pk), str(b.pk), "pii")

    # The source page offers the group, this source first; posted with b first, b's copies
    # are kept and a's originals become the copies.
    editor = login("editor")
    page = editor.get(f"/sources/{a.source_id}/").content.decode()
    assert 'action="/annotations/near-duplicates/"' in page
    assert page.index(f'<option value="{a.pk}" selected>a #{a.pk}') < page.index(
        f'<option value="{b.pk}">b #{b.pk}'
    )
    resp = editor.post(
        "/annotations/near-duplicates/",
        {"tokenized_ids": [b.pk, a.pk], "params": "threshold=0.75", "source_id": a.source_id},
    )
    reverse = list(Annotation.objects.filter(annotator="minhash").exclude(job=job).order_by("pk"))
    assert [r.tokenized_source_id for r in reverse] == [b.pk, a.pk]
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{reverse[0].job_id}/"
    by_b = {r.tokenized_source_id: r for r in reverse}
    assert by_b[b.pk].summary["duplicates"]["duplicate_documents"] == 0
    assert by_b[a.pk].summary["duplicates"]["duplicate_documents"] == len(dups)
    assert by_b[a.pk].fingerprint != ann_a.fingerprint  # another group, another annotation
    page = login("viewer").get(f"/annotations/{by_b[a.pk].pk}/").content.decode()
    assert f"{len(dups)} of {len(planted.a)} documents are copies" in page
    assert f"b #{b.pk} (annotation {by_b[b.pk].pk})</a>: near-duplicates across 2 sources" in page
    resp = login("editor").post("/annotations/near-duplicates/", {"tokenized_ids": [a.pk]})
    assert resp.status_code == 302 and resp["Location"] == "/sources/"


def test_topic_clusters_through_the_service_are_joined_and_charted(world, users, login):  # noqa: F811
    planted, (a, _) = world
    ann = annotation_build(tokenized_id=a.pk, annotator="topics", params={"k": 4, "sample": 30})
    ann.refresh_from_db()
    assert ann.status == ArtifactStatus.READY, ann.job.log_tail
    assert [c["name"] for c in ann.columns] == ["cluster", "distance"]
    assert {"topics.cluster", "topics.distance"} <= set(annotation_columns(tokenized_ids=[a.pk]))

    cluster = read_annotation(ann.path).column("cluster").to_pylist()
    sizes = {c: cluster.count(c) for c in set(cluster)}
    assert len(sizes) == 4 and sum(sizes.values()) == len(planted.a)
    described = {c["cluster"]: c for c in read_summary(ann.path)["clusters"]}
    listed = ann.summary["clusters"]
    assert [(c["cluster"], c["documents"]) for c in listed] == sorted(
        sizes.items(), key=lambda x: (-x[1], x[0])
    )

    page = login("viewer").get(f"/annotations/{ann.pk}/").content.decode()
    rows = page[page.index('id="clusters"') :]
    at = 0
    for c in listed:  # largest first, each with its top terms and its snippets
        terms = described[c["cluster"]]["top_terms"][:10]
        assert terms and c["terms"] == terms
        row = f'<tr><td>{c["cluster"]}</td><td class="num">{c["documents"]}</td><td>{escape(", ".join(terms))}</td>'
        assert rows.index(row) > at
        at = rows.index(row)
        for e in described[c["cluster"]]["examples"][:3]:
            assert escape(e["text"][:100]) in rows
    assert 'data-column="topics.cluster"' in page

    # A pool joins it: the largest cluster only.
    top = listed[0]["cluster"]
    pool = pool_build(
        name="topic", tokenized_ids=[a.pk], seq_len=64,
        filter=f"topics.cluster = {top}", annotation_ids=[ann.pk],
    )  # fmt: skip
    pool = Pool.objects.get(pk=pool.pk)
    assert pool.status == ArtifactStatus.READY, pool.job.log_tail
    docs = PoolReader(pool.path).documents
    assert sorted(docs.column("doc_id").to_pylist()) == [
        i for i, c in enumerate(cluster) if c == top
    ]
    assert set(props.column(docs, "topics.cluster").to_pylist()) == {top}

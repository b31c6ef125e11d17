"""Annotations through the service on Postgres: the API starts a job that builds the
annotation (202 with the job's address), the same parameters answer the same annotation,
another annotation of the source leaves the first one's bytes alone, a pool joins it and
filters on ``pii.emails``, the columns are offered as ``<annotator>.<column>``, and "flag
the documents where pii.emails > 0" flags exactly those documents and taints what holds
them. Jobs run in this process through the real engine (Celery's eager mode); the worker
path, with a worker SIGKILLed mid-annotation, is test_annotations_heal."""

from __future__ import annotations

import json
import sysconfig
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from shardcore import props
from shardcore.annotate import pii
from shardcore.pool import PoolReader
from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from tests.support.flags import taint_computed
from webapp.catalog import flag_documents
from webapp.catalog.models import Annotation, ArtifactStatus, Flag, Pool, Taint
from webapp.catalog.selectors.pools import pool_properties
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build


def _ids(flag: Flag) -> list[int]:
    """The document indices a flag names, from its stored runs."""
    return flag_documents.all_ids(flag).tolist()


pytestmark = pytest.mark.services
STDLIB = Path(sysconfig.get_paths()["stdlib"])
PLANTED = "Questions: write to maintainer.{i}@python.example.org or call +44 20 7946 0{i:03d}."


@pytest.fixture
def eager_jobs():
    from workers.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def _api(user) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return c


@pytest.fixture
def world(transactional_db, tmp_path, settings, eager_jobs):
    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp_path], tmp_path / "data"
    files = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 3000)[:30]
    texts = [p.read_text(errors="replace")[:6000] for p in files]
    for i in range(2, len(texts), 5):  # every fifth document gets an address and a number
        texts[i] += "\n" + PLANTED.format(i=i)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "mods.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in texts)
    )
    source = source_register(name="code", uri=str(tmp_path / "code"))
    ts = tokenized_source_build(source_id=source.pk, shard_size=32 << 10)
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY and ts.shards.count() > 2
    counts = [pii.counts(t) for t in texts]
    return {"source": source, "ts": ts, "counts": counts}


def _ready(pk: int) -> Annotation:
    ann = Annotation.objects.get(pk=pk)
    assert ann.status == ArtifactStatus.READY, ann.job.log_tail
    return ann


def test_it_builds_joins_offers_and_flags_an_annotation(world, users, login):  # noqa: F811
    api, ts, counts = _api(users["editor"]), world["ts"], world["counts"]
    with_email = [i for i, c in enumerate(counts) if c["emails"] > 0]
    assert len(with_email) >= 6

    # Annotate: 202 with the job's address, built by the job's units, one per shard.
    resp = api.post("/api/annotations/", {"tokenized_source": ts.pk, "annotator": "pii"}, "json")
    assert resp.status_code == 202, resp.content
    assert resp["Location"].endswith(f"/api/jobs/{resp.json()['job']}/")
    ann = _ready(resp.json()["id"])
    assert ann.job.units_total == ts.shards.count() and ann.job.documents == len(counts)
    body = api.get(f"/api/annotations/{ann.pk}/").json()
    assert body["summary"]["columns"]["emails"]["nonzero"] == len(with_email)
    assert body["summary"]["documents"] == len(counts)

    # The same source x annotator x parameters is the same annotation.
    again = api.post("/api/annotations/", {"tokenized_source": ts.pk, "annotator": "pii"}, "json")
    assert again.status_code == 200 and again.json()["id"] == ann.pk
    bad = api.post(
        "/api/annotations/",
        {"tokenized_source": ts.pk, "annotator": "pii", "params": {"nope": 1}}, "json",
    )  # fmt: skip
    assert bad.status_code == 400 and "has no parameter 'nope'" in bad.json()["detail"]

    # Another annotation of the source never touches the first one's files.
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in Path(ann.path).rglob("*.parquet")}
    other = api.post(
        "/api/annotations/",
        {"tokenized_source": ts.pk, "annotator": "minhash", "params": {"num_perm": 64}}, "json",
    )  # fmt: skip
    assert other.status_code == 202, other.content
    minhash = _ready(other.json()["id"])
    assert minhash.path != ann.path
    assert before == {
        p: (p.read_bytes(), p.stat().st_mtime_ns) for p in Path(ann.path).rglob("*.parquet")
    }
    assert "duplicates" in minhash.summary

    # The columns, offered as <annotator>.<column>.
    cols = api.get(f"/api/annotations/columns/?tokenized_source={ts.pk}").json()["columns"]
    assert {"pii.emails", "pii.phones", "minhash.dup_rank"} <= set(cols)
    names = {a["name"]: a for a in api.get("/api/annotators/").json()}
    assert [c["name"] for c in names["pii"]["columns"]] == [
        "emails", "phones", "ipv4", "ipv6", "cards"
    ]  # fmt: skip

    # A pool joins it: the filter and the pool's documents read pii.emails.
    resp = api.post(
        "/api/pools/",
        {"name": "clean", "tokenized_ids": [ts.pk], "seq_len": 64, "filter": "pii.emails = 0",
         "annotation_ids": [ann.pk]}, "json",
    )  # fmt: skip
    assert resp.status_code == 201, resp.content
    clean = Pool.objects.get(pk=resp.json()["id"])
    assert clean.status == ArtifactStatus.READY, clean.job.log_tail
    assert resp.json()["annotations"] == [ann.pk]
    docs = PoolReader(clean.path).documents
    assert sorted(docs.column("doc_id").to_pylist()) == [
        i for i in range(len(counts)) if i not in with_email
    ]
    assert set(props.column(docs, "pii.emails").to_pylist()) == {0}
    assert {"pii.emails", "pii.cards"} <= set(pool_properties(pool=clean))
    assert clean.params["annotations"] == [ann.fingerprint]
    resp = api.post("/api/pools/", {"name": "all", "tokenized_ids": [ts.pk], "seq_len": 64}, "json")
    everything = Pool.objects.get(pk=resp.json()["id"])
    assert everything.fingerprint != clean.fingerprint
    foreign = api.post(
        "/api/pools/",
        {"name": "x", "tokenized_ids": [ts.pk], "seq_len": 64, "annotation_ids": [999]}, "json",
    )  # fmt: skip
    assert foreign.status_code == 400 and "no annotation 999" in foreign.json()["detail"]

    # Flag the documents where pii.emails > 0: those documents, the pool that holds them.
    resp = api.post(f"/api/annotations/{ann.pk}/flag-where/", {"filter": "pii.emails > 0"}, "json")
    assert resp.status_code == 201, resp.content
    flag = Flag.objects.get(pk=resp.json()["id"])
    taint_computed(flag.pk)  # what a worker does once the flag is recorded
    assert _ids(flag) == with_email and flag.source_id == world["source"].pk
    assert flag.reason == f"pii.emails > 0 (annotation {ann.pk}, pii)"
    tainted = Taint.objects.filter(flag=flag)
    assert tainted.get(tokenized_source=ts).documents == len(with_email)
    assert tainted.get(pool=everything).documents == len(with_email)
    assert not tainted.filter(pool=clean).exists()  # its filter left them out
    none = api.post(f"/api/annotations/{ann.pk}/flag-where/", {"filter": "pii.cards > 5"}, "json")
    assert none.status_code == 400 and "holds for none of the 30 documents" in none.json()["detail"]
    unknown = api.post(f"/api/annotations/{ann.pk}/flag-where/", {"filter": "pii.nope > 0"}, "json")
    assert unknown.status_code == 400 and "nope" in unknown.json()["detail"]

    # The command line: the same annotation, and the same refusal.
    out = StringIO()
    call_command("catalog", "annotate", str(ts.pk), "pii", stdout=out)
    assert out.getvalue().strip() == f"annotation {ann.pk} (pii): built already"
    with pytest.raises(CommandError, match="holds for none"):
        call_command("catalog", "flag-where", str(ann.pk), "pii.ipv6 > 100")

    # The pages: the source offers Annotate, the annotation charts each column.
    page = login("editor").get(f"/sources/{world['source'].pk}/").content.decode()
    assert f'action="/tokenized/{ts.pk}/annotate/"' in page and "<code>pii.emails</code>" in page
    page = login("viewer").get(f"/annotations/{ann.pk}/").content.decode()
    for name in ("emails", "phones", "ipv4", "ipv6", "cards"):
        assert f'data-column="pii.{name}"' in page
    page = login("viewer").get(f"/pools/{clean.pk}/").content.decode()
    assert f'<a href="/annotations/{ann.pk}/">pii #{ann.pk}</a>' in page
    assert '<option value="pii.emails"' in page  # the quality chart labels by it
    # A diversity-ordered version whose families include an annotation column.
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
    from webapp.catalog.services.pools import pool_build

    joined = pool_build(name="joined", tokenized_ids=[ts.pk], seq_len=64, annotation_ids=[ann])
    joined.refresh_from_db()
    version = mixture_version_create(
        mixture_id=mixture_get_or_create(name="by-pii").pk,
        components=[{"pool": joined.pk, "weight": 1.0}],
        token_budget=64 * joined.num_records, order="diversity",
        order_options={"by": ["pii.phones"]},
    )  # fmt: skip
    version.refresh_from_db()
    assert version.status == ArtifactStatus.READY, version.job.log_tail
    page = login("viewer").get(f"/mixtures/versions/{version.pk}/").content.decode()
    assert '<option value="pii.phones"' in page and '<option value="pii.emails"' in page
    page = login("viewer").get(f"/annotations/{minhash.pk}/").content.decode()
    dup = minhash.summary["duplicates"]
    assert f"{dup['duplicate_documents']} of {len(counts)} documents are copies" in page


def test_the_annotation_page_charts_languages_and_quality_measurements(
    world,
    users,  # noqa: F811
    login,  # noqa: F811
):
    import re
    from collections import Counter

    from shardcore.annotate import create, quality
    from webapp.catalog.services.annotations import annotation_build

    ts = world["ts"]
    texts = [json.loads(line)["text"] for line in (Path(ts.source.uri) / "mods.jsonl").open()]
    lang = _ready(annotation_build(tokenized_id=ts.pk, annotator="lang_id").pk)
    got = create("lang_id").annotate(texts)
    want = Counter(got["lang"])
    rows = {r["lang"]: r["documents"] for r in lang.summary["languages"]}
    assert rows == dict(want)
    page = login("viewer").get(f"/annotations/{lang.pk}/").content.decode()
    shown = re.findall(
        r'<tr class="language"><td>([^<]+)</td><td class="num">([\d,]+)</td>'
        r'<td class="num">([\d.]+)</td>',
        page,
    )
    assert [(code, int(n.replace(",", ""))) for code, n, _ in shown] == sorted(
        want.items(), key=lambda kv: (-kv[1], kv[0])
    )
    top = shown[0][0]
    scores = [s for code, s in zip(got["lang"], got["score"], strict=True) if code == top]
    assert float(shown[0][2]) == pytest.approx(sum(scores) / len(scores), abs=1e-4)

    q = _ready(annotation_build(tokenized_id=ts.pk, annotator="quality").pk)
    page = login("viewer").get(f"/annotations/{q.pk}/").content.decode()
    words = [quality.signals(t)["n_words"] for t in texts]
    facts = re.search(
        r'data-column="quality.n_words">.*?<p class="muted column-facts">([^<]*)</p>', page, re.S
    ).group(1)
    assert facts.startswith(f"{len(texts)} values, {sum(w > 0 for w in words)} non-zero")
    assert f"min {min(words)}, max {max(words)}" in facts
    assert q.summary["columns"]["n_words"]["mean"] == pytest.approx(sum(words) / len(words))


def test_the_annotation_page_lists_clusters_with_terms_and_snippets(
    world,
    login,  # noqa: F811
    users,  # noqa: F811
):
    summary = {
        "documents": 30,
        "columns": {"cluster": {"kind": "number", "nulls": 0, "count": 30, "min": 0, "max": 1,
                                "mean": 0.4, "nonzero": 12, "values": [[0, 18], [1, 12]]}},
        "clusters": [
            {"cluster": 0, "documents": 18, "terms": ["self", "return"],
             "snippets": ["class Popen(object):"]},
            {"cluster": 1, "documents": 12, "terms": ["msgid"], "snippets": []},
        ],
    }  # fmt: skip
    ann = Annotation.objects.create(
        tokenized_source=world["ts"], annotator="topics", annotator_version="1",
        columns=[{"name": "cluster", "type": "int32"}], summary=summary,
        status=ArtifactStatus.READY, path="/nowhere", num_documents=30,
    )  # fmt: skip
    page = login("viewer").get(f"/annotations/{ann.pk}/").content.decode()
    assert (
        '<tr><td>0</td><td class="num">18</td><td>self, return</td>'
        "<td><q>class Popen(object):</q><br></td></tr>"
    ) in page
    assert '<tr><td>1</td><td class="num">12</td><td>msgid</td><td></td></tr>' in page
    # The cluster ids themselves are not charted (their sizes are, above), nor summed.
    assert 'data-column="topics.cluster"' in page and "Cluster ids: each names a group" in page
    assert "12 non-zero, mean 0.4" not in page


def test_a_flag_where_over_a_large_annotation_is_evaluated_by_its_taint_task(
    world,
    settings,
    monkeypatch,
    users,  # noqa: F811
    login,  # noqa: F811
):
    """Over more than PLAN_INLINE_DOCUMENTS documents the request records the flag with its
    filter and no documents (the filter parsed, never evaluated there); its taint task
    finds exactly the documents the request would have, and taints the same."""
    from webapp.catalog.errors import CatalogError
    from webapp.catalog.services import annotations as svc
    from webapp.catalog.services.flags import flag_taint_compute
    from webapp.catalog.services.pools import pool_build
    from workers.tasks import flag_taint

    ts, counts = world["ts"], world["counts"]
    with_email = [i for i, c in enumerate(counts) if c["emails"] > 0]
    ann = _ready(svc.annotation_build(tokenized_id=ts.pk, annotator="pii").pk)
    everything = pool_build(name="all", tokenized_ids=[ts.pk], seq_len=64)
    everything.refresh_from_db()
    assert everything.status == ArtifactStatus.READY, everything.job.log_tail

    # Small enough (the default): evaluated in the request, as always.
    assert ann.num_documents == len(counts) <= settings.PLAN_INLINE_DOCUMENTS
    inline = svc.annotation_flag_where(annotation_id=ann.pk, filter="pii.emails > 0")
    taint_computed(inline.pk)
    inline.refresh_from_db()
    assert _ids(inline) == with_email
    with pytest.raises(CatalogError) as refused:
        svc.annotation_flag_where(annotation_id=ann.pk, filter="pii.cards > 5")
    none_message = str(refused.value)
    assert f"holds for none of the 30 documents of annotation {ann.pk}" in none_message
    with pytest.raises(CatalogError, match="nope") as refused:
        svc.annotation_flag_where(annotation_id=ann.pk, filter="pii.nope > 0")
    unknown_message = str(refused.value)

    # Larger than the setting: recorded at once, nothing evaluated in the request.
    settings.PLAN_INLINE_DOCUMENTS = 0
    sent: list[dict] = []
    monkeypatch.setattr(flag_taint, "apply_async", lambda kwargs, **_: sent.append(kwargs))

    def not_here(*a, **kw):
        raise AssertionError("the filter was evaluated in the request")

    with monkeypatch.context() as m:
        m.setattr(svc, "_matching", not_here)
        deferred = svc.annotation_flag_where(annotation_id=ann.pk, filter="pii.emails > 0")
        empty = svc.annotation_flag_where(annotation_id=ann.pk, filter="pii.cards > 5")
        before = Flag.objects.count()
        with pytest.raises(CatalogError, match="^filter: "):
            svc.annotation_flag_where(annotation_id=ann.pk, filter="pii.emails >")
        # An unknown column too: checked against the recorded columns, reading no rows.
        with pytest.raises(CatalogError) as refused:
            svc.annotation_flag_where(annotation_id=ann.pk, filter="pii.nope > 0")
        assert str(refused.value) == unknown_message
        assert Flag.objects.count() == before  # refused at once, nothing recorded
    deferred.refresh_from_db()
    assert deferred.num_documents is None and deferred.target == Flag.Target.DOCUMENTS
    assert deferred.taint_state == Flag.TaintState.QUEUED and deferred.taint_requested_at
    assert (deferred.where, deferred.annotation_id) == ("pii.emails > 0", ann.pk)
    assert deferred.reason == inline.reason and deferred.source_id == inline.source_id
    assert sent == [{"flag_id": deferred.pk}, {"flag_id": empty.pk}]
    assert not Taint.objects.filter(flag=deferred).exists()

    # Pages and the API say it is being evaluated, without evaluating it.
    with monkeypatch.context() as m:
        m.setattr(svc, "_matching", not_here)
        page = login("viewer").get(f"/audit/flags/{deferred.pk}/").content.decode()
        assert "<code>pii.emails &gt; 0</code>" in page and "being evaluated" in page
        listing = login("viewer").get("/audit/").content.decode()
        assert "being evaluated" in listing
    body = _api(users["viewer"]).get(f"/api/flags/{deferred.pk}/").json()
    assert (body["where"], body["annotation"], body["num_documents"]) == (
        "pii.emails > 0", ann.pk, None
    )  # fmt: skip

    # The task: the same documents, the same taint; a redelivery computes them again.
    def taint_of(flag: Flag) -> list[tuple]:
        return sorted(
            Taint.objects.filter(flag=flag).values_list(
                "tokenized_source_id", "pool_id", "mixture_version_id", "run_id", "documents"
            ),
            key=str,
        )

    for _ in range(2):
        assert flag_taint_compute(flag_id=deferred.pk) == Flag.TaintState.READY
        deferred.refresh_from_db()
        assert _ids(deferred) == _ids(inline) == with_email
        assert deferred.counts == inline.counts and deferred.counts["pools"] == 1
        assert taint_of(deferred) == taint_of(inline)
    assert (
        svc.flag_where_evaluate(deferred).tolist() == with_email
    )  # evaluating again: the same ids
    page = login("viewer").get(f"/audit/flags/{deferred.pk}/").content.decode()
    assert f"{len(with_email)} documents" in page and "being evaluated" not in page

    # None matching: the flag fails with the reason the request gives.
    assert flag_taint_compute(flag_id=empty.pk) == Flag.TaintState.FAILED
    empty.refresh_from_db()
    assert empty.taint_state == Flag.TaintState.FAILED and empty.num_documents is None
    assert empty.taint_error == none_message
    assert not Taint.objects.filter(flag=empty).exists()
    page = login("viewer").get(f"/audit/flags/{empty.pk}/").content.decode()
    assert "holds for none of the 30 documents" in page

    # The annotation deleted before the task ran: the flag fails, and every flag keeps
    # its filter (and its documents and taint) without it.
    gone = svc.annotation_flag_where(annotation_id=ann.pk, filter="pii.phones > 0")
    Annotation.objects.filter(pk=ann.pk).delete()
    assert flag_taint_compute(flag_id=gone.pk) == Flag.TaintState.FAILED
    gone.refresh_from_db()
    assert (gone.annotation_id, gone.where) == (None, "pii.phones > 0")
    assert "the annotation it was to be evaluated over is deleted" in gone.taint_error
    deferred.refresh_from_db()
    assert deferred.annotation_id is None and _ids(deferred) == with_email
    assert taint_of(deferred) == taint_of(inline)
    page = login("viewer").get(f"/audit/flags/{deferred.pk}/").content.decode()
    assert "an annotation since deleted" in page

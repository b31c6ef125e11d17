# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""The dashboard on an s3:// data root: a catalog built through the services on a bucket of
the local S3 server (a source of standard-library code, tokenized, a pool, a mixture
version, its materialized copy, a run with progress, a flag), then every detail page of it
read through the test client. What each page says (records, tokens, quality verdicts,
composition, the resume position, lineage) equals what shardcore reads from the artifacts
on the bucket; locations are the s3:// URLs, snippets stream them as pasted, and downloads
answer the objects' bytes."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from shardcore import manifest as mf
from shardcore import props, quality, storage
from shardcore.locate import locate_mixture
from shardcore.mixture import Mixture
from shardcore.pool import PoolReader
from shardcore.tokenized import TokenizedSource, property_stats
from tests.integration.dashboard_fixtures import (  # noqa: F401
    catalog_world,
    computed,
    first_sample_by_doc,
    login,
    users,
)
from tests.support.s3 import apply_env
from webapp.catalog import flag_documents
from workers.celery import app

GBS = 4  # samples per step the run reports with
STEPS = 9


def _thousands(n: int) -> str:
    return f"{int(n):,}"


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, moto_server, tmp_path_factory):
    """The catalog, built once for the module through the services (jobs run eagerly in
    this process) on ``s3://<fresh bucket>/data``."""
    from django.conf import settings

    from webapp.catalog.services.flags import flag_create

    tmp = tmp_path_factory.mktemp("s3pages")
    patch = pytest.MonkeyPatch()
    apply_env(moto_server, patch)
    root = f"s3://{moto_server.new_bucket()}/data"
    patch.setenv("SHARDYARD_DATA", root)
    patch.setenv("SHARDYARD_HOME", str(tmp / "home"))
    patch.setenv("SHARDYARD_CACHE", str(tmp / "cache"))
    old = settings.SOURCE_ROOTS, settings.DATA_ROOT
    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp], root
    app.conf.task_always_eager = True
    try:
        with django_db_blocker.unblock():
            from django.core.cache import cache

            cache.clear()
            built = catalog_world(tmp, steps=STEPS, samples_per_step=GBS)
            # A document first read after the run's position: "not yet" at a known sample.
            first = first_sample_by_doc(built["version"].path, built["pool"].path)
            doc, sample = next(
                (d, s) for d, s in sorted(first.items(), key=lambda x: x[1]) if s > STEPS * GBS
            )
            flag = flag_create(reason="pii", source_id=built["source"].pk, document_ids=[doc])
        yield {
            **built,
            "root": root,
            "flag": flag,
            "flag_sample": sample,
        }
    finally:
        app.conf.task_always_eager = False
        settings.SOURCE_ROOTS, settings.DATA_ROOT = old
        with django_db_blocker.unblock():
            from tests.support.services import flush_database

            flush_database()
        patch.undo()


def _page(client, url: str):
    resp = client.get(url)
    assert resp.status_code == 200, (url, resp.status_code)
    return resp, resp.content.decode()


def test_every_artifact_lives_on_the_bucket(world):
    root = world["root"]
    for row in (world["ts"], world["pool"], world["version"], world["copy"]):
        assert row.path.startswith(f"{root}/"), row.path
        assert storage.exists(storage.join(row.path, "manifest.json"))


def test_the_source_page_charts_the_composition_read_from_the_tokenized_source(world, login):
    ts = world["ts"]
    resp, body = _page(login("viewer"), f"/sources/{world['source'].pk}/")
    # Counted here from the checked copy of the whole tokenized source on the bucket.
    on_bucket = TokenizedSource(ts.path)
    assert on_bucket.manifest["fingerprint"] == ts.fingerprint
    docs = on_bucket.documents()
    size = np.array(docs.column("props").combine_chunks().field("size").to_pylist())
    n_tokens, n_bytes = (docs.column(c).to_numpy() for c in ("n_tokens", "n_bytes"))
    fig = dict(resp.context["composition_figures"])["size"]
    by_measure = {t["name"]: dict(zip(t["x"], t["customdata"], strict=True)) for t in fig["data"]}
    for value in ("small", "large"):
        sel = size == value
        assert by_measure["documents"][value] == int(sel.sum()) > 0
        assert by_measure["tokens"][value] == int(n_tokens[sel].sum())
        assert by_measure["bytes"][value] == int(n_bytes[sel].sum())
    lengths = resp.context["length_figure"]["data"][0]
    assert sum(lengths["y"]) == 24 == docs.num_rows
    assert f"<dd>{_thousands(24)}</dd>" in body


def test_a_tokenized_source_on_the_bucket_is_described_from_its_sidecars_alone(world):
    """What the source page reads: the sidecars, checked, never the token shards; a
    corrupt sidecar is refused by name."""
    from shardcore.errors import CorruptDataError
    from shardcore.tokenized import read_documents

    ts = world["ts"]
    assert read_documents(ts.path).equals(TokenizedSource(ts.path).documents())
    stats = property_stats(ts.path, ["size"])
    assert sum(v["documents"] for v in stats["by_property"]["size"].values()) == 24
    # A copy of it with one sidecar overwritten by other bytes of the same size.
    source, copy = storage.open_store(ts.path), storage.open_store(f"{world['root']}/bad-copy")
    for key in source.list():
        copy.put_bytes(key, source.read_bytes(key))
    sidecar = next(k for k in copy.list() if k.endswith(".docs.parquet"))
    data = bytearray(copy.read_bytes(sidecar))
    data[len(data) // 2] ^= 0xFF
    copy.put_bytes(sidecar, bytes(data))
    with pytest.raises(CorruptDataError, match=sidecar):
        read_documents(copy.url)


def test_the_pool_page_says_what_the_pool_on_the_bucket_holds(world, login, computed):
    pool = world["pool"]
    reader = PoolReader(pool.path)
    manifest = mf.read_manifest(pool.path)
    client = login("viewer")
    resp, body = _page(client, f"/pools/{pool.pk}/")
    assert f"{_thousands(reader.num_records)} × 65 tokens (sequence length 64 + 1)" in body
    assert f"<dd>{_thousands(manifest['num_tokens'])}</dd>" in body
    assert f"<dd>{_thousands(manifest['documents'])}</dd>" in body
    assert resp.context["totals"]["shards"] == len(manifest["shards"])
    # Its sources by their s3:// locations: what the page names the quality's labels by
    # when a pool has several.
    assert [src["path"] for src in manifest["sources"]] == [world["ts"].path]
    assert f'<code id="pool-location">{pool.path}</code>' in body
    assert pool.path.startswith(f"{world['root']}/")
    # Properties come from the documents table on the bucket (its footer, by ranges).
    schema = pq.read_schema(Path(reader.path) / "documents.parquet")  # the checked copy's
    assert resp.context["properties"] == props.names(props.props_type(schema))
    assert {"module", "size"} <= set(resp.context["properties"])

    # The verdict, measured here from the pool's documents: labels by length bin.
    docs = reader.documents
    main = reader.main_documents()
    bins = np.floor(np.log2(np.maximum(docs.column("n_tokens").to_numpy(), 1)))
    labels = np.array([f"{2 ** int(b):,}-{2 ** (int(b) + 1) - 1:,} tokens" for b in bins])
    expected = quality.report(labels[main[main >= 0]], batch_size=256)
    shown = resp.context["quality"]
    assert shown["report"]["windows"] == expected["windows"]
    text = html.unescape(re.search(r'id="quality-verdict"[^>]*><strong>(.*?)</strong>', body)[1])
    assert text.lower() == shown["verdict"]["text"].lower()
    assert "(labels: document length (tokens))" in body

    # Another labelling, measured on demand from the bucket: the property's values.
    # (by a worker the first time it is asked for: the page never reads the bucket)
    resp = computed(client, f"/pools/{pool.pk}/?by=size")
    report = resp.context["quality"]["report"]
    assert report["label"] == "size"
    values = reader.document_values("size")
    by_size = np.array([str(v) for v in values.tolist()])
    assert report["windows"] == quality.report(by_size[main[main >= 0]], batch_size=256)["windows"]


def test_the_version_page_says_what_the_schedule_on_the_bucket_holds(world, login):
    version, copy = world["version"], world["copy"]
    manifest = mf.read_manifest(version.path)
    resp, body = _page(login("viewer"), f"/mixtures/versions/{version.pk}/")
    assert f"<dt>Samples</dt><dd>{_thousands(manifest['num_samples'])}</dd>" in body
    (comp,) = resp.context["components"]
    assert comp.epochs == pytest.approx(manifest["pools"][0]["epochs"])
    assert f"<td>{manifest['pools'][0]['epochs']:.2f}</td>" in body
    bars = resp.context["epochs_figure"]["data"][0]
    assert list(bars["x"]) == [world["pool"].name]
    # Composition over training: the schedule's stages, one pool read in all of them.
    (trace,) = resp.context["heatmap_figure"]["data"]
    assert trace["name"] == world["pool"].name and set(trace["y"]) == {1.0}
    assert len(trace["x"]) == len(manifest["stages"])
    # Quality per stage as its build recorded it, the same as measured here.
    measured = quality.mixture_quality(version.path, by="pool")
    shown = resp.context["quality"]
    named = {world["pool"].path: world["pool"].name}  # the page names pools as the catalog does
    texts = [st["verdict"]["text"] for st in measured["stages"]]
    for path, name in named.items():
        texts = [t.replace(path, name) for t in texts]
    assert [st["verdict"]["text"] for st in shown["stages"]] == texts
    for text in texts:
        assert html.escape(text) in body
    # Where the copy is, and a snippet that streams it from the bucket as shown.
    location = html.unescape(re.search(r'data-field="location">([^<]*)<', body)[1])
    assert location == copy.path and location.startswith(f"{world['root']}/")
    assert f'href="/exports/{copy.pk}/' not in body  # a directory: no download link
    snippet = html.unescape(re.search(r'data-field="snippet">(.*?)</pre>', body, re.S)[1])
    assert f"ShardyardIterableDataset({copy.path!r}" in snippet
    scope = {"RANK": 0, "WORLD_SIZE": 1}
    exec(compile(snippet.replace("num_workers=2", "num_workers=0"), "snippet", "exec"), scope)
    batch = next(iter(scope["loader"]))
    mix = Mixture(version.path)
    for k, row in zip(batch["sample"].tolist(), batch["tokens"].numpy(), strict=True):
        np.testing.assert_array_equal(row, mix.tokens(k))


def test_the_run_page_says_where_it_resumes_and_its_snippet_streams_from_there(world, login):
    run, version = world["run"], world["version"]
    resp, body = _page(login("viewer"), f"/runs/{run.pk}/")
    where = locate_mixture(version.path, sample=STEPS * GBS)
    resume = resp.context["resume"]
    for key in ("stage", "shard", "shard_prefix", "record_in_shard", "token_offset"):
        assert resume[key] == where[key], key
    assert resume["pool"] == world["pool"].name
    assert f"<dd><code>{where['record_in_shard']}</code></dd>" in body
    snippet = html.unescape(re.search(r'<pre id="loader-snippet">(.*?)</pre>', body, re.S)[1])
    assert f"Pool({where['pool_path']!r})" in snippet and where["pool_path"].startswith("s3://")
    assert f"start_record = {where['record']}" in snippet
    # The stream part, pasted: the mixture on the bucket from the run's next sample.
    assert f"path = {version.path!r}" in snippet
    stream = snippet[snippet.index("from shardcore.loader") :]
    scope: dict = {}
    exec(compile(stream, "snippet", "exec"), scope)
    batch = next(iter(scope["loader"]))
    assert batch["sample"].tolist() == list(range(STEPS * GBS, STEPS * GBS + 8))
    mix = Mixture(version.path)
    for k, row in zip(batch["sample"].tolist(), batch["tokens"].numpy(), strict=True):
        np.testing.assert_array_equal(row, mix.tokens(k))
    # The pool part, pasted: the pool on the bucket, at the record the run reads next.
    assert "a pool on object storage opens from a checked local copy" in snippet
    scope = {}
    exec(compile(snippet[: snippet.index("\n# Or stream")], "snippet", "exec"), scope)
    record = scope["pool"].record(scope["start_record"])
    np.testing.assert_array_equal(record, mix.tokens(STEPS * GBS))
    assert scope["token_offset"] == 0
    # Lineage: the flag's documents are first read after the run's position.
    sample = world["flag_sample"]
    assert f"not yet: the first flagged sample is {sample}" in body


def test_the_flag_page_counts_what_the_artifacts_on_the_bucket_hold(world, login):
    flag = world["flag"]
    _resp, body = _page(login("viewer"), f"/audit/flags/{flag.pk}/")
    assert "1 tokenized source, 1 pool, 1 mixture version" in body
    assert "holding 1 flagged document" in body


def test_the_version_quality_by_a_property_is_measured_from_the_bucket(world, login, computed):
    version = world["version"]
    resp = computed(login("viewer"), f"/mixtures/versions/{version.pk}/?by=size")
    body = resp.content.decode()
    assert {"module", "size"} <= set(resp.context["properties"])
    measured = quality.mixture_quality(version.path, by="size")
    shown = resp.context["quality"]
    assert [st["verdict"]["text"] for st in shown["stages"]] == [
        st["verdict"]["text"] for st in measured["stages"]
    ]
    assert "Labels: the size of each sample's main document" in body


def test_the_other_pages_of_the_catalog_answer(world, login):
    from webapp.catalog.selectors import mixture_version_document

    client = login("viewer")
    version = world["version"]
    for url in ("/", "/sources/", "/pools/", "/mixtures/", "/runs/", "/jobs/", "/audit/"):
        _page(client, url)
    _resp, body = _page(client, f"/mixtures/{world['mixture'].pk}/")
    assert _thousands(version.num_samples) in body
    _resp, body = _page(client, f"/mixtures/versions/{version.pk}/diff/{version.pk}/")
    assert world["pool"].name in body
    for job in (world["ts"].job, world["pool"].job, version.job, world["copy"].job):
        _resp, body = _page(client, f"/jobs/{job.pk}/")
        assert "succeeded" in body
    doc = client.get(f"/mixtures/versions/{version.pk}/version.json").json()
    assert doc == json.loads(json.dumps(mixture_version_document(version_id=version.pk)))
    assert doc["components"][0]["pool_path"] == world["pool"].path
    # The audit of the flagged document: the pool on the bucket holds it.
    flag = world["flag"]
    url = f"/audit/?source=code&document_id={flag_documents.page(flag, limit=1)[0]}"
    resp, body = _page(client, url)
    assert [p.pk for p in resp.context["result"]["pools"]] == [world["pool"].pk]
    assert f">{world['pool'].name}</a>; 1 mixture version; 1 run." in body and "In 1 pool: " in body
    # The builder offers the pool, and predicts from the catalog's records of it.
    editor = login("editor")
    assert world["pool"].name in _page(editor, "/mixtures/new/")[1]
    draft = {"name": "m2", "tokens": 64 * 100,
             "rows": [{"stage": "main", "pool": world["pool"].pk, "weight": 1}]}  # fmt: skip
    predicted = editor.post("/mixtures/new/predict.json", draft, "application/json").json()
    assert predicted["error"] is None and predicted["rows"][0]["samples"] == 100


def test_downloads_answer_the_objects_bytes(world, login):
    """An export an editor writes from the version page lands on the bucket and downloads
    as its object's bytes (streamed through the store, with its length and name), from its
    own link and the version's."""
    from shardcore.export import export as render
    from webapp.catalog.models import Export

    version = world["version"]
    resp = login("editor").post(f"/mixtures/versions/{version.pk}/export/json/")
    assert resp.status_code == 200
    written = b"".join(resp.streaming_content)
    export = Export.objects.get(version=version, format="json")
    assert export.path.startswith(f"{version.path}/exports/")
    parent, _, name = export.path.rpartition("/")
    stored = storage.open_store(parent)
    assert written == stored.read_bytes(name) == render(version.path, "json").encode()

    client = login("viewer")
    resp = client.get(f"/exports/{export.pk}/download/")
    assert resp.status_code == 200
    assert b"".join(resp.streaming_content) == written
    assert resp["Content-Length"] == str(len(written))
    assert f'filename="{name}"' in resp["Content-Disposition"]
    assert resp["Content-Type"] == "application/json"
    resp = client.get(f"/mixtures/versions/{version.pk}/export/json/")
    assert resp.status_code == 200
    assert b"".join(resp.streaming_content) == written  # the recorded object
    assert f'filename="m-v1-{name}"' in resp["Content-Disposition"]
    body = client.get(f"/mixtures/versions/{version.pk}/").content.decode()
    assert f'href="/exports/{export.pk}/download/"' in body

    # The materialized copy is a prefix of shards, not a file: no download.
    assert client.get(f"/exports/{world['copy'].pk}/download/").status_code == 404
    # An export whose object is gone is not found, not a server error.
    stored.delete(name)
    assert client.get(f"/exports/{export.pk}/download/").status_code == 404
    export.delete()


def test_the_api_reads_the_same_artifacts(world, users):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    api = APIClient()
    token = Token.objects.get_or_create(user=users["viewer"])[0].key
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    pool = api.get(f"/api/pools/{world['pool'].pk}/").json()
    assert pool["path"] == world["pool"].path
    assert pool["num_records"] == PoolReader(world["pool"].path).num_records
    where = locate_mixture(world["version"].path, sample=STEPS * GBS)
    resume = api.get(f"/api/runs/{world['run'].pk}/resume/").json()
    assert resume["pool_path"] == where["pool_path"]
    assert resume["record"] == where["record"]
    assert resume["shard_path"] == storage.join(where["pool_path"], where["shard_prefix"])
    # Lineage: when the run first reads the flagged document (not yet, at a known sample).
    (row,) = api.get(f"/api/runs/{world['run'].pk}/flags/").json()
    assert (row["first_sample"], row["read"]) == (world["flag_sample"], False)


def test_the_version_page_offers_only_the_configs_a_version_on_the_bucket_has(world, login):
    """Megatron-LM, OLMo-core and nanotron configs name local shard files and are refused
    for a version on object storage: the page offers JSON only, and says why."""
    version = world["version"]
    for role in ("viewer", "editor"):
        _, body = _page(login(role), f"/mixtures/versions/{version.pk}/")
        configs = re.search(r'<p id="trainer-configs">(.*?)</p>', body, re.S)[1]
        assert f"/mixtures/versions/{version.pk}/export/json/" in configs
        for fmt in ("megatron", "olmo", "nanotron"):
            assert f"/export/{fmt}/" not in body
        assert "object storage" in configs

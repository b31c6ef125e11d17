"""The catalog with its data root on object storage (a bucket of moto's S3 server), driven
through the JSON API as a user drives it, on real Celery workers: a source of real text is
tokenized, pooled and mixed, and every artifact lands on the bucket (its manifest and its
shards), recorded by its s3:// URL, with the fingerprints of the same build on a local data
root and nothing written under the local SHARDYARD_HOME."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from shardcore.manifest import MANIFEST_NAME
from tests.integration.dashboard_fixtures import users  # noqa: F401
from tests.integration.test_jobs_workers import stdlib_docs, write_jsonl
from tests.support.services import wait_for

pytestmark = pytest.mark.services

SEQ = 128


@pytest.fixture
def editor(users):  # noqa: F811 - the fixture imported above
    c = APIClient()
    token = Token.objects.get_or_create(user=users["editor"])[0].key
    c.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return c


@pytest.fixture
def source_root(tmp_path, settings, monkeypatch):
    """A local source root (apart from SHARDYARD_HOME) holding two files of real text."""
    root = tmp_path / "sources"
    write_jsonl(root / "code" / "a.jsonl", stdlib_docs(25))
    write_jsonl(root / "code" / "b.jsonl", stdlib_docs(20, offset=40))
    settings.SOURCE_ROOTS = [root]
    monkeypatch.setenv("SHARDYARD_SOURCE_ROOTS", str(root))
    return root


def _ok(resp, status: int) -> dict:
    assert resp.status_code == status, resp.content
    return resp.json()


def _job_done(api: APIClient, job_id: int) -> dict:
    def done():
        job = _ok(api.get(f"/api/jobs/{job_id}/"), 200)
        return job if job["state"] in ("succeeded", "failed", "cancelled") else None

    job = wait_for(done, timeout=240, interval=0.3, what=f"job {job_id} to finish")
    assert job["state"] == "succeeded", job["error"] + job["log_tail"]
    return job


def _build(api: APIClient, root, tag: str) -> dict:
    """Source, tokenized source and pool (with a validation slice) through the API."""
    src = _ok(api.post("/api/sources/", {"name": f"code-{tag}", "uri": str(root / "code")}), 201)
    resp = api.post(f"/api/sources/{src['id']}/tokenize/", {}, format="json")
    ts = _ok(resp, 202)
    assert resp["Location"].endswith(f"/api/jobs/{ts['job']}/")
    _job_done(api, ts["job"])
    pool = _ok(
        api.post("/api/pools/", {"name": f"p-{tag}", "tokenized_ids": [ts["id"]],
                                 "seq_len": SEQ, "val_fraction": 0.2, "seed": 3}, format="json"),
        201,
    )  # fmt: skip
    _job_done(api, pool["job"])
    pool = _ok(api.get(f"/api/pools/{pool['id']}/"), 200)
    val = _ok(api.get("/api/pools/"), 200)["results"]
    val = next((p for p in val if p["train_pool"] == pool["id"]), None)
    return {"source": src, "tokenized": ts["id"], "pool": pool, "val": val}


def _keys(moto_server, url: str) -> set[str]:
    """The keys below the s3:// prefix ``url``, relative to it."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    client, out, token = moto_server.client(), set(), None
    while True:
        page = client.list_objects_v2(
            Bucket=bucket, Prefix=f"{prefix}/", **({"ContinuationToken": token} if token else {})
        )
        out |= {o["Key"][len(prefix) + 1 :] for o in page.get("Contents", [])}
        if not page.get("IsTruncated"):
            return out
        token = page["NextContinuationToken"]


def _on_bucket(moto_server, root: str, row: dict) -> set[str]:
    """Asserts the artifact of catalog row ``row`` is on the bucket below ``root``, whole;
    returns its keys."""
    from shardcore import storage

    assert row["status"] == "ready", row
    assert row["path"].startswith(f"{root}/"), row["path"]
    assert row["manifest_path"] == f"{row['path']}/{MANIFEST_NAME}"
    keys = _keys(moto_server, row["path"])
    manifest = storage.read_manifest(row["path"])
    assert MANIFEST_NAME in keys
    assert {f["path"] for f in manifest["files"]} <= keys
    assert any(k.endswith(".bin") for k in keys) and any(k.endswith(".idx") for k in keys)
    assert manifest["fingerprint"] == row["fingerprint"]
    return keys


def _files_below(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def test_it_builds_every_artifact_on_an_s3_data_root(
    postgres, redis_url, celery_workers, s3_data_root, moto_server, source_root, editor,
    settings, tmp_path,
):  # fmt: skip
    from webapp.catalog.models import Shard, TokenizedSource

    home = tmp_path / "home"
    celery_workers("left"), celery_workers("right")

    s3 = _build(editor, source_root, "s3")
    ts = TokenizedSource.objects.get(pk=s3["tokenized"])
    fields = ("status", "path", "manifest_path", "fingerprint")
    _on_bucket(moto_server, s3_data_root, {k: getattr(ts, k) for k in fields})
    assert ts.path.startswith(f"{s3_data_root}/tokenized/")
    assert ts.shards.count() >= 1
    assert all(s.prefix.startswith(f"{ts.path}/") for s in ts.shards.all())
    _on_bucket(moto_server, s3_data_root, s3["pool"])
    assert s3["pool"]["path"].startswith(f"{s3_data_root}/pools/")
    assert s3["val"] is not None, "no document held out"
    _on_bucket(moto_server, s3_data_root, s3["val"])
    assert s3["val"]["path"].startswith(f"{s3['pool']['path']}/")
    for shard in Shard.objects.filter(pool_id=s3["pool"]["id"]):
        assert shard.prefix.startswith(f"{s3['pool']['path']}/")
    # The shuffle quality is measured on the bucket's pool, as on a local one.
    assert s3["pool"]["params"]["quality"], s3["pool"]["params"]

    # The same inputs on a local data root: the same fingerprints.
    local = tmp_path / "local-data"
    local.mkdir()
    settings.DATA_ROOT = local
    here = _build(editor, source_root, "local")
    assert here["pool"]["path"].startswith(f"{local}/")
    assert TokenizedSource.objects.get(pk=here["tokenized"]).fingerprint == ts.fingerprint
    for kind in ("pool", "val"):
        assert here[kind]["fingerprint"] == s3[kind]["fingerprint"]
        assert here[kind]["num_records"] == s3[kind]["num_records"]
    assert here["pool"]["params"]["quality"] == s3["pool"]["params"]["quality"]

    # Nothing artifact-like under the local home: it holds what stays local, no data.
    assert not home.exists() or _files_below(home) == [], _files_below(home)

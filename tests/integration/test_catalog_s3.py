"""The catalog with its data root on object storage (a bucket of moto's S3 server), driven
through the JSON API as a user drives it, on real Celery workers: a source of real text is
tokenized, pooled and mixed, and every artifact lands on the bucket (its manifest and its
shards), recorded by its s3:// URL, with the fingerprints of the same build on a local data
root and nothing written under the local SHARDYARD_HOME."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from shardcore import manifest as mf
from shardcore.manifest import MANIFEST_NAME
from tests.integration.dashboard_fixtures import users  # noqa: F401
from tests.integration.test_jobs_workers import stdlib_docs, write_jsonl
from tests.support.services import ROOT, manage, wait_for
from webapp.jobs.models import Job

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
    """A local source root (apart from SHARDYARD_HOME) with two sources of real text."""
    root = tmp_path / "sources"
    write_jsonl(root / "prose" / "a.jsonl", stdlib_docs(20))
    write_jsonl(root / "prose" / "b.jsonl", stdlib_docs(15, offset=20))
    write_jsonl(root / "code" / "c.jsonl", stdlib_docs(25, offset=40))
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
    """Two sources tokenized and pooled (prose with a validation slice), a mixture version
    of both pools and its materialized copy, all through the API."""
    out: dict = {"tokenized": {}, "pools": {}}
    for name in ("prose", "code"):
        src = _ok(
            api.post("/api/sources/", {"name": f"{name}-{tag}", "uri": str(root / name)}), 201
        )
        resp = api.post(f"/api/sources/{src['id']}/tokenize/", {}, format="json")
        ts = _ok(resp, 202)
        assert ts["status"] == "building"
        assert resp["Location"].endswith(f"/api/jobs/{ts['job']}/")
        _job_done(api, ts["job"])
        out["tokenized"][name] = ts["id"]
        out[f"{name}_source"] = src["id"]
    for name, val in (("prose", 0.2), ("code", 0.0)):
        pool = _ok(
            api.post("/api/pools/", {"name": f"{name}-{tag}", "seq_len": SEQ, "val_fraction": val,
                                     "tokenized_ids": [out["tokenized"][name]], "seed": 3},
                     format="json"),
            201,
        )  # fmt: skip
        job = pool["job"]
        while True:  # a pool planned by a worker: its planning job, then its own
            _job_done(api, job)
            pool = _ok(api.get(f"/api/pools/{pool['id']}/"), 200)
            if pool["job"] == job:
                break
            job = pool["job"]
        out["pools"][name] = pool
    pools = _ok(api.get("/api/pools/?limit=500"), 200)["results"]
    out["val"] = next((p for p in pools if p["train_pool"] == out["pools"]["prose"]["id"]), None)

    draft = {"name": f"blend-{tag}", "tokens": 200_000, "seed": 1,
             "rows": [{"pool": out["pools"]["prose"]["id"], "weight": 0.7},
                      {"pool": out["pools"]["code"]["id"], "weight": 0.3}]}  # fmt: skip
    resp = api.post("/api/mixtures/", draft, format="json")
    version = _ok(resp, 202)
    assert version["status"] == "building"

    def ready():
        v = _ok(api.get(resp["Location"]), 200)
        assert v["status"] != "failed", _ok(api.get(f"/api/jobs/{v['job']}/"), 200)["error"]
        return v if v["status"] == "ready" else None

    out["version"] = wait_for(ready, timeout=240, interval=0.3, what="the version")
    resp = api.post(
        f"/api/mixture-versions/{version['id']}/materialize/", {"shard_bytes": 64 << 10}, "json"
    )
    job = _ok(resp, 202)
    assert resp["Location"].endswith(f"/api/jobs/{job['id']}/")
    _job_done(api, job["id"])
    exports = _ok(api.get(f"/api/mixture-versions/{version['id']}/exports/"), 200)["results"]
    out["copy"] = next(e for e in exports if e["format"] == "materialized")
    return out


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

    assert row["status"] == "ready", row
    assert row["path"].startswith(f"{root}/"), row["path"]
    assert row["manifest_path"] == f"{row['path']}/{MANIFEST_NAME}"
    keys = _keys(moto_server, row["path"])
    manifest = mf.read_manifest(row["path"])
    assert MANIFEST_NAME in keys
    assert {f["path"] for f in manifest["files"]} <= keys
    assert any(k.endswith(".bin") for k in keys) and any(k.endswith(".idx") for k in keys)
    assert manifest["fingerprint"] == row["fingerprint"]
    return keys


def _checksums(manifest: dict) -> dict[str, str]:
    return {f["path"]: f["xxh3"] for f in manifest["files"]}


def _files_below(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def _stream(url: str, cache, *, resume_at: int | None = None) -> list[bytes]:
    """Every sample of the artifact at ``url`` through ``shardcore.loader``; with
    ``resume_at``, read that many, save the state, and read the rest in a new loader
    resumed from it."""
    from shardcore.loader import ShardyardIterableDataset

    def tokens(items) -> list[bytes]:
        return [item["tokens"].numpy().tobytes() for item in items]

    first = ShardyardIterableDataset(url, cache_dir=cache)
    if resume_at is None:
        return tokens(first)
    head = tokens(itertools.islice(iter(first), resume_at))
    state = first.state_dict()
    assert state["next_sample"] == resume_at
    again = ShardyardIterableDataset(url, cache_dir=cache)
    again.load_state_dict(state)
    return head + tokens(again)


def test_it_builds_streams_and_scrubs_every_artifact_on_an_s3_data_root(
    postgres, redis_url, celery_workers, s3_data_root, moto_server, source_root, editor,
    settings, tmp_path,
):  # fmt: skip
    from shardcore.mixture import Mixture
    from webapp.catalog.models import Corruption, Export, MixtureVersion, TokenizedSource

    home = tmp_path / "home"
    celery_workers("left"), celery_workers("right")

    # The bucket's pools are planned by a worker (the request plans the local ones): the
    # plan saved on the bucket and read back builds the same pools.
    settings.PLAN_INLINE_DOCUMENTS = 0
    s3 = _build(editor, source_root, "s3")
    settings.PLAN_INLINE_DOCUMENTS = 1_000_000
    assert Job.objects.filter(kind="planning", state="succeeded").count() == 2
    fields = ("status", "path", "manifest_path", "fingerprint")
    for pk in s3["tokenized"].values():
        ts = TokenizedSource.objects.get(pk=pk)
        assert ts.path.startswith(f"{s3_data_root}/tokenized/")
        _on_bucket(moto_server, s3_data_root, {k: getattr(ts, k) for k in fields})
        assert ts.shards.count() >= 1
        assert all(sh.prefix.startswith(f"{ts.path}/") for sh in ts.shards.all())
    for pool in s3["pools"].values():
        assert pool["path"].startswith(f"{s3_data_root}/pools/")
        keys = _on_bucket(moto_server, s3_data_root, pool)
        assert not [k for k in keys if k.startswith("_pass1/")], "the scratch stayed"
        # The shuffle quality is measured on the bucket's pool, as on a local one.
        assert pool["params"]["quality"], pool["params"]
    assert s3["val"] is not None, "no document held out"
    _on_bucket(moto_server, s3_data_root, s3["val"])
    assert s3["val"]["path"].startswith(f"{s3['pools']['prose']['path']}/")
    version = s3["version"]
    assert version["path"].startswith(f"{s3_data_root}/mixtures/")
    assert MANIFEST_NAME in _keys(moto_server, version["path"])
    assert version["manifest_path"] == f"{version['path']}/{MANIFEST_NAME}"
    mix = Mixture(version["path"])
    assert version["fingerprint"] == mix.manifest["fingerprint"]
    assert version["num_samples"] == mix.num_samples == -(-200_000 // SEQ)
    by_pool = {c["pool"]: c["epochs"] for c in version["components"]}
    for p in mix.pools:
        pool = next(q for q in s3["pools"].values() if q["path"] == p["path"])
        assert by_pool[pool["id"]] == pytest.approx(p["epochs"])
    copy = s3["copy"]
    assert copy["path"].startswith(f"{version['path']}/materialized/")
    keys = _on_bucket(moto_server, s3_data_root, copy)
    assert len([k for k in keys if k.endswith(".bin")]) > 2
    assert Export.objects.get(pk=copy["id"]).shards.count() > 2

    # The same inputs on a local data root: the same fingerprints.
    local = tmp_path / "local-data"
    local.mkdir()
    settings.DATA_ROOT = local
    here = _build(editor, source_root, "local")
    settings.DATA_ROOT = s3_data_root
    assert here["version"]["path"].startswith(f"{local}/")
    for name in ("prose", "code"):
        pair = TokenizedSource.objects.filter(
            pk__in=[s3["tokenized"][name], here["tokenized"][name]]
        )
        assert len({ts.fingerprint for ts in pair}) == 1
        assert here["pools"][name]["fingerprint"] == s3["pools"][name]["fingerprint"]
        assert here["pools"][name]["params"]["quality"] == s3["pools"][name]["params"]["quality"]
    assert here["val"]["fingerprint"] == s3["val"]["fingerprint"]
    # A version's fingerprint covers its spec, which names its pools by location (so does
    # its copy's): the two builds hold the same bytes from pools of the same fingerprints.
    for kind in ("version", "copy"):
        ours, theirs = (mf.read_manifest(b[kind]["path"]) for b in (s3, here))
        assert _checksums(ours) == _checksums(theirs), kind
        assert ours["num_tokens"] == theirs["num_tokens"] > 0
    ours, theirs = (mf.read_manifest(b["version"]["path"]) for b in (s3, here))
    assert ours["parents"] == theirs["parents"]
    assert ours["stages"] == theirs["stages"]
    # Nothing artifact-like under the local home: it holds what stays local, no data.
    assert not home.exists() or _files_below(home) == [], _files_below(home)
    # Nor a URL taken for a relative path, where the web process and the workers run.
    assert not (ROOT / "s3:").exists() and not (Path.cwd() / "s3:").exists()

    # Streamed from the bucket, resumed in the middle: the samples of a straight read,
    # which are the local build's, and the materialized copy holds them in that order.
    cache = tmp_path / "stream"
    straight = _stream(here["version"]["path"], cache)
    assert len(straight) == version["num_samples"]
    assert _stream(version["path"], cache, resume_at=len(straight) // 2 + 7) == straight
    assert _stream(copy["path"], cache, resume_at=len(straight) // 3) == straight

    # A run on the bucket's version resumes where the schedule says, in the pool's shard.
    run = _ok(editor.post("/api/runs/", {"name": "r-s3", "mixture_version": version["id"]},
                          format="json"), 201)  # fmt: skip
    _ok(editor.post(f"/api/runs/{run['id']}/progress/", {"step": 5, "consumed_samples": 700},
                    format="json"), 201)  # fmt: skip
    where = _ok(editor.get(f"/api/runs/{run['id']}/resume/"), 200)
    assert where["sample"] == 700
    assert where["pool_id"] in {p["id"] for p in s3["pools"].values()}
    assert where["shard_path"] == f"{where['pool_path']}/{where['shard_prefix']}"
    assert where["shard_path"].startswith(f"{s3_data_root}/pools/")

    # Trainer configs name local shard files: refused with what to do, nothing written.
    exports = f"/api/mixture-versions/{version['id']}/exports/"
    for fmt in ("megatron", "olmo-core", "nanotron"):
        resp = editor.post(exports, {"format": fmt}, format="json")
        assert resp.status_code == 400, resp.content
        detail = resp.json()["detail"]
        assert f"mixture version blend-s3 v{version['number']} is on object storage" in detail
        assert "materialize" in detail and "local copy" in detail, detail
    # The JSON description is written beside the version, on the bucket, once.
    plain = _ok(editor.post(exports, {"format": "json"}, format="json"), 201)
    assert plain["path"] == f"{version['path']}/exports/mixture.json"
    assert _ok(editor.post(exports, {"format": "json"}, format="json"), 201)["id"] == plain["id"]
    assert _keys(moto_server, f"{version['path']}/exports") == {"mixture.json"}
    bucket, _, key = plain["path"].removeprefix("s3://").partition("/")
    body = moto_server.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    assert plain["num_bytes"] == len(body)
    assert json.loads(body)["num_samples"] == version["num_samples"]
    listed = _ok(editor.get(exports), 200)["results"]
    assert [e["format"] for e in listed] == ["materialized", "json"]
    # The operator's command says the same.
    refused = manage("catalog", "export", str(version["id"]), "olmo")
    assert refused.returncode == 1
    assert "is on object storage" in refused.stderr and "local copy" in refused.stderr

    # The run switches to new weights: a version continuing it, built on the bucket.
    switched = _ok(editor.post(f"/api/runs/{run['id']}/switch/", {"weights": [
        {"pool": s3["pools"]["prose"]["id"], "weight": 0.2},
        {"pool": s3["pools"]["code"]["id"], "weight": 0.8}]}, format="json"), 201)  # fmt: skip
    new = MixtureVersion.objects.get(pk=switched["version"])
    if new.job_id:
        _job_done(editor, new.job_id)
    new.refresh_from_db()
    assert new.status == "ready" and new.path.startswith(f"{s3_data_root}/mixtures/")
    assert MANIFEST_NAME in _keys(moto_server, new.path)

    # A flag on the code source taints its pool, both versions, the copy and the run.
    flag = _ok(editor.post("/api/flags/", {"source": s3["code_source"], "reason": "pii"},
                           format="json"), 201)  # fmt: skip
    # What it taints is computed by a worker: the answer says so until it is stored.
    wait_for(lambda: _ok(editor.get(f"/api/flags/{flag['id']}/taints/"), 200)["taint"] == {},
             timeout=120, what="the flag's taint")  # fmt: skip
    taints = _ok(editor.get(f"/api/flags/{flag['id']}/taints/"), 200)["taints"]
    labels = " | ".join(t["label"] for t in taints)
    assert "materialized copy" in labels and "r-s3" in labels, labels

    # A version never builds over objects already below its prefix (someone else's, or
    # a failed save's): the draft is refused and they stay as they were.
    bucket, _, prefix = s3_data_root.removeprefix("s3://").partition("/")
    squat = f"{prefix}/mixtures/blend-s3/v{new.number + 1}/keep.txt"
    moto_server.client().put_object(Bucket=bucket, Key=squat, Body=b"not yours")
    draft = {"name": "blend-s3", "tokens": 100_000,
             "rows": [{"pool": p["id"], "weight": 1.0} for p in s3["pools"].values()]}  # fmt: skip
    refused = editor.post("/api/mixtures/", draft, format="json")
    assert refused.status_code == 400, refused.content
    assert "exists already" in refused.json()["detail"]
    kept = moto_server.client().get_object(Bucket=bucket, Key=squat)["Body"].read()
    assert kept == b"not yours"
    assert MixtureVersion.objects.filter(mixture__name="blend-s3").count() == 2

    # The scrub verifies the bucket's artifacts; one overwritten shard object is named.
    bucket, _, prefix = s3["pools"]["code"]["path"].removeprefix("s3://").partition("/")
    shard = sorted(
        k for k in _keys(moto_server, s3["pools"]["code"]["path"]) if k.endswith(".bin")
    )[0]
    client = moto_server.client()
    body = client.get_object(Bucket=bucket, Key=f"{prefix}/{shard}")["Body"].read()
    client.put_object(Bucket=bucket, Key=f"{prefix}/{shard}", Body=bytes(b ^ 0xFF for b in body))
    done = manage("catalog", "scrub")
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.split("job ")[1].split()[0])
    _job_done(editor, job_id)
    bad = Corruption.objects.get(cause=None)
    assert bad.pool_id == s3["pools"]["code"]["id"], bad.problem
    assert shard in bad.problem, bad.problem
    # Everything else on the bucket (and the local build) verified intact.
    assert not Corruption.objects.filter(cause=None).exclude(pk=bad.pk).exists()


def test_it_keeps_artifact_locations_under_an_s3_data_root(settings):
    """Locations below an s3:// data root are built from single validated components and
    checked to stay below its prefix (no sibling prefix, no empty, '.' or '..' segment)."""
    from webapp.catalog import guards

    settings.DATA_ROOT = "s3://bucket/data"
    assert guards.data_root() == "s3://bucket/data"
    assert guards.data_path("pools", "p-1") == "s3://bucket/data/pools/p-1"
    for part in ("..", ".", "a/b", "/abs", "", "a\\b"):
        with pytest.raises(guards.GuardError):
            guards.data_path("pools", part)
    assert guards.under_data_root("s3://bucket/data") == "s3://bucket/data"
    for outside in ("s3://bucket/data-other/x", "s3://bucket/data/../x", "s3://bucket/data//x",
                    "s3://other/data/x", "s3://bucket/dat", "/tmp/data/x"):  # fmt: skip
        with pytest.raises(guards.GuardError):
            guards.under_data_root(outside)

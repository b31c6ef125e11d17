"""Item: one URI normalization path. ``S3://`` (upper case) once passed the roots check as
remote but was read as a local path relative to the working directory; an s3:// location
without credentials answered 500 and left a Source row behind. And: any editor registered
any bucket the service's credentials read; s3:// sources now come only from below the
``s3://bucket/prefix`` roots of SHARDYARD_SOURCE_ROOTS (none by default)."""

from __future__ import annotations

import pytest

from webapp.catalog.models import Source


@pytest.fixture
def s3_roots(roots, settings):
    """The local root and two s3:// roots."""
    settings.SOURCE_ROOTS = [roots, "s3://corpus", "s3://bucket/prefix"]
    return settings.SOURCE_ROOTS


@pytest.fixture
def no_aws(monkeypatch, tmp_path):
    """No credentials anywhere, and an endpoint nobody listens on: nothing leaves the box."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.mark.parametrize("uri", ["S3://corpus/web/", "s3://corpus/web", "S3://corpus//web//"])
def test_it_stores_every_spelling_of_s3_in_one_canonical_form(api, s3_roots, uri):
    resp = api("editor").post(
        "/api/sources/", {"name": "remote", "uri": uri, "scan": False}, format="json"
    )
    assert resp.status_code == 201, resp.content
    source = Source.objects.get(name="remote")
    assert source.uri.startswith("s3://corpus/")
    assert source.is_remote


def test_it_never_reads_an_upper_case_s3_uri_as_a_local_path(api, s3_roots, no_aws, tmp_path,
                                                             monkeypatch):  # fmt: skip
    # The attack: a directory "S3:" in the server's working directory, outside every root.
    outside = tmp_path / "cwd"
    (outside / "S3:" / "corpus").mkdir(parents=True)
    (outside / "S3:" / "corpus" / "secret.jsonl").write_text('{"text": "private"}\n')
    monkeypatch.chdir(outside)

    resp = api("editor").post("/api/sources/", {"name": "up", "uri": "S3://corpus"}, format="json")

    assert resp.status_code == 400
    assert "cannot list files" in resp.json()["detail"]
    assert not Source.objects.exists()


def test_it_refuses_s3_without_credentials_with_a_400_and_no_row(api, s3_roots, no_aws):
    resp = api("editor").post(
        "/api/sources/", {"name": "nocreds", "uri": "s3://bucket/prefix"}, format="json"
    )
    assert resp.status_code == 400
    assert resp.json()["detail"].startswith("s3://bucket/prefix: cannot list files")
    assert not Source.objects.exists()


def test_it_refuses_s3_without_credentials_from_the_page(page, roots, no_aws):
    resp = page("editor").post(
        "/sources/register/", {"name": "nocreds", "uri": "S3://bucket/p", "text_field": "text"}
    )
    assert resp.status_code == 400  # the form again, with the input and the reason
    assert 'value="nocreds"' in resp.content.decode()
    assert not Source.objects.exists()


@pytest.mark.parametrize(
    "uri, message",
    [
        ("FILE:///etc", "outside the source roots"),
        ("File://otherhost/data", "names no host"),
        ("Ftp://example.org/x.jsonl", "is not supported"),
        ("s3://bucket/a/../b", "'..' is not allowed"),
        ("S3:///nobucket", "needs a bucket"),
        ("/data/x\r\n.jsonl", "control character"),
    ],
)
def test_it_checks_the_roots_on_every_branch(api, roots, uri, message):
    resp = api("editor").post("/api/sources/", {"name": "x", "uri": uri}, format="json")
    assert resp.status_code == 400
    assert message in resp.json()["detail"]
    assert not Source.objects.exists()


@pytest.mark.parametrize(
    "uri",
    ["s3://private/secrets", "s3://corpusx/web", "s3://bucket/prefixed", "s3://bucket",
     "S3://Bucket/prefix/a"],
)  # fmt: skip
def test_an_s3_source_outside_every_s3_root_is_refused(api, page, s3_roots, no_aws, uri):
    resp = api("editor").post("/api/sources/", {"name": "steal", "uri": uri}, format="json")
    assert resp.status_code == 400
    detail = resp.json()["detail"]
    assert detail.startswith("uri: ") and "outside the s3:// source roots" in detail
    assert "s3://corpus, s3://bucket/prefix" in detail and "SHARDYARD_SOURCE_ROOTS" in detail
    assert not Source.objects.exists()
    form = page("editor").post("/sources/register/", {"name": "steal", "uri": uri,
                                                      "text_field": "text"})  # fmt: skip
    assert form.status_code == 400
    assert "outside the s3:// source roots" in form.content.decode()
    assert not Source.objects.exists()


def test_no_s3_source_is_allowed_unless_a_root_covers_it(api, roots, no_aws):
    """The default roots are local only: the service's credentials may read buckets that
    editors must not register."""
    resp = api("editor").post("/api/sources/",
                              {"name": "any", "uri": "s3://corpus/web", "scan": False},
                              format="json")  # fmt: skip
    assert resp.status_code == 400
    assert "outside the s3:// source roots (none configured)" in resp.json()["detail"]
    assert not Source.objects.exists()


def test_a_source_below_an_s3_root_is_accepted(api, s3_roots):
    for name, uri in (("web", "s3://corpus/web"), ("pre", "s3://bucket/prefix/a/b")):
        resp = api("editor").post("/api/sources/", {"name": name, "uri": uri, "scan": False},
                                  format="json")  # fmt: skip
        assert resp.status_code == 201, resp.content


def test_the_roots_variable_takes_directories_and_s3_locations(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import django, os; os.environ['DJANGO_SETTINGS_MODULE']='webapp.settings'; "
            "django.setup(); from django.conf import settings; "
            "print([str(r) for r in settings.SOURCE_ROOTS])")  # fmt: skip
    root = Path(__file__).resolve().parents[2]

    def roots(value):
        env = {**os.environ, "SHARDYARD_DATA": str(tmp_path), "SHARDYARD_SOURCE_ROOTS": value}
        return subprocess.run([sys.executable, "-c", code], cwd=root, env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    out = roots(f"{tmp_path}:S3://corpora/raw/:s3://other")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([str(tmp_path), "s3://corpora/raw", "s3://other"])
    for bad in ("s3://", "s3:///x", "s3://b/../c", "gs://b/p", "relative/dir"):
        out = roots(f"{tmp_path}:{bad}")
        assert out.returncode != 0, bad
        assert "SHARDYARD_SOURCE_ROOTS" in out.stderr, out.stderr[-300:]

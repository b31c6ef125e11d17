"""Item: one URI normalization path. ``S3://`` (upper case) once passed the roots check as
remote but was read as a local path relative to the working directory; an s3:// location
without credentials answered 500 and left a Source row behind."""

from __future__ import annotations

import pytest

from webapp.catalog.models import Source


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
def test_it_stores_every_spelling_of_s3_in_one_canonical_form(api, roots, uri):
    resp = api("editor").post(
        "/api/sources/", {"name": "remote", "uri": uri, "scan": False}, format="json"
    )
    assert resp.status_code == 201, resp.content
    source = Source.objects.get(name="remote")
    assert source.uri.startswith("s3://corpus/")
    assert source.is_remote


def test_it_never_reads_an_upper_case_s3_uri_as_a_local_path(api, roots, no_aws, tmp_path,
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


def test_it_refuses_s3_without_credentials_with_a_400_and_no_row(api, roots, no_aws):
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

# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""The API's refusals of ``POST /api/pools/register/`` and ``/api/mixture-versions/register/``:
what is outside the data root, not an artifact, not the kind asked, not what its manifest
lists, or built from inputs the catalog does not hold; each a 400 that says why."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from shardcore.demo import build_demo_corpus
from tests.integration.dashboard_fixtures import users  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(users):
    c = APIClient()
    key = Token.objects.get_or_create(user=users["editor"])[0].key
    c.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return c


@pytest.fixture
def built(tmp_path_factory):
    """A tokenized source and a pool of it, built by the command line (once)."""
    root = tmp_path_factory.mktemp("register-api")
    corpus = root / "corpus"
    build_demo_corpus(corpus, max_bytes_per_source=20_000)
    for args in (
        ["tokenize", str(corpus), "--out", str(root / "tok"), "--quiet"],
        ["pool", str(root / "tok"), "--out", str(root / "pool"), "--seq-len", "64", "--quiet"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "shardcore.cli", *args], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    return root


def _refused(api, url: str, body: dict) -> str:
    answer = api.post(url, body, format="json")
    assert answer.status_code == 400, answer.content
    return str(answer.json())


def test_it_refuses_what_it_cannot_record(api, built, settings, tmp_path):
    settings.DATA_ROOT = built
    url = "/api/pools/register/"
    assert "outside the data root" in _refused(api, url, {"path": str(tmp_path)})
    assert "control characters" in _refused(api, url, {"path": f"{built}/pool\x01"})
    assert "Null characters are not allowed" in _refused(api, url, {"path": f"{built}/\x00"})
    assert "no finished artifact" in _refused(api, url, {"path": str(built / "corpus")})
    assert "holds a tokenized artifact, not a pool" in _refused(
        api, url, {"path": str(built / "tok")}
    )
    assert "not a mixture" in _refused(
        api, "/api/mixture-versions/register/", {"path": str(built / "pool")}
    )
    # Built from a tokenized source the catalog does not hold: no lineage, refused.
    assert "the catalog has no ready tokenized source with fingerprint" in _refused(
        api, url, {"path": str(built / "pool")}
    )
    # A file that is not what the manifest says.
    shard = next((built / "pool").rglob("*.bin"))
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.truncate(size - 1)
    try:
        detail = _refused(api, url, {"path": str(built / "pool")})
    finally:
        with open(shard, "r+b") as f:
            f.truncate(size)
    rel = shard.relative_to(built / "pool").as_posix()
    assert f"does not match its manifest: {rel} has {size - 1:,} bytes" in detail
    assert os.path.exists(shard)

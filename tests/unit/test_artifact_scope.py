"""A web request or a job's recorder that reads an artifact on object storage holds its
checked local copy only while it runs: afterwards the copy may be evicted."""

from __future__ import annotations

import fcntl
import os

from django.test import RequestFactory

from shardcore.storage import artifact_cache
from tests.unit.test_storage import _blob
from webapp.dashboard.middleware import ArtifactScopeMiddleware


def _held(copy_dir: str) -> bool:
    """Whether some open file holds the copy's lock (an exclusive try fails)."""
    fd = os.open(f"{copy_dir}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_request_holds_the_copies_it_reads_only_while_it_runs(s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    url = _blob(s3_bucket, tmp_path, "page")
    seen = {}

    def view(request):
        seen["copy"] = artifact_cache.local_artifact(url)
        seen["held inside"] = _held(seen["copy"])
        return "response"

    assert ArtifactScopeMiddleware(view)(RequestFactory().get("/pools/1/")) == "response"
    assert seen["held inside"] is True
    assert _held(seen["copy"]) is False
    # Without the scope, a long-lived process would keep it from eviction until it exits.
    kept = artifact_cache.local_artifact(_blob(s3_bucket, tmp_path, "kept"))
    assert _held(kept) is True

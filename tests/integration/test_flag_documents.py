"""A flag's document indices live in compressed runs beside its row (``FlagDocuments``), not
one JSON list on it: stored and read back exactly, counted below an index and paged from the
runs that hold them, shown a page at a time on the flag's page and through the API, and
migrated from (and back to) the JSON list of flags recorded before."""

from __future__ import annotations

import numpy as np
import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from tests.support.migrations import migrate_to, schema_at
from webapp.catalog import flag_documents
from webapp.catalog.models import Flag, FlagDocuments, Source
from webapp.catalog.services.flags import flag_create

pytestmark = [pytest.mark.django_db, pytest.mark.services]

BEFORE = [("catalog", "0014_flag_where")]
AFTER = [("catalog", "0015_flag_documents")]


@pytest.fixture
def source(tmp_path, settings):
    settings.SOURCE_ROOTS = [tmp_path]
    (tmp_path / "s").mkdir()
    return Source.objects.create(name="s", uri=str(tmp_path / "s"))


@pytest.fixture
def no_tasks(monkeypatch):
    """The flag's taint task is not run (nothing is built here to taint)."""
    monkeypatch.setattr("webapp.catalog.services.flags.flag_taint_request", lambda **k: None)


def _ids(n: int, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Clustered and spread: small gaps, large jumps, an index past 2^40.
    parts = [np.arange(5, 5 + n // 2), rng.integers(0, 10**9, n - n // 2 - 1), [2**40 + 7]]
    return np.concatenate(parts).astype(np.int64)


def test_a_flag_over_many_documents_is_stored_in_runs_and_read_back(source, no_tasks):
    given = _ids(200_003)
    flag = flag_create(reason="pii", source_id=source.pk, document_ids=given)
    want = np.unique(given)
    flag.refresh_from_db()
    assert flag.num_documents == want.size
    runs = list(FlagDocuments.objects.filter(flag=flag).order_by("first"))
    assert len(runs) == -(-want.size // flag_documents.RUN)
    assert sum(r.count for r in runs) == want.size
    # A few bytes a document, not the 8 of the array nor the ~11 of a JSON list.
    assert sum(len(bytes(r.data)) for r in runs) < 3.5 * want.size
    assert np.array_equal(flag_documents.all_ids(flag), want)
    for n in (0, 5, 6, 100_000, 100_005, 5 * 10**8, 2**40 + 7, 2**40 + 8, 2**62):
        assert flag_documents.count_below(flag, n) == int((want < n).sum()), n
    for after in (-1, 4, 5, 77_000, int(want[70_000]), 2**40 + 7):
        assert flag_documents.page(flag, after=after, limit=250) == (
            want[want > after][:250].tolist()
        ), after


def test_a_run_that_does_not_decode_is_an_error_naming_the_flag(source, no_tasks):
    flag = flag_create(reason="pii", source_id=source.pk, document_ids=[1, 2, 3])
    FlagDocuments.objects.filter(flag=flag).update(count=4)
    with pytest.raises(ValueError, match=f"flag {flag.pk}: its documents from 1"):
        flag_documents.all_ids(flag)


def test_its_page_and_api_page_its_documents(source, no_tasks, login, users):  # noqa: F811
    flag = flag_create(reason="pii", source_id=source.pk, document_ids=range(0, 2_500, 10))
    viewer = login("viewer")
    page = viewer.get(f"/audit/flags/{flag.pk}/").content.decode()
    shown = page.split('id="flag-document-ids">')[1].split("</span>")[0]
    assert shown == ", ".join(str(i) for i in range(0, 1_000, 10))
    assert "250 in all:" in page and 'href="?documents_after=990"' in page
    page = viewer.get(f"/audit/flags/{flag.pk}/?documents_after=1990").content.decode()
    shown = page.split('id="flag-document-ids">')[1].split("</span>")[0]
    assert shown == ", ".join(str(i) for i in range(2_000, 2_500, 10))
    assert "after 1,990" in page and "flag-documents-next" not in page
    # The flags' list says how many, without reading them.
    assert f"{flag.reason}" in viewer.get("/audit/").content.decode()

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=users['viewer']).key}")
    body = api.get(f"/api/flags/{flag.pk}/").json()
    assert body["num_documents"] == 250 and "document_ids" not in body
    got, after = [], -1
    while after is not None:
        r = api.get(f"/api/flags/{flag.pk}/documents/", {"after": after, "limit": 70}).json()
        assert r["num_documents"] == 250 and len(r["document_ids"]) <= 70
        got += r["document_ids"]
        after = r["next_after"]
    assert got == list(range(0, 2_500, 10))
    bad = api.get(f"/api/flags/{flag.pk}/documents/", {"after": "x"})
    assert bad.status_code == 400 and "integers" in bad.json()["detail"]
    bad = api.get(f"/api/flags/{flag.pk}/documents/", {"after": 2**64})
    assert bad.status_code == 400 and "after: from -1 to 2^62" in bad.json()["detail"]
    huge = viewer.get(f"/audit/flags/{flag.pk}/?documents_after={2**64}").content.decode()
    assert 'id="flag-document-ids"></span>' in huge


@pytest.fixture
def old_schema(transactional_db):
    with schema_at(BEFORE) as apps:
        yield apps


def test_the_migration_moves_each_list_into_runs_and_back(old_schema):
    OldSource = old_schema.get_model("catalog", "Source")
    OldFlag = old_schema.get_model("catalog", "Flag")
    src = OldSource.objects.create(name="s", uri="/data/s")
    many = sorted(set(range(3, 300_000, 3)) | {2**35})
    listed = OldFlag.objects.create(target="documents", source=src, document_ids=many, reason="a")
    whole = OldFlag.objects.create(target="source", source=src, reason="b")

    apps = migrate_to(AFTER)
    NewFlag = apps.get_model("catalog", "Flag")
    runs = apps.get_model("catalog", "FlagDocuments").objects.filter(flag_id=listed.pk)
    assert NewFlag.objects.get(pk=listed.pk).num_documents == len(many)
    assert NewFlag.objects.get(pk=whole.pk).num_documents is None
    assert runs.count() == -(-len(many) // flag_documents.RUN)
    # Read with today's code: the same indices (the flag's row read by the columns that
    # exist at this migration; later ones add others).
    flag = Flag.objects.only("id", "num_documents").get(pk=listed.pk)
    assert flag_documents.all_ids(flag).tolist() == many

    apps = migrate_to(BEFORE)
    back = apps.get_model("catalog", "Flag")
    assert back.objects.get(pk=listed.pk).document_ids == many
    assert back.objects.get(pk=whole.pk).document_ids == []

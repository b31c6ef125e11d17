# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""An annotator parameter past its bound (``shardcore.limits``) is refused the same way
through the API, the source page's form and ``manage.py catalog annotate``: a message that
names the annotator, the parameter and the range, and no job, no annotation row."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from shardcore.tokenize import tokenize
from tests.integration.dashboard_fixtures import catalog, login, users  # noqa: F401
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl
from webapp.catalog.models import Annotation, TokenizedSource
from webapp.jobs.models import Job

WHY = "annotator 'minhash' parameter num_perm: 4194304 is outside the allowed range [2, 1024]"


@pytest.fixture
def ready(catalog, tmp_path):
    """The catalog's tokenized source with real files (so that only the bound refuses)."""
    ts = catalog["tokenized"]
    src = write_jsonl(tmp_path / "stdlib.jsonl", stdlib_records(12))
    tokenize([str(src)], ts.path, shard_size=40_000)
    other = TokenizedSource.objects.create(
        source=ts.source, tokenizer=ts.tokenizer, status=ts.status, path=ts.path,
        num_documents=ts.num_documents,
    )  # fmt: skip
    return ts, other


def test_the_api_the_form_and_the_command_refuse_num_perm_past_its_bound(ready, users, login):
    ts, other = ready
    jobs = Job.objects.count()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=users['editor']).key}")
    answer = api.post("/api/annotations/", {"tokenized_source": ts.pk, "annotator": "minhash",
                                            "params": {"num_perm": 4194304}}, format="json")  # fmt: skip
    assert answer.status_code == 400 and WHY in str(answer.json()), answer.content
    answer = api.post("/api/annotations/near-duplicates/", {
        "tokenized_sources": [ts.pk, other.pk], "params": {"num_perm": 4194304},
    }, format="json")  # fmt: skip
    assert answer.status_code == 400 and WHY in str(answer.json()), answer.content
    answer = api.post("/api/annotations/", {"tokenized_source": ts.pk, "annotator": "topics",
                                            "params": {"seed": -1}}, format="json")  # fmt: skip
    assert answer.status_code == 400, answer.content
    assert "annotator 'topics' parameter seed: -1 is outside the allowed range" in str(
        answer.json()
    )

    page = login("editor").post(f"/tokenized/{ts.pk}/annotate/",
                                {"annotator": "minhash", "params": "num_perm=4194304"},
                                follow=True)  # fmt: skip
    assert WHY in page.content.decode().replace("&#x27;", "'"), page.content

    with pytest.raises(CommandError, match=WHY.replace("[", r"\[").replace("]", r"\]")):
        call_command("catalog", "annotate", str(ts.pk), "minhash", "--param", "num_perm=4194304")
    assert not Annotation.objects.exists() and Job.objects.count() == jobs

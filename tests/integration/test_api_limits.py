# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""The API reads and bounds numbers as the pages and the command line do, from
``shardcore.limits``: its own ranges differed (``max_repetitions`` up to 10^6 and from
0.01, seeds up to 2^62) and so did its words (DRF's "Ensure this value is less than or
equal to 0.5."). Through HTTP with a token, against Postgres."""

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.integration.dashboard_fixtures import catalog, users  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(users):
    c = APIClient()
    token = Token.objects.get_or_create(user=users["editor"])[0]
    c.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return c


def _errors(resp) -> str:
    assert resp.status_code == 400, resp.content
    return resp.content.decode()


def test_a_pool_is_refused_in_the_librarys_words(api, catalog):
    body = {"name": "held-out", "tokenized_ids": [catalog["tokenized"].pk], "seq_len": 64}
    said = _errors(api.post("/api/pools/", {**body, "val_fraction": 0.7}, format="json"))
    assert "val_fraction: 0.7 is outside the allowed range [0, 0.5]" in said
    assert "Ensure this value" not in said
    said = _errors(api.post("/api/pools/", {**body, "seq_len": 0}, format="json"))
    assert "seq_len: 0 is outside the allowed range [1, 1048576]" in said
    said = _errors(api.post("/api/pools/", {**body, "seed": "1e6x"}, format="json"))
    assert "seed: '1e6x' is not a number (write e.g. 1000000, 1_000_000, 1e6 or 1M)" in said


def test_a_mixture_version_is_refused_in_the_librarys_words(api, catalog):
    draft = {"name": "limits", "tokens": "1e6",
             "rows": [{"stage": "main", "pool": catalog["pool"].pk, "weight": 1}]}  # fmt: skip
    said = _errors(api.post("/api/mixtures/", {**draft, "max_repetitions": -1},
                            format="json"))  # fmt: skip
    assert "max_repetitions: -1 is outside the allowed range (0, 1e+12]" in said
    said = _errors(api.post("/api/mixtures/", {**draft, "tokens": "1.5"}, format="json"))
    assert "tokens: 1.5 is not an integer" in said
    rows = [{"stage": "main", "pool": catalog["pool"].pk, "weight": 0}]
    said = _errors(api.post("/api/mixtures/", {**draft, "rows": rows}, format="json"))
    assert "weight: 0 is outside the allowed range (0, 1e+12]" in said
    # 1e6 is a budget of 1,000,000 tokens, as on the builder and `shardyard mix --tokens 1e6`.
    resp = api.post("/api/mixtures/", {**draft, "max_repetitions": 1000}, format="json")
    assert resp.status_code in (200, 202), resp.content
    assert resp.json()["token_budget"] == 1_000_000

# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""The attacker's and operator's view: every test here drives the app the way the attack
or mistake came in (JSON API with a token, the pages with a session and CSRF, the
management commands), against real Postgres, and checks the refusal and that nothing was
written. ``pytest tests/security`` runs this suite alone."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.integration.dashboard_fixtures import PASSWORD, catalog, role_users  # noqa: F401

ROLES = ("viewer", "trainer", "editor", "admin")


@pytest.fixture(autouse=True)
def _postgres(postgres):
    """This suite proves behaviour against the production database."""
    return postgres


@pytest.fixture
def users(django_user_model, settings):
    out = role_users(django_user_model, settings, ROLES)
    # A second editor: runs of one editor are not another's.
    other = django_user_model.objects.create_user(username="editor2", password=PASSWORD)
    other.groups.add(Group.objects.get(name="editor"))
    out["editor2"] = other
    return out


@pytest.fixture
def api(users):
    """``api(role)``: an APIClient holding that user's token (``None``: anonymous)."""

    def as_user(who: str | None) -> APIClient:
        c = APIClient()
        if who:
            key = Token.objects.get_or_create(user=users[who])[0].key
            c.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        return c

    return as_user


@pytest.fixture
def page(client, users):
    """``page(role)``: the test client signed in as that user, with CSRF checks on."""
    from django.test import Client

    def as_user(who: str) -> Client:
        c = Client(enforce_csrf_checks=False)
        c.force_login(users[who])
        return c

    return as_user


@pytest.fixture
def roots(tmp_path, settings):
    root = tmp_path / "sources"
    root.mkdir(exist_ok=True)
    settings.SOURCE_ROOTS = [root]
    return root


@pytest.fixture
def stdlib_pools(tmp_path, settings):
    """Three ready catalog pools over real pools of CPython standard-library modules
    (tokenized with tiktoken and built by shardcore), split by package name."""
    from shardcore.pool import PoolReader
    from tests.unit import mix_fixtures
    from webapp.catalog.models import ArtifactStatus, Pool

    settings.DATA_ROOT = tmp_path / "data"
    (tmp_path / "data").mkdir()
    out = {}
    for name, path in mix_fixtures.build_pools(tmp_path / "data" / "built", seq_len=32).items():
        reader = PoolReader(path)
        out[name] = Pool.objects.create(
            name=f"stdlib-{name}",
            status=ArtifactStatus.READY,
            path=str(path),
            seq_len=32,
            num_records=reader.num_records,
            fingerprint=reader.manifest["fingerprint"],
        )
    return out


def tree_digest(root) -> dict[str, str]:
    """{relative path: xxh3 of its bytes} of every file under ``root``."""
    from pathlib import Path

    import xxhash

    root = Path(root)
    return {
        str(p.relative_to(root)): xxhash.xxh3_64_hexdigest(p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def tokenized(tmp_path, settings, catalog):
    """A ready tokenized source of real docstrings (tiktoken, written by shardcore)."""
    from tests.unit import pool_fixtures
    from webapp.catalog.models import ArtifactStatus, TokenizedSource

    settings.DATA_ROOT = tmp_path / "data"
    (tmp_path / "data").mkdir()
    path = pool_fixtures.write_tokenized(
        tmp_path / "data" / "tok", pool_fixtures.corpus("prose", 120), shard_docs=50
    )
    return TokenizedSource.objects.create(
        source=catalog["source"],
        tokenizer=catalog["tokenized"].tokenizer,
        status=ArtifactStatus.READY,
        path=str(path),
        num_documents=120,
    )

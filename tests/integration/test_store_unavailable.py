# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""An object store that does not answer (here: a bucket that does not exist on the S3
server) makes the pages that read an artifact answer 503 with what failed and what to
check, never a traceback; pages that read only the catalog (the pool page reads its rows
and stored facts) still work."""

from __future__ import annotations

import pytest

from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from webapp.catalog.models import ArtifactStatus, Mixture, MixtureComponent, MixtureVersion, Pool

pytestmark = pytest.mark.django_db


@pytest.fixture
def lost_pool(s3_bucket, settings):
    settings.DATA_ROOT = f"{s3_bucket}/data"
    return Pool.objects.create(
        name="lost",
        status=ArtifactStatus.READY,
        path="s3://shardyard-no-such-bucket/data/pools/lost-0123456789",
        seq_len=32,
        num_records=100,
        num_tokens=3300,
        fingerprint="f" * 16,
    )


@pytest.fixture
def lost_version(lost_pool):
    version = MixtureVersion.objects.create(
        mixture=Mixture.objects.create(name="lost-mix"), number=1, token_budget=3200,
        status=ArtifactStatus.READY, path="s3://shardyard-no-such-bucket/data/mixtures/lost/v1",
        num_samples=100,
    )  # fmt: skip
    MixtureComponent.objects.create(version=version, pool=lost_pool, weight=1.0, stage="main")
    return version


def test_a_page_that_reads_an_unreachable_artifact_says_the_store_did_not_answer(
    lost_version, login, moto_server
):
    page = login("viewer").get(f"/mixtures/versions/{lost_version.pk}/")
    assert page.status_code == 503
    text = page.content.decode()
    assert "Object store unavailable" in text
    assert f"The object store ({moto_server.endpoint}) did not answer" in text.replace(
        "&#x27;", "'"
    )
    assert "NoSuchBucket" in text
    # Pages that read only the catalog still answer: the lists, and the pool's page (its
    # rows and the facts a worker stored).
    assert login("viewer").get("/pools/").status_code == 200
    assert (
        login("viewer").get(f"/pools/{lost_version.components.get().pool_id}/").status_code == 200
    )

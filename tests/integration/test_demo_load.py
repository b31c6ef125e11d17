"""``manage.py load_demo``: the CPython standard-library demo goes through the whole
pipeline on a real worker, and a second run builds nothing new."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from tests.integration.dashboard_fixtures import login, users
from tests.integration.test_jobs_workers import catalog_env
from webapp.catalog.models import ArtifactStatus, Mixture, Pool, Source, TokenizedSource
from webapp.jobs.models import Job

pytestmark = pytest.mark.services
__all__ = ["catalog_env", "login", "users"]


def test_it_loads_the_demo_through_tokenize_pool_and_mixture(
    postgres, redis_url, celery_workers, catalog_env, capsys, login
):
    celery_workers("demo")
    argv = [
        "load_demo",
        "--max-bytes",
        "150000",
        "--seq-len",
        "128",
        "--tokens",
        "100000",
        "--wait",
        "240",
    ]
    call_command(*argv)

    assert sorted(Source.objects.values_list("name", flat=True)) == [
        "demo-docstrings", "demo-reference", "demo-stdlib-code", "demo-stdlib-tests",
    ]  # fmt: skip
    assert set(TokenizedSource.objects.values_list("status", flat=True)) == {ArtifactStatus.READY}
    pools = Pool.objects.filter(split=Pool.Split.TRAIN)
    assert pools.count() == 4 and all(p.status == ArtifactStatus.READY for p in pools)
    assert all(p.num_records > 0 for p in pools)
    version = Mixture.objects.get(name="demo").versions.get()
    assert version.num_samples == -(-100_000 // 128)  # the budget rounded up to whole samples
    stages = {c.stage or "main" for c in version.components.all()}
    assert stages == {"main", "anneal"}
    out = capsys.readouterr().out
    assert "[demo] demo ready" in out

    # Every chart of the demo's source and pool pages, and the version's composition and
    # epochs, has data: an empty chart is a bug (a library upgrade once emptied them all).
    client = login("viewer")
    pages = [(f"/sources/{s.pk}/", ("length_figure",))
             for s in Source.objects.all()]  # fmt: skip
    pages += [(f"/pools/{p.pk}/", ("deviation_figure",)) for p in pools]
    pages += [(f"/mixtures/versions/{version.pk}/", ("epochs_figure", "heatmap_figure"))]
    for url, figures in pages:
        page = client.get(url)
        assert page.status_code == 200, url
        for name in figures:
            assert page.context[name]["data"], f"{url}: {name} is empty"
        for prop, figure in page.context.get("composition_figures", []):
            assert figure["data"], f"{url}: the composition by {prop} is empty"

    jobs = Job.objects.count()
    call_command(*argv)
    assert Job.objects.count() == jobs  # idempotent: nothing rebuilt
    assert Mixture.objects.get(name="demo").versions.count() == 1

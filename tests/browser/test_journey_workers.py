"""Journey: the overview lists the live workers from their own beats (name, host, queue,
alive), and a job's page draws a timeline of its units on the rows of the workers that ran
them; a stopped worker is shown as gone."""

import socket

import pytest

from tests.support.services import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_it_lists_live_workers_and_draws_a_jobs_unit_timeline(
    page, live_server, login, screenshot, stack, celery_workers, celery_queue, monkeypatch, settings
):
    from webapp.catalog.services.sources import source_register
    from webapp.catalog.services.tokenized import tokenized_source_build
    from webapp.jobs.models import JobUnit

    monkeypatch.setenv("SHARDYARD_WORKER_BEAT", "1")
    settings.SHARDYARD_WORKER_BEAT = 1
    corpus = stack.corpus()
    left, right = celery_workers("left"), celery_workers("right")
    login("ada", superuser=True)

    host = socket.gethostname()
    names = {f"left@{host}", f"right@{host}"}
    wait_for(lambda: _listed(page, live_server, names), timeout=60, interval=1.0,
             what="both workers on the overview")  # fmt: skip
    for name in names:
        row = page.locator(f"#workers tr[data-worker='{name}']")
        cells = row.locator("td").all_inner_texts()
        assert cells[0] == f"{name} alive"
        assert cells[1] == host and cells[2] == celery_queue
    screenshot("overview-workers")

    source = source_register(name="code", uri=str(corpus["stdlib-code"].parent))
    ts = tokenized_source_build(source_id=source.pk, unit_bytes=64 << 10)
    job = stack.wait_job(ts.job_id)
    units = list(JobUnit.objects.filter(job=job))
    assert len(units) > 2
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    chart = page.locator("#timeline .js-plotly-plot")
    chart.wait_for()
    bars = chart.evaluate("(el) => el.data.map((t) => ({name: t.name, y: t.y, n: t.x.length}))")
    assert [b["name"] for b in bars] == ["succeeded"]
    assert sorted(bars[0]["y"]) == sorted(u.worker for u in units)
    assert set(bars[0]["y"]) <= names
    screenshot("job-timeline")

    right.stop()  # three missed beats later the overview says so
    wait_for(lambda: _gone(page, live_server, f"right@{host}"), timeout=60, interval=1.0,
             what="the stopped worker shown as gone")  # fmt: skip
    assert page.locator(f"#workers tr[data-worker='left@{host}'] td").first.inner_text() == (
        f"left@{host} alive"
    )
    assert left.log() is not None


def _listed(page, live_server, names) -> bool:
    page.goto(f"{live_server.url}/")
    return all(page.locator(f"#workers tr[data-worker='{n}']").count() == 1 for n in names)


def _gone(page, live_server, name) -> bool:
    page.goto(f"{live_server.url}/")
    return page.locator(f"#workers tr[data-worker='{name}'] td").first.inner_text().endswith("gone")

"""Journey: a two-stage version reads the same pool in its main stage and its anneal; a
run trains on it. Flagging the source from the audit page taints the pool, the version
and the run once each, and the version and the run hold the pool's flagged documents
once, not once per stage."""

import re

import pytest

from tests.browser.waits import flag_taint_shown

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_it_counts_a_pool_read_in_two_stages_once(page, live_server, login, screenshot, stack):
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
    from webapp.catalog.services.runs import run_register

    corpus = stack.corpus()
    stack.start_worker()
    tokenized = stack.tokenized("docstrings", corpus["docstrings"].parent)
    prose = stack.pool("prose", tokenized, 64)
    mixture = mixture_get_or_create(name="prose-twice")
    version = mixture_version_create(
        mixture_id=mixture.pk, token_budget=64 * 1000,
        components=[{"pool": prose.pk, "weight": 1.0},
                    {"pool": prose.pk, "weight": 1.0, "stage": "anneal"}],
        stages=[{"name": "anneal", "tokens": 64 * 100}],
    )  # fmt: skip
    stack.wait_job(version.job_id)
    assert version.components.count() == 2
    run_register(name="twice-lm", mixture_version_id=version.pk)
    login("ada", superuser=True)

    page.goto(f"{live_server.url}/audit/")
    page.fill("#id_source", "docstrings")
    page.click("text=Find")
    assert re.search(r"In 1 pool: [\w-]+; 1 mixture version; 1 run\.", page.inner_text("main"))
    page.fill("#reason", "a licence that forbids training")
    page.click("text=Flag and taint downstream")
    assert re.fullmatch(
        r"Flag \d+ recorded; what it taints is being computed by a worker\.",
        page.inner_text(".msg"),
    )
    flag_taint_shown(page)  # computed by a worker once the flag is recorded

    rows = {}
    for tr in page.locator("tr.tainted").all():
        label, documents, _ = tr.locator("td").all_inner_texts()
        rows[label.split(" ")[0]] = int(documents.replace(",", ""))
    assert list(rows) == ["tokenized", "pool", "mixture", "run"]
    in_pool = rows["pool"]
    assert 0 < in_pool <= rows["tokenized"]
    assert rows["mixture"] == in_pool and rows["run"] == in_pool
    from webapp.catalog.models import Taint

    assert Taint.objects.get(mixture_version=version).documents == in_pool  # as recorded
    assert page.inner_text("#flag-summary") == (
        "Taints 1 tokenized source, 1 pool, 1 mixture version and 1 run, holding "
        f"{rows['tokenized']:,} flagged documents."
    )
    screenshot("flag-summary")

    # When the run first read them: computed by the worker (the page never scans the
    # schedule) and shown once stored; the run reported nothing, so "not yet", at the
    # first flagged sample of its schedule.
    from webapp.catalog.models import Flag
    from webapp.catalog.selectors import flag_first_sample

    flag = Flag.objects.latest("pk")
    first = flag_first_sample(flag=flag, version=version)
    expected = f"not yet: the first flagged sample is {first}; at its current position the run"
    cell = page.locator("tr.tainted td.flag-read").last
    for _ in range(60):
        if expected in cell.inner_text():
            break
        page.wait_for_timeout(500)
        page.reload()
        cell = page.locator("tr.tainted td.flag-read").last
    assert expected in cell.inner_text()
    assert "has consumed 0 samples (step 0)" in cell.inner_text()

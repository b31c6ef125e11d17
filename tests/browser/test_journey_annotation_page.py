"""Journey: an annotation's page, as a newcomer read it. Its "flag the documents where"
suggests a filter valid for the column's type (``lang_id.lang = 'en'``, not
``lang_id.lang > 0``); a filter naming a column the annotation lacks, or comparing text
with a number, is refused naming the column and the columns there are, never DuckDB's raw
"Binder Error"; a flag is charted as true/false counts and a constant column as its one
value (not a histogram on -0.5..0.5); cluster ids are not charted."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

LANG_SUMMARY = {
    "documents": 12,
    "columns": {
        "lang": {"kind": "text", "nulls": 0, "distinct": 2, "top": [["en", 8], ["de", 4]]},
        "score": {"kind": "number", "nulls": 0, "count": 12, "min": 0.5, "max": 0.99,
                  "mean": 0.8, "nonzero": 12,
                  "histogram": {"edges": [0.5, 0.75, 0.99], "counts": [4, 8]}},
    },
}  # fmt: skip
QUALITY_SUMMARY = {
    "documents": 12,
    "columns": {
        "has_lorem_ipsum": {"kind": "bool", "nulls": 0, "true": 3, "false": 9},
        "stop_ratio": {"kind": "number", "nulls": 0, "count": 12, "min": 0.0, "max": 0.0,
                       "mean": 0.0, "nonzero": 0,
                       "histogram": {"edges": [-0.5, 0.0, 0.5], "counts": [0, 12]}},
    },
}  # fmt: skip
DEDUP_SUMMARY = {
    "documents": 12,
    "columns": {
        "dup_cluster": {"kind": "number", "nulls": 0, "count": 12, "min": 0, "max": 10,
                        "mean": 5.0, "nonzero": 11,
                        "values": [[i, 2 if i == 3 else 1] for i in range(11)]},
        "dup_size": {"kind": "number", "nulls": 0, "count": 12, "min": 1, "max": 2,
                     "mean": 1.2, "nonzero": 12, "values": [[1, 10], [2, 2]]},
    },
    "duplicates": {"duplicate_documents": 1, "duplicate_rate": 1 / 12,
                   "clusters_with_copies": 1,
                   "largest": [{"cluster": 3, "size": 2, "first_doc_id": 3}]},
}  # fmt: skip


def _figure(page, column: str) -> dict:
    chart = page.locator(f'[data-column="{column}"] .js-plotly-plot')
    chart.wait_for()
    return chart.evaluate("el => ({data: el.data, layout: el.layout})")


def test_the_annotation_page_suggests_valid_filters_and_charts_each_type_as_it_is(
    page, live_server, login, settings, tmp_path
):
    from webapp.catalog.models import (
        Annotation,
        ArtifactStatus,
        Flag,
        Source,
        TokenizedSource,
        Tokenizer,
    )  # fmt: skip

    # Over more documents than a request evaluates: the filter is checked against the
    # annotation's recorded columns at once (no file is read), as on a large annotation.
    settings.PLAN_INLINE_DOCUMENTS = 5
    source = Source.objects.create(name="notes", uri=str(tmp_path), num_documents=12,
                                   status=Source.Status.SCANNED)  # fmt: skip
    ts = TokenizedSource.objects.create(
        source=source, tokenizer=Tokenizer.objects.create(spec="tiktoken:test"),
        path=str(tmp_path / "tok"), status=ArtifactStatus.READY, num_documents=12,
    )  # fmt: skip

    def annotation(annotator, columns, summary):
        return Annotation.objects.create(
            tokenized_source=ts, annotator=annotator, status=ArtifactStatus.READY,
            path=str(tmp_path / annotator), num_documents=12, summary=summary,
            columns=[{"name": n, "type": t} for n, t in columns],
        )  # fmt: skip

    lang = annotation("lang_id", [("lang", "string"), ("score", "float")], LANG_SUMMARY)
    quality = annotation("quality", [("has_lorem_ipsum", "bool"), ("stop_ratio", "float")],
                         QUALITY_SUMMARY)  # fmt: skip
    dedup = annotation("dedup", [("dup_cluster", "int64"), ("dup_size", "int32")],
                       DEDUP_SUMMARY)  # fmt: skip
    login("ada", superuser=True)
    url = live_server.url

    page.goto(f"{url}/annotations/{lang.pk}/")
    assert page.get_attribute("#flag-filter", "placeholder") == "lang_id.lang = 'en'"
    assert page.inner_text("#flag-example") == "lang_id.lang = 'en'"

    # A column the annotation lacks: named, with the ones it has; no "Binder Error".
    page.fill("#flag-filter", "lang_id.langg = 'en'")
    page.click("#flag-where button[type=submit]")
    said = page.locator(".msg.error").inner_text()
    assert "unknown property 'lang_id.langg'" in said, said
    assert "lang_id.lang, lang_id.score" in said and "Binder" not in said
    # Text compared with a number: said so, with what to write.
    page.fill("#flag-filter", "lang_id.lang > 0")
    page.click("#flag-where button[type=submit]")
    said = page.locator(".msg.error").inner_text()
    assert "a text column is compared with a number" in said and "= 'en'" in said, said
    assert "Binder" not in said and "INTEGER_LITERAL" not in said
    # What the page suggests is accepted.
    page.fill("#flag-filter", "lang_id.lang = 'en'")
    page.click("#flag-where button[type=submit]")
    page.wait_for_url("**/flags/*/")
    assert Flag.objects.get().where == "lang_id.lang = 'en'"

    page.goto(f"{url}/annotations/{quality.pk}/")
    assert page.get_attribute("#flag-filter", "placeholder") == "quality.has_lorem_ipsum = true"
    flag = _figure(page, "quality.has_lorem_ipsum")
    assert flag["data"][0]["x"] == ["true", "false"] and flag["data"][0]["y"] == [3, 9]
    assert flag["layout"]["xaxis"]["type"] == "category"
    constant = _figure(page, "quality.stop_ratio")
    assert constant["data"][0]["x"] == ["0.0"] and constant["data"][0]["y"] == [12]
    assert constant["layout"]["xaxis"]["type"] == "category"

    page.goto(f"{url}/annotations/{dedup.pk}/")
    assert page.get_attribute("#flag-filter", "placeholder") == "dedup.dup_size > 0"
    ids = page.locator('[data-column="dedup.dup_cluster"]')
    assert ids.locator(".js-plotly-plot").count() == 0
    assert "Cluster ids" in ids.inner_text()
    assert page.locator('[data-column="dedup.dup_size"] .js-plotly-plot').count() == 1

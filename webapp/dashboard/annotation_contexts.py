"""Page contexts of annotations (``contexts`` holds the other pages'): the annotations part
of a source page, and an annotation's page with a chart of each column, from the read
model (``webapp.catalog.selectors.annotations``) and ``charts.annotations``."""

from __future__ import annotations

from webapp.catalog import selectors as catalog
from webapp.catalog.models import TokenizedSource
from webapp.dashboard import charts


def source_annotations(*, tokenized: list[TokenizedSource]) -> dict:
    """For the source page (its tokenized versions ``tokenized``): the annotations of them
    listed there, the ready versions one can annotate, the annotators on offer and the
    tokenized sources a near-duplicate group may join."""
    read = catalog.source_annotations(tokenized=tokenized)
    return {
        "annotations": read["annotations"],
        "annotatable": [t for t in tokenized if t.is_ready],
        "annotators": catalog.annotator_choices(),
        "group_candidates": read["group_candidates"],
    }


def annotation_detail(*, annotation_id: int) -> dict:
    """The annotation page: ``catalog.annotation_detail`` with a chart of each column its
    summary describes, of its languages, duplicate clusters or topic clusters, and an
    example filter for the "flag the documents where" form."""
    detail = catalog.annotation_detail(annotation_id=annotation_id)
    ann = detail["annotation"]
    summary = ann.summary or {}
    columns = summary.get("columns", {})
    figures = [
        (name, charts.column_figure(ann.annotator, name, columns[name]), columns[name])
        for name in [c["name"] for c in ann.columns]
        if name in columns
    ]
    dup = summary.get("duplicates")
    return {
        "annotation": ann,
        "summary": summary,
        "figures": figures,
        "names": [f"{ann.annotator}.{c['name']}" for c in ann.columns],
        "example": charts.filter_example(ann.annotator, ann.columns, summary),
        "languages_figure": charts.languages_figure(summary["languages"])
        if summary.get("languages")
        else None,
        "duplicates": dup,
        "duplicates_figure": charts.clusters_figure(
            dup["largest"], title="Largest duplicate clusters", x_label="duplicate cluster"
        )
        if dup
        else None,
        "clusters": summary.get("clusters"),
        "clusters_figure": charts.clusters_figure(summary["clusters"][:30], title="Cluster sizes")
        if summary.get("clusters")
        else None,
        "group": detail["group"],
        "others": detail["others"],
    }

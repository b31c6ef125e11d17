# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Annotations are artifacts of the storage books like the others: the report counts their
bytes, the garbage collector keeps their files and collects what no annotation row owns
under ``annotations/``, and one that no live pool joins can be retired."""

from __future__ import annotations

from pathlib import Path

from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from tests.integration.test_ops_storage import eager, tree_bytes, world  # noqa: F401
from webapp.catalog.models import Annotation, ArtifactStatus
from webapp.ops import storage


def test_annotations_are_counted_kept_by_the_collector_and_retired(world, login):
    from webapp.catalog.services.annotations import annotation_build

    annotation = annotation_build(tokenized_id=world["ts"].pk, annotator="pii")
    annotation.refresh_from_db()
    assert annotation.status == ArtifactStatus.READY, annotation.job.error
    held = tree_bytes(annotation.path)
    assert held > 0

    rows = {(r["kind"], r["id"]): r for r in storage.storage_report()["artifacts"]}
    row = rows[("annotation", annotation.pk)]
    assert row["bytes"] == held and row["name"].startswith("pii of code")

    root = Path(world["pool"].path).parents[1]
    orphan = root / "annotations" / "gone-0123456789" / "columns-00000.parquet"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"z" * 70)
    dry = storage.collect_garbage(min_age=0)
    assert [p for p, _ in dry.orphans] == [str(orphan)], dry.orphans
    storage.collect_garbage(delete=True, min_age=0)
    assert not orphan.exists() and tree_bytes(annotation.path) == held

    page = login("editor").post(
        f"/storage/retire/annotation/{annotation.pk}/", {"confirm": "yes"}, follow=True
    )
    assert f"Retired annotation {annotation.pk}".encode() in page.content, page.content
    assert Annotation.objects.get(pk=annotation.pk).status == ArtifactStatus.RETIRED
    assert not Path(annotation.path).exists()

# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Retiring from the Storage page is refused while a running reader needs the files: a
materialized copy that a registered or running training run reads, and a tokenized source
that an annotation being built reads; the refusal names the reader, and nothing is removed.
Once the reader is done, the same retire goes through."""

from __future__ import annotations

from pathlib import Path

from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from tests.integration.test_ops_storage import eager, world  # noqa: F401
from webapp.catalog.models import Annotation, ArtifactStatus, Export, TokenizedSource, TrainingRun


def _retire(client, kind: str, pk: int):
    return client.post(f"/storage/retire/{kind}/{pk}/", {"confirm": "yes"}, follow=True)


def test_a_copy_a_running_run_reads_is_not_retired(world, login):
    copy, run = world["copy"], world["run"]
    TrainingRun.objects.filter(pk=run.pk).update(state=TrainingRun.State.RUNNING)
    page = _retire(login("editor"), "export", copy.pk)
    assert b"is read by 1 live item(s): training run r (id" in page.content, page.content
    assert Export.objects.get(pk=copy.pk).status == ArtifactStatus.READY
    assert Path(copy.path).is_dir() and any(Path(copy.path).iterdir())

    TrainingRun.objects.filter(pk=run.pk).update(state=TrainingRun.State.FINISHED)
    page = _retire(login("editor"), "export", copy.pk)
    assert f"Retired export {copy.pk}".encode() in page.content, page.content
    assert not Path(copy.path).exists()


def test_a_tokenized_source_under_a_running_annotation_is_not_retired(
    world, login, tmp_path, celery_queue
):
    from tests.integration.test_jobs_workers import stdlib_docs, write_jsonl
    from webapp.catalog.services.annotations import annotation_build
    from webapp.catalog.services.sources import source_register
    from webapp.catalog.services.tokenized import tokenized_source_build
    from workers.celery import app

    write_jsonl(tmp_path / "notes" / "a.jsonl", stdlib_docs(6))
    source = source_register(name="notes", uri=str(tmp_path / "notes"))
    ts = tokenized_source_build(source_id=source.pk)
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY and not ts.pools.exists()
    app.conf.task_always_eager = False  # the annotation's job is queued: nobody runs it yet
    annotation = annotation_build(tokenized_id=ts.pk, annotator="pii")
    assert annotation.status == ArtifactStatus.BUILDING

    page = _retire(login("editor"), "tokenized", ts.pk)
    assert (
        f"is read by 1 live item(s): annotation pii (id {annotation.pk}), being built by job "
        f"{annotation.job_id}".encode()
        in page.content
    ), page.content
    assert TokenizedSource.objects.get(pk=ts.pk).status == ArtifactStatus.READY
    assert Path(ts.path).is_dir() and any(Path(ts.path).iterdir())

    Annotation.objects.filter(pk=annotation.pk).update(status=ArtifactStatus.CANCELLED)
    page = _retire(login("editor"), "tokenized", ts.pk)
    assert f"Retired tokenized {ts.pk}".encode() in page.content, page.content
    assert not Path(ts.path).exists()

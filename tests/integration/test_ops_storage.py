# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Storage: bytes per artifact, owner and team; retiring (refused while read, naming the
readers; then files gone, rows and lineage kept, the audit still answering); the garbage
collector removing exactly the planted orphans (dry run first), on a local data root and on
S3 (moto's server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command

from tests.integration.dashboard_fixtures import catalog_world, login, users  # noqa: F401
from webapp.catalog.models import (
    ArtifactStatus,
    Export,
    MixtureComponent,
    MixtureVersion,
    Pool,
    Shard,
    TrainingRun,
)
from webapp.ops import storage


@pytest.fixture
def eager():
    """Jobs run in this process as their transactions commit (Celery's eager mode)."""
    from workers.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


@pytest.fixture
def world(transactional_db, tmp_path, settings, eager, users):
    settings.SOURCE_ROOTS = [tmp_path]
    settings.DATA_ROOT = tmp_path / "data"
    built = catalog_world(tmp_path, steps=3, samples_per_step=4)
    team = Group.objects.create(name="pretraining")
    users["editor"].groups.add(team)
    Pool.objects.filter(pk=built["pool"].pk).update(created_by=users["editor"])
    return built


def tree_bytes(path) -> int:
    p = Path(path)
    return (
        p.stat().st_size
        if p.is_file()
        else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    )


def test_the_report_counts_the_bytes_on_disk_per_artifact_owner_and_team(world, login, capsys):
    report = storage.storage_report()
    rows = {(r["kind"], r["id"]): r for r in report["artifacts"]}
    pool, ts, copy = world["pool"], world["ts"], world["copy"]
    assert rows[("pool", pool.pk)]["bytes"] == tree_bytes(pool.path) > 0
    assert rows[("tokenized", ts.pk)]["bytes"] == tree_bytes(ts.path) > 0
    assert rows[("export", copy.pk)]["bytes"] == tree_bytes(copy.path) > 0
    # The copy lies inside its version's directory and is counted once, as the copy.
    version = rows[("version", world["version"].pk)]["bytes"]
    assert version == tree_bytes(world["version"].path) - tree_bytes(copy.path) > 0
    assert report["by_team"]["pretraining"] == rows[("pool", pool.pk)]["bytes"]
    assert report["by_owner"]["editor"] == rows[("pool", pool.pk)]["bytes"]
    assert report["total"] == sum(r["bytes"] for r in report["artifacts"])
    assert report["sources"][0]["bytes"] == world["source"].num_bytes > 0
    call_command("storage", "report")
    out = capsys.readouterr().out
    assert f"team  pretraining: {report['by_team']['pretraining']}" in out
    # The page and the API answer the same numbers.
    page = login("viewer").get("/storage/")
    assert (
        page.status_code == 200 and f"{rows[('pool', pool.pk)]['bytes']:,}".encode() in page.content
    )
    api = login("viewer").get("/api/storage/").json()
    assert {(r["kind"], r["id"]): r["bytes"] for r in api["artifacts"]} == {
        k: r["bytes"] for k, r in rows.items()
    }


def test_retiring_is_refused_while_read_then_removes_files_and_keeps_rows(world, login):
    pool, version, copy, run = world["pool"], world["version"], world["copy"], world["run"]
    # From the Storage page: a viewer may not; an editor is told what reads the pool.
    url = f"/storage/retire/pool/{pool.pk}/"
    assert login("viewer").post(url).status_code == 403
    page = login("editor").post(url, follow=True)
    assert b"is read by 1 live item(s): mixture version m v1" in page.content
    assert Pool.objects.get(pk=pool.pk).status == ArtifactStatus.READY
    with pytest.raises(
        storage.RetireRefused, match=r"read by 1 live item\(s\): mixture version m v1"
    ):
        storage.artifact_retire(kind="pool", pk=pool.pk)
    with pytest.raises(storage.RetireRefused) as refused:
        storage.artifact_retire(kind="version", pk=version.pk)
    assert "training run r" in str(refused.value)
    assert f"materialized copy (export {copy.pk})" in str(refused.value)
    assert Path(pool.path).exists() and Path(version.path).exists()

    TrainingRun.objects.filter(pk=run.pk).update(state=TrainingRun.State.FINISHED)
    shards = Shard.objects.filter(pool=pool).count()
    freed = [storage.artifact_retire(kind=k, pk=o.pk)["bytes_freed"]
             for k, o in (("export", copy), ("version", version), ("pool", pool))]  # fmt: skip
    assert all(n > 0 for n in freed)
    assert not Path(pool.path).exists() and not Path(version.path).exists()
    assert not Path(copy.path).exists()
    assert Path(world["ts"].path).exists()  # not retired: untouched
    # Rows, lineage and the run's books stay.
    assert Pool.objects.get(pk=pool.pk).status == ArtifactStatus.RETIRED
    assert MixtureVersion.objects.get(pk=version.pk).status == ArtifactStatus.RETIRED
    assert Export.objects.get(pk=copy.pk).status == ArtifactStatus.RETIRED
    assert Shard.objects.filter(pool=pool).count() == shards > 0
    assert MixtureComponent.objects.filter(version=version, pool=pool).exists()
    assert TrainingRun.objects.get(pk=run.pk).mixture_version_id == version.pk
    # The audit still answers which runs read this source.
    response = login("viewer").get("/audit/", {"source": "code"})
    result = response.context["result"]
    assert [r.name for r in result["runs"]] == ["r"], result
    assert [p.pk for p in result["pools"]] == [pool.pk]
    # Retiring again is a no-op; the report counts nothing for them.
    assert storage.artifact_retire(kind="pool", pk=pool.pk)["bytes_freed"] == 0
    rows = {(r["kind"], r["id"]): r for r in storage.storage_report()["artifacts"]}
    assert rows[("pool", pool.pk)]["bytes"] == rows[("version", version.pk)]["bytes"] == 0


def plant(root: Path) -> tuple[list[Path], list[Path]]:
    orphans = [
        root / "pools" / "gone-0123456789" / "pool-00000.bin",
        root / "pools" / "gone-0123456789" / "manifest.json",
        root / "tokenized" / "half-written-abc" / "tok-000000.bin",
        root / "mixtures" / "m" / "v7" / "schedule.bin",
    ]
    kept = [root / "cache" / "stream" / "keep.bin", root / "broker" / "out" / "x.msg"]
    for p in orphans + kept:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * 100)
    return orphans, kept


def test_the_collector_removes_exactly_the_orphans_after_a_dry_run(world, capsys):
    root = Path(world["pool"].path).parents[1]
    orphans, kept = plant(root)
    owned_before = {p for p in root.rglob("*") if p.is_file()} - set(orphans)

    dry = storage.collect_garbage(min_age=0)
    assert sorted(p for p, _ in dry.orphans) == sorted(str(p) for p in orphans)
    assert dry.bytes == 400 and not dry.removed
    assert all(p.exists() for p in orphans)  # a dry run removes nothing
    call_command("storage", "gc", "--min-age", "0")
    out = capsys.readouterr().out
    assert "would remove 4 file(s), 400 bytes" in out and "dry run: nothing removed" in out

    # Too young: left alone by default (a build may be writing it).
    assert storage.collect_garbage().orphans == []
    call_command("storage", "gc", "--delete", "--min-age", "0")
    assert "removed 4 file(s), 400 bytes" in capsys.readouterr().out
    assert not any(p.exists() for p in orphans)
    assert not (root / "pools" / "gone-0123456789").exists()  # emptied directories too
    assert {p for p in root.rglob("*") if p.is_file()} == owned_before
    assert all(p.exists() for p in kept)
    assert storage.collect_garbage(min_age=0).orphans == []


def test_the_command_names_what_reads_an_artifact(world):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="mixture version m v1"):
        call_command("storage", "retire", "pool", str(world["pool"].pk))
    with pytest.raises(CommandError, match="pool 999999 does not exist"):
        call_command("storage", "retire", "pool", "999999")


def test_on_s3_the_collector_removes_exactly_the_orphans_and_retire_removes_objects(
    transactional_db, tmp_path, settings, s3_data_root, eager
):
    import fsspec

    from tests.integration.test_jobs_workers import stdlib_docs, write_jsonl
    from webapp.catalog.services.sources import source_register
    from webapp.catalog.services.tokenized import tokenized_source_build

    settings.SOURCE_ROOTS = [tmp_path / "src"]
    write_jsonl(tmp_path / "src" / "code" / "a.jsonl", stdlib_docs(8))
    source = source_register(name="code", uri=str(tmp_path / "src" / "code"))
    ts = tokenized_source_build(source_id=source.pk)
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY and ts.path.startswith(s3_data_root), ts.path
    fs = fsspec.filesystem("s3")
    root = s3_data_root.removeprefix("s3://")
    orphans = [f"{root}/pools/gone-0123456789/pool-00000.bin",
               f"{root}/tokenized/half-written-abc/tok-000000.bin"]  # fmt: skip
    kept = [f"{root}/cache/stream/keep.bin", f"{ts.path.removeprefix('s3://')}/extra.bin"]
    for key in orphans + kept:
        fs.pipe(key, b"y" * 50)
    owned = set(fs.find(ts.path)) - set(kept)
    assert owned

    dry = storage.collect_garbage(min_age=0)
    assert sorted(p for p, _ in dry.orphans) == sorted(orphans) and dry.bytes == 100
    fs.invalidate_cache()
    assert all(fs.exists(k) for k in orphans)  # the dry run removed nothing
    assert storage.collect_garbage().orphans == []  # too young by default
    done = storage.collect_garbage(delete=True, min_age=0)
    assert done.removed and len(done.orphans) == 2
    fs.invalidate_cache()
    assert not any(fs.exists(k) for k in orphans)
    assert all(fs.exists(k) for k in kept) and owned <= set(fs.find(ts.path))

    report = {(r["kind"], r["id"]): r["bytes"] for r in storage.storage_report()["artifacts"]}
    assert report[("tokenized", ts.pk)] == sum(fs.size(k) for k in fs.find(ts.path)) > 0
    freed = storage.artifact_retire(kind="tokenized", pk=ts.pk)["bytes_freed"]
    fs.invalidate_cache()
    assert freed > 0 and fs.find(ts.path) == []
    assert fs.exists(kept[0])  # outside the artifact: untouched

"""A small catalog built row by row for the dashboard and API tests: one source of real
text, a tokenized source, a pool with shards, a mixture version, a run with progress,
a job with units, and users with fixed roles."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

PASSWORD = "pw-123456789"

TEXTS = [
    "The Rhine rises in the Swiss Alps and flows into the North Sea near Rotterdam.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Der Bodensee liegt an der Grenze von Deutschland, Österreich und der Schweiz.",
]


def role_users(django_user_model, settings, roles) -> dict:
    """One user per role, named after it, with ``PASSWORD``: {role: user}."""
    # The default hasher costs ~0.3 s per password: too slow for several users per test.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    out = {}
    for role in roles:
        user = django_user_model.objects.create_user(username=role, password=PASSWORD)
        user.groups.add(Group.objects.get_or_create(name=role)[0])  # flushed by live_server tests
        out[role] = user
    return out


@pytest.fixture
def users(django_user_model, settings):
    return role_users(django_user_model, settings, ("viewer", "editor", "admin"))


@pytest.fixture
def stdlib_pools(tmp_path, settings):
    """Three ready catalog pools over real pools of CPython standard-library modules
    (tokenized with tiktoken and built by shardcore), split by package name, inside the data
    root."""
    from shardcore.pool import PoolReader
    from tests.unit import mix_fixtures
    from webapp.catalog.models import ArtifactStatus, Pool

    settings.DATA_ROOT = tmp_path / "data"
    (tmp_path / "data").mkdir()
    out = {}
    for name, path in mix_fixtures.build_pools(tmp_path / "data" / "built", seq_len=32).items():
        reader = PoolReader(path)
        out[name] = Pool.objects.create(
            name=f"stdlib-{name}",
            status=ArtifactStatus.READY,
            path=str(path),
            seq_len=32,
            num_records=reader.num_records,
            fingerprint=reader.manifest["fingerprint"],
        )
    return out


@pytest.fixture
def login(client, users):
    def as_role(role: str):
        client.force_login(users[role])
        return client

    return as_role


def write_pool_manifest(pool, records_per_shard: list[int]) -> None:
    """The part of a pool manifest that resume positions read (shardcore.locate)."""
    from pathlib import Path

    from shardcore.manifest import write_manifest

    Path(pool.path).mkdir(parents=True, exist_ok=True)
    cumulative = [0]
    for n in records_per_shard:
        cumulative.append(cumulative[-1] + n)
    write_manifest(
        pool.path,
        {
            "kind": "pool",
            "seq_len": pool.seq_len,
            "num_records": cumulative[-1],
            "cumulative_records": cumulative,
            "shards": [
                {"prefix": f"{pool.path}/pool-{i:05d}", "num_records": n}
                for i, n in enumerate(records_per_shard)
            ],
        },
    )


@pytest.fixture
def catalog(tmp_path, users):
    from webapp.catalog.models import (
        ArtifactStatus,
        Flag,
        Mixture,
        MixtureComponent,
        MixtureVersion,
        Pool,
        RunProgress,
        Shard,
        Source,
        SourceFile,
        Taint,
        TokenizedSource,
        Tokenizer,
        TrainingRun,
    )
    from webapp.jobs.models import Job, JobState, JobUnit, UnitState

    src_dir = tmp_path / "sources" / "wiki"
    src_dir.mkdir(parents=True)
    lines = [json.dumps({"text": t, "language": "de" if "Der" in t else "en"}) for t in TEXTS]
    (src_dir / "part-0.jsonl").write_text("\n".join(lines) + "\n{not json\n")
    source = Source.objects.create(
        name="wiki",
        uri=str(src_dir),
        metadata_fields=["language"],
        status=Source.Status.SCANNED,
        num_files=1,
        num_documents=3,
        num_bytes=300,
        bad_lines=1,
    )
    sfile = SourceFile.objects.create(
        source=source,
        path="part-0.jsonl",
        size=300,
        num_documents=3,
        bad_lines=1,
        bad_input={"invalid_json": {"count": 1, "samples": ["part-0.jsonl:4: {not json"]}},
    )
    tok = Tokenizer.objects.create(spec="tiktoken:gpt2", vocab_size=50257, eos_id=50256)
    ts = TokenizedSource.objects.create(
        source=source,
        tokenizer=tok,
        status=ArtifactStatus.READY,
        path=str(tmp_path / "tok"),
        num_documents=3,
        num_tokens=60,
    )
    pool = Pool.objects.create(
        name="wiki-2048",
        status=ArtifactStatus.READY,
        path=str(tmp_path / "pool"),
        seq_len=2048,
        num_records=40,
        num_tokens=60,
        num_documents=3,
        fingerprint="f" * 16,
    )
    pool.parents.add(ts)
    write_pool_manifest(pool, [10, 10, 10, 10])
    Shard.objects.bulk_create(
        [
            Shard(pool=pool, index=i, prefix=f"{pool.path}/pool-{i:05d}", num_records=10)
            for i in range(4)
        ]
    )
    mixture = Mixture.objects.create(name="base-mix", description="Wikipedia only, for tests")
    version = MixtureVersion.objects.create(
        mixture=mixture,
        number=1,
        token_budget=1_000_000,
        status=ArtifactStatus.READY,
        path=str(tmp_path / "mix"),
        num_samples=400,
    )
    MixtureComponent.objects.create(version=version, pool=pool, weight=1.0, stage="main")
    run = TrainingRun.objects.create(
        name="olmo-tiny-a", mixture_version=version, last_step=20, created_by=users["editor"]
    )
    now = timezone.now()
    RunProgress.objects.bulk_create(
        [
            RunProgress(run=run, step=s, consumed_samples=s * 4, consumed_tokens=s * 4 * 2048)
            for s in (10, 20)
        ]
    )
    job = Job.objects.create(
        kind="tokenize",
        title="tokenize wiki",
        state=JobState.RUNNING,
        plan={},
        output_dir=str(tmp_path / "tok"),
        units_total=3,
        units_done=1,
        tokens=60,
        started_at=now - timedelta(seconds=30),
        log_tail="created: 3 unit(s) in 1 phase(s)",
        created_by=users["editor"],
    )
    JobUnit.objects.bulk_create(
        [
            JobUnit(job=job, unit_id="part-0.jsonl", index=0, phase=0, state=UnitState.SUCCEEDED),
            JobUnit(
                job=job,
                unit_id="part-1.jsonl",
                index=1,
                phase=0,
                state=UnitState.RUNNING,
                worker="w1@host",
                started_at=now,  # within the lease: its worker is alive
            ),
            JobUnit(job=job, unit_id="part-2.jsonl", index=2, phase=0, state=UnitState.QUEUED),
        ]
    )
    flag = Flag.objects.create(
        target=Flag.Target.FILE, source=source, source_file=sfile, reason="license unclear"
    )
    Taint.objects.create(flag=flag, run=run, documents=3)
    return {
        "source": source,
        "file": sfile,
        "tokenized": ts,
        "pool": pool,
        "mixture": mixture,
        "version": version,
        "run": run,
        "job": job,
        "flag": flag,
    }


def stdlib_code_pool(root, *, name: str = "p"):
    """(source, tokenized source, pool) built through the catalog from 24 standard-library
    modules written as one JSONL file under ``root/code``: several tokenized shards and
    pool shards of 64-token records. ``root`` must be a source root."""
    import sysconfig
    from pathlib import Path

    from webapp.catalog.models import ArtifactStatus
    from webapp.catalog.services.pools import pool_build
    from webapp.catalog.services.sources import source_register
    from webapp.catalog.services.tokenized import tokenized_source_build

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size > 3000)[:24]
    (root / "code").mkdir()
    (root / "code" / "mods.jsonl").write_text(
        "".join(json.dumps({"text": p.read_text(errors="replace")}) + "\n" for p in files)
    )
    source = source_register(name="code", uri=str(root / "code"))
    ts = tokenized_source_build(source_id=source.pk, shard_size=64 << 10)
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY
    pool = pool_build(
        name=name, tokenized_ids=[ts.pk], seq_len=64, memory=1 << 20, shard_size=40 << 10
    )
    pool.refresh_from_db()
    assert pool.status == ArtifactStatus.READY
    return source, ts, pool


def stdlib_code_source(root):
    """``root/code/mods.jsonl``: 24 standard-library modules, each with its ``module`` name
    and a ``size`` property (small or large), registered as source ``code`` with them.
    ``root`` must be a source root."""
    import sysconfig
    from pathlib import Path

    from webapp.catalog.services.sources import source_register

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size > 3000)[:24]
    (root / "code").mkdir()
    rows = []
    for p in files:
        text = p.read_text(errors="replace")
        rows.append({"text": text, "module": p.stem,
                     "size": "large" if len(text) > 20000 else "small"})  # fmt: skip
    (root / "code" / "mods.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return source_register(name="code", uri=str(root / "code"), metadata_fields=["module", "size"])


def catalog_world(root, *, steps: int, samples_per_step: int) -> dict:
    """A catalog built through the services in the data root, wherever it is (a directory
    or an s3:// prefix), with jobs running in this process (eager): the source of
    ``stdlib_code_source`` tokenized, pool ``code`` of 64-token records, mixture ``m`` v1
    reading half of it, its materialized copy, and run ``r`` that reported ``steps`` steps
    of ``samples_per_step`` samples. ``root`` must be a source root."""
    from webapp.catalog.models import ArtifactStatus, Export
    from webapp.catalog.services.exports import mixture_version_materialize
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
    from webapp.catalog.services.pools import pool_build
    from webapp.catalog.services.runs import run_progress_record, run_register
    from webapp.catalog.services.tokenized import tokenized_source_build

    source = stdlib_code_source(root)
    ts = tokenized_source_build(source_id=source.pk, shard_size=64 << 10)
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY, ts.job.error
    pool = pool_build(
        name="code", tokenized_ids=[ts.pk], seq_len=64, memory=1 << 20, shard_size=40 << 10
    )
    pool.refresh_from_db()
    assert pool.status == ArtifactStatus.READY, pool.job.error
    mixture = mixture_get_or_create(name="m")
    version = mixture_version_create(
        mixture_id=mixture.pk,
        components=[{"pool": pool.pk, "weight": 1.0}],
        token_budget=64 * (pool.num_records // 2),  # half the pool: some data never read
    )
    version.refresh_from_db()
    assert version.status == ArtifactStatus.READY, version.job.error
    mixture_version_materialize(version_id=version.pk, shard_bytes=8 << 10)
    copy = Export.objects.get(version=version, format=Export.Format.MATERIALIZED)
    assert copy.status == ArtifactStatus.READY, copy.job.error
    run = run_register(name="r", mixture_version_id=version.pk)
    for step in range(1, steps + 1):
        run_progress_record(run_id=run.pk, step=step, consumed_samples=step * samples_per_step)
    run.refresh_from_db()
    return {"source": source, "ts": ts, "pool": pool, "mixture": mixture, "version": version,
            "copy": copy, "run": run}  # fmt: skip


def first_sample_by_doc(version_path: str, pool_path: str) -> dict[int, int]:
    """Per source document id: the first sample of the version whose record holds any of
    its tokens, read sample by sample from the schedule and the pool's segments (documents
    never read are absent). Computed from shardcore's readers, independently of the pages."""
    from shardcore.mixture import Mixture
    from shardcore.pool import PoolReader

    mix = Mixture(version_path)
    pool = PoolReader(pool_path)
    doc_ids = pool.documents.column("doc_id").to_numpy()
    first: dict[int, int] = {}
    for i in range(mix.num_samples):
        _, record = mix.sample(i)
        for row in pool.boundaries(record)["doc"]:
            if row >= 0:
                first.setdefault(int(doc_ids[row]), i)
    return first


@pytest.fixture
def computed(jobs_inline):
    """``computed(client, url)``: a page that shows numbers measured from an artifact's
    files, opened twice: the first answer says they are being computed (its request only
    asks a worker: the task runs when the request's transaction commits, here through the
    real task in Celery's eager mode), the second shows the stored numbers. Returns the
    second response."""

    def get(client, url: str):
        with jobs_inline():
            first = client.get(url)
        assert first.status_code == 200
        assert "Being computed by a worker" in first.content.decode(), url
        second = client.get(url)
        assert "Being computed by a worker" not in second.content.decode(), url
        return second

    return get

"""Jobs on real ``celery worker`` subprocesses (Redis broker, Postgres catalog): one
tokenize job spread over two workers, a worker SIGKILLed mid-job and the job rerun to the
same bytes as a clean run, and every kind of bad input surfacing on the job row."""

from __future__ import annotations

import gzip
import json
import sysconfig
from pathlib import Path

import pytest

from shardcore.tokenize import tokenize
from tests.support.services import catalog_roots, wait_for
from webapp.catalog.models import ArtifactStatus, Shard, SourceFile, TokenizedSource
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from webapp.jobs import services as jobs
from webapp.jobs.models import Job, JobState, JobUnit, UnitState

pytestmark = pytest.mark.services

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def stdlib_docs(n: int, offset: int = 0) -> list[dict]:
    files = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 2000)[offset : offset + n]
    return [{"text": p.read_text(errors="replace"), "name": p.name, "lang": "py"} for p in files]


def write_jsonl(path: Path, docs: list[dict], tail: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(json.dumps(d).encode() + b"\n" for d in docs) + tail)
    return path


# Three files of real text, ~1.5 MB each, tokenized in units of 2 MiB: one unit per file,
# long enough (a few hundred ms) to be caught running and killed.
KILLABLE_UNIT_BYTES = 2 << 20
KILLABLE_SHARD = 256 << 10


def killable_source(root: Path, name: str):
    """Registers the source ``name`` of three files under ``root``, one unit each."""
    d = root / name
    for k, (n, offset) in enumerate(((50, 0), (50, 50), (57, 100))):
        write_jsonl(d / f"part-{k}.jsonl", stdlib_docs(n, offset=offset))
    return source_register(name=name, uri=str(d))


def killable_build(source):
    return tokenized_source_build(
        source_id=source.pk, shard_size=KILLABLE_SHARD, unit_bytes=KILLABLE_UNIT_BYTES
    )


def killable_clean_run(root: Path, name: str, out: Path) -> dict[str, bytes]:
    """The shards of the source ``name`` tokenized in this process, nothing killed."""
    files = sorted(str(p) for p in (root / name).iterdir())
    tokenize(files, str(out), shard_size=KILLABLE_SHARD, unit_bytes=KILLABLE_UNIT_BYTES)
    return shard_bytes(out)


def kill_mid_unit(celery_workers, job_id: int) -> JobUnit:
    """Start a worker, SIGKILL it while it runs a unit; returns that unit, left running.
    A unit can finish between seeing it running and the kill: then try again on the next."""
    for attempt in range(3):
        worker = celery_workers(f"doomed{attempt}")
        unit = wait_for(
            lambda: JobUnit.objects.filter(job_id=job_id, state=UnitState.RUNNING).first(),
            timeout=120,
            interval=0.005,
            what="a unit running",
        )
        worker.kill()
        stuck = JobUnit.objects.get(pk=unit.pk)
        if stuck.state == UnitState.RUNNING and stuck.attempts == unit.attempts:
            return stuck
    raise AssertionError("every unit finished before its worker was killed")


@pytest.fixture
def catalog_env(tmp_path, settings, monkeypatch):
    """Source roots and data root for this process and for worker subprocesses."""
    root, _ = catalog_roots(tmp_path, settings, monkeypatch)
    return root


def wait_job(job_id: int, timeout: float = 180) -> Job:
    def done():
        job = Job.objects.get(pk=job_id)
        return job if job.state in (JobState.SUCCEEDED, JobState.FAILED) else None

    return wait_for(done, timeout=timeout, interval=0.3, what=f"job {job_id} to finish")


def shard_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((directory / "shards").iterdir())}


def test_it_spreads_one_tokenize_job_over_two_workers(
    postgres, redis_url, celery_workers, catalog_env
):
    write_jsonl(catalog_env / "code" / "a.jsonl", stdlib_docs(30))
    write_jsonl(catalog_env / "code" / "b.jsonl", stdlib_docs(30, offset=30))
    source = source_register(name="code", uri=str(catalog_env / "code"))
    w1, w2 = celery_workers("alpha"), celery_workers("beta")

    ts = tokenized_source_build(source_id=source.pk, shard_size=64 << 10, unit_bytes=48 << 10)
    job = wait_job(ts.job_id)

    assert job.state == JobState.SUCCEEDED, job.log_tail + w1.log() + w2.log()
    workers = set(JobUnit.objects.filter(job=job).values_list("worker", flat=True))
    assert {w.split("@")[0] for w in workers} == {"alpha", "beta"}
    assert job.units_done == job.units_total > 4
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY
    assert ts.num_documents == source.num_documents == job.documents == 60
    assert ts.num_tokens == job.tokens > 0
    assert Shard.objects.filter(tokenized_source=ts).count() > 1
    assert ts.fingerprint and Path(ts.manifest_path).exists()
    assert ts.params["file_ranges"] == {"a.jsonl": [0, 30], "b.jsonl": [30, 60]}


def test_it_loses_nothing_when_a_worker_is_killed_mid_job(
    postgres, redis_url, celery_workers, catalog_env, tmp_path
):
    write_jsonl(catalog_env / "big" / "a.jsonl", stdlib_docs(40))
    source = source_register(name="big", uri=str(catalog_env / "big"))
    worker = celery_workers("doomed")

    ts = tokenized_source_build(source_id=source.pk, shard_size=32 << 10, unit_bytes=32 << 10)
    wait_for(
        lambda: Job.objects.get(pk=ts.job_id).units_done >= 5,
        timeout=120,
        interval=0.05,
        what="a few units done",
    )
    worker.kill()
    job = Job.objects.get(pk=ts.job_id)
    assert job.state == JobState.RUNNING and job.units_done < job.units_total, job.log_tail

    jobs.job_retry(job_id=job.pk, include_running=True)
    celery_workers("rescuer")
    job = wait_job(job.pk)

    assert job.state == JobState.SUCCEEDED, job.log_tail
    assert not JobUnit.objects.filter(job=job).exclude(state=UnitState.SUCCEEDED).exists()
    clean = tmp_path / "clean"
    tokenize(
        [str(catalog_env / "big" / "a.jsonl")],
        str(clean),
        shard_size=32 << 10,
        unit_bytes=32 << 10,
    )
    assert shard_bytes(Path(ts.path)) == shard_bytes(clean)
    ts.refresh_from_db()
    assert ts.num_documents == job.documents == 40  # no duplicated or missing document


def test_it_surfaces_every_kind_of_bad_input_on_the_job_row(
    postgres, redis_url, celery_workers, catalog_env
):
    d = catalog_env / "dirty"
    bad_lines = (
        b'{"text": "unterminated\n'  # invalid_json
        b'{"body": "no text here"}\n'  # missing_text_field
        b'{"text": 42}\n'  # text_not_string
        b'{"text": "caf\xe9 latin-1"}\n'  # invalid_utf8
        b'{"text": "   "}\n'  # empty_document
    )
    write_jsonl(d / "a.jsonl", stdlib_docs(3), tail=bad_lines)
    (d / "empty.jsonl").write_bytes(b"")  # empty_file
    whole = gzip.compress(b"".join(json.dumps(x).encode() + b"\n" for x in stdlib_docs(2)))
    (d / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])  # truncated_compressed
    source = source_register(name="dirty", uri=str(d))
    celery_workers("sieve")

    ts = tokenized_source_build(source_id=source.pk)
    job = wait_job(ts.job_id)

    assert job.state == JobState.SUCCEEDED, job.log_tail
    reasons = {reason for per_file in job.bad_input.values() for reason in per_file}
    assert reasons >= {
        "invalid_json",
        "missing_text_field",
        "text_not_string",
        "invalid_utf8",
        "empty_document",
        "empty_file",
        "truncated_compressed",
    }
    assert job.bad_lines >= 7
    a = job.bad_input[str(d / "a.jsonl")]
    assert a["invalid_json"]["samples"], a
    f = SourceFile.objects.get(source=source, path="a.jsonl")
    assert f.bad_lines == 5 and f.num_documents == 3
    assert TokenizedSource.objects.get(pk=ts.pk).num_documents == job.documents


def test_it_fails_the_job_with_the_error_of_the_failing_unit(
    postgres, redis_url, celery_workers, catalog_env
):
    write_jsonl(catalog_env / "gone" / "a.jsonl", stdlib_docs(3))
    source = source_register(name="gone", uri=str(catalog_env / "gone"))
    ts = tokenized_source_build(source_id=source.pk)
    # The stored plan names a tokenizer that does not exist: a permanent unit failure.
    Job.objects.filter(pk=ts.job_id).update(
        plan={**ts.job.plan, "params": {**ts.job.plan["params"], "tokenizer": "tiktoken:nope"}}
    )
    celery_workers("strict")

    job = wait_job(ts.job_id)

    assert job.state == JobState.FAILED
    assert job.error.startswith("unit tok-000000 failed:"), job.error
    assert JobUnit.objects.get(job=job, unit_id="tok-000000").state == UnitState.FAILED
    assert TokenizedSource.objects.get(pk=ts.pk).status == ArtifactStatus.FAILED

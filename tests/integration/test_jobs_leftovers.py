"""A writer killed mid-write leaves its temporary (``.<name>.<random>.tmp``, see
shardcore.atomic) in the output; the job's rerun and finalize leave the output holding
exactly the bytes of a clean run and no stray file."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardcore import atomic
from tests.integration.test_jobs_engine import FAIL_ON, RECORDER, _plan, eager
from webapp.jobs import services
from webapp.jobs.models import JobState

pytestmark = pytest.mark.services
__all__ = ["eager"]


def _files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and "_units" not in p.parts and p.name != "_plan.json"
    }


def _killed_writer(path: Path) -> Path:
    """What a writer SIGKILLed mid-write leaves: its temporary, half written, never
    renamed nor deleted (the process died before ``commit`` or ``discard``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = atomic.AtomicFile(path)
    f.file.write(b'{"lines": 1')
    f.file.close()
    return f.tmp


def test_a_rerun_after_a_killed_writer_leaves_no_temporary(postgres, eager, tmp_path):
    clean = services.job_create(plan=_plan(tmp_path / "clean"), recorder=RECORDER)
    clean.refresh_from_db()
    assert clean.state == JobState.SUCCEEDED, clean.log_tail

    out = tmp_path / "out"
    FAIL_ON.add("count-2")  # the unit dies...
    job = services.job_create(plan=_plan(out), recorder=RECORDER)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    # ...with its output half written, and an earlier writer's left in a subdirectory.
    left = [_killed_writer(out / "count-2.json"), _killed_writer(out / "shards" / "x.idx")]
    assert all(p.exists() and p.name.endswith(".tmp") for p in left)

    FAIL_ON.clear()
    services.job_retry(job_id=job.pk)
    job.refresh_from_db()

    assert job.state == JobState.SUCCEEDED, job.log_tail
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert _files(out) == _files(tmp_path / "clean")

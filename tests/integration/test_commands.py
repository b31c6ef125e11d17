"""``manage.py catalog``: operators script what the pages do; errors are one line."""

from __future__ import annotations

import json
import sysconfig
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from webapp.catalog.models import Flag, Source

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _call(*args) -> str:
    out = StringIO()
    call_command("catalog", *args, stdout=out)
    return out.getvalue()


def test_it_registers_a_source_and_flags_a_file(db, tmp_path, settings):
    settings.SOURCE_ROOTS = [tmp_path]
    docs = [{"text": p.read_text()} for p in sorted(STDLIB.glob("*.py"))[:3]]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))

    assert "3 documents" in _call("source-register", "std", str(tmp_path))
    source = Source.objects.get(name="std")
    assert "0 taint(s)" in _call("flag", str(source.pk), "PII", "--file", "a.jsonl")
    assert Flag.objects.get().target == "file"


def test_it_refuses_a_path_outside_the_roots_with_one_line(db, tmp_path, settings):
    settings.SOURCE_ROOTS = [tmp_path / "roots"]
    with pytest.raises(CommandError, match="outside the source roots"):
        _call("source-register", "etc", "/etc")


@pytest.fixture
def eager_jobs():
    """Jobs run in this process as their transaction commits (the worker path is covered by
    test_flow_pipeline and test_jobs_*)."""
    from workers.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def _id(out: str, word: str) -> int:
    """The id after ``word`` in a command's one-line answer, e.g. "job 3 queued"."""
    words = out.replace(":", " ").split()
    return int(words[words.index(word) + 1])


def test_it_builds_materializes_exports_and_resumes_a_staged_mixture(
    transactional_db, tmp_path, settings, eager_jobs
):
    import shlex

    import yaml
    from megatron.core.datasets.utils import get_blend_from_list

    from shardcore.export import megatron_blend
    from shardcore.locate import locate_mixture
    from webapp.catalog.models import ArtifactStatus, Export, MixtureVersion

    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp_path / "src"], tmp_path / "data"
    files = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 2000)[:16]
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.jsonl").write_text(
        "".join(json.dumps({"text": p.read_text()}) + "\n" for p in files)
    )
    source = _id(_call("source-register", "std", str(tmp_path / "src")), "source")
    ts = _id(_call("tokenize", str(source)), "source")
    pools = [
        _id(_call("pool-build", name, str(ts), "--seq-len", "64", "--seed", seed), "pool")
        for name, seed in (("main", "0"), ("late", "1"))
    ]
    out = _call(
        "mixture-version", "mix",
        json.dumps([{"pool": pools[0], "weight": 1}, {"pool": pools[1], "weight": 1,
                                                      "stage": "anneal"}]),
        "--token-budget", "64000", "--stages", '[{"name": "anneal", "tokens": 6400}]',
    )  # fmt: skip
    version = MixtureVersion.objects.get(pk=_id(out, "version"))
    assert f"{version.num_samples} samples" in out and version.fingerprint in out
    assert [s["name"] for s in version.params["stages"]] == ["main", "anneal"]
    assert version.params["stages"][1]["num_samples"] == 6400 // 64

    job = _id(_call("materialize", str(version.pk), "--shard-bytes", "65536"), "job")
    copy = Export.objects.get(job_id=job)
    assert copy.status == ArtifactStatus.READY and copy.num_records == version.num_samples
    assert copy.shards.count() > 1
    with pytest.raises(CommandError, match="materialized already"):
        _call("materialize", str(version.pk))

    megatron = Path(_call("export", str(version.pk), "megatron").split(": ", 1)[1].strip())
    lines = [x for x in megatron.read_text().splitlines() if x.startswith("--data-path ")]
    for stage, line in zip(("main", "anneal"), lines, strict=True):
        prefixes, weights = get_blend_from_list(shlex.split(line)[1:])
        assert (weights, prefixes) == megatron_blend(version.path, stage)
    nano = Path(
        _call("export", str(version.pk), "nanotron", "--global-batch-size", "4")
        .split(": ")[1]
        .strip()
    )
    anneal = list(yaml.safe_load_all(nano.read_text()))[-1]["data_stages"][1]
    assert anneal["start_training_step"] == version.params["stages"][1]["first_sample"] // 4 + 1
    with pytest.raises(CommandError, match="not whole global batches of 8"):
        _call("export", str(version.pk), "nanotron", "--global-batch-size", "8")
    with pytest.raises(CommandError, match="invalid choice"):
        _call("export", str(version.pk), "parquet")
    with pytest.raises(CommandError, match="no mixture version 999"):
        _call("export", "999", "json")

    run = _id(_call("run-register", "r1", str(version.pk)), "run")
    last = version.num_samples - 1  # in the anneal stage
    _call("run-progress", str(run), "100", str(last))
    position = json.loads(_call("run-resume", str(run)))
    expected = locate_mixture(version.path, sample=last)
    assert position["stage"] == "anneal" and position["pool_id"] == pools[1]
    assert {k: position[k] for k in expected if k != "pool"} == {
        k: v for k, v in expected.items() if k != "pool"
    }


@pytest.mark.parametrize(
    "args,line",
    [
        (["tokenize", "999"], "no source 999"),
        (["source-scan", "999"], "no source 999"),
        (["run-resume", "999"], "no training run 999"),
        (["run-progress", "999", "1", "1"], "no training run 999"),
        (["job-cancel", "999"], "no job 999"),
        (["job-retry", "999"], "no job 999"),
    ],
)
def test_an_id_that_names_nothing_is_one_line_naming_it(db, args, line):
    with pytest.raises(CommandError) as raised:
        _call(*args)
    assert str(raised.value) == line


def test_a_data_root_on_a_bucket_that_does_not_exist_is_one_line(
    db, tmp_path, settings, s3_bucket, moto_server, monkeypatch
):
    settings.SOURCE_ROOTS = [tmp_path]
    docs = [{"text": p.read_text()} for p in sorted(STDLIB.glob("*.py"))[:3]]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    _call("source-register", "std", str(tmp_path))
    root = f"{s3_bucket}-missing/data"
    settings.DATA_ROOT = root
    monkeypatch.setenv("SHARDYARD_DATA", root)
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    with pytest.raises(CommandError) as raised:
        _call("tokenize", str(Source.objects.get(name="std").pk))
    line = str(raised.value)
    assert line.startswith(f"the object store ({moto_server.endpoint}) did not answer")
    assert "NoSuchBucket" in line and "the bucket exists" in line

"""Every command-line failure a user can cause is one line on stderr that names the path,
line or field, with exit status 2: never a traceback, never a half-built artifact."""

from __future__ import annotations

import json

import pytest

from shardcore.cli import main
from tests.support import corpora


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-errors")
    records = [{"text": t, "lang": "en", "meta": {"module": m}} for m, t in corpora.docstrings(8)]
    corpora.write_jsonl(root / "src" / "a.jsonl", records)
    (root / "dir.jsonl").mkdir()  # a directory where a file is expected
    (root / "notes.csv").write_text("text\nhello\n")
    assert main(["tokenize", str(root / "src"), "--out", str(root / "tok"), "--quiet"]) == 0
    return root


CASES = [
    # (name, argv with {w} for the work directory, words the one line must contain)
    ("missing path", "tokenize {w}/nope.jsonl --out {w}/t1", ["nope.jsonl", "no such file"]),
    ("unreadable file", "tokenize {w}/dir.jsonl --out {w}/t2", ["dir.jsonl"]),
    ("unknown format", "tokenize {w}/notes.csv --out {w}/t3", ["notes.csv", "format"]),
    ("bad tokenizer", "tokenize {w}/src --out {w}/t4 --tokenizer bogus", ["bogus"]),
    (
        "missing tokenizer file",
        "tokenize {w}/src --out {w}/t5 --tokenizer hf:{w}/none.json",
        ["none.json"],
    ),  # fmt: skip
    ("bad size", "tokenize {w}/src --out {w}/t6 --shard-size 12QB", ["--shard-size", "12QB"]),
    ("existing output", "tokenize {w}/src --out {w}/tok", ["tok", "already"]),
    ("bad filter", "pool {w}/tok --out {w}/p1 --seq-len 8 --filter lang=", ["filter", "lang="]),
    (
        "unknown property",
        "pool {w}/tok --out {w}/p2 --seq-len 8 --filter colour>1",
        ["colour", "known"],
    ),  # fmt: skip
    (
        "unknown nested property",
        "pool {w}/tok --out {w}/p3 --seq-len 8 --filter meta.colour>1",
        ["colour"],
    ),  # fmt: skip
    (
        "empty selection",
        "pool {w}/tok --out {w}/p4 --seq-len 8 --filter lang='de'",
        ["selects none", "--allow-empty"],
    ),  # fmt: skip
    ("bad memory", "pool {w}/tok --out {w}/p5 --seq-len 8 --memory lots", ["--memory", "lots"]),
    ("not an artifact", "pool {w}/src --out {w}/p6 --seq-len 8", ["src", "manifest"]),
    ("missing artifact", "verify {w}/nothing", ["nothing", "no such file"]),
    ("missing pool", "mix --component {w}/nothing:1 --tokens 100 --out {w}/m1", ["nothing"]),
    ("wrong kind", "mix --component {w}/tok:1 --tokens 100 --out {w}/m2", ["tok", "not a pool"]),
    ("missing mixture", "export {w}/nothing --format json", ["nothing", "no such file"]),
    ("locate nothing", "locate {w}/nothing --sample 1", ["nothing"]),
    ("unknown option", "pool {w}/tok --out {w}/p7 --seq-len 8 --colour red", ["--colour"]),
]


@pytest.mark.parametrize("name,argv,words", CASES, ids=[c[0] for c in CASES])
def test_it_fails_in_one_line_with_status_2(work, capsys, name, argv, words):
    code = main(argv.format(w=work).split())
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("shardyard")
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], lines[0]
    # nothing half-built is left where the output was asked for
    for out in ("t1", "t2", "t3", "t4", "t5", "t6", "p1", "p2", "p3", "p4", "p5", "p6"):
        assert not (work / out / "manifest.json").exists()


def test_it_builds_an_empty_pool_only_when_asked(work, capsys):
    args = ["pool", str(work / "tok"), "--out", str(work / "empty"), "--seq-len", "8",
            "--filter", "lang='de'", "--quiet", "--json"]  # fmt: skip
    assert main(args) == 2
    assert main([*args, "--allow-empty"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 0


S3_CASES = [
    # (name, argv with {w} for the work directory and {b} for a bucket that does not exist)
    ("tokenize into", "tokenize {w}/src --out s3://{b}/tok"),
    ("pool from", "pool s3://{b}/tok --out s3://{b}/pool --seq-len 8"),
    ("verify", "verify s3://{b}/pool"),
    ("mix", "mix --component s3://{b}/pool:1 --tokens 100 --out s3://{b}/mix"),
    ("materialize", "materialize s3://{b}/mix --out s3://{b}/flat"),
]


@pytest.mark.parametrize(
    "argv,words",
    [
        ("verify s3://", "s3://: no bucket in the URL"),
        ("tokenize {w}/src --out s3://", "s3://: no bucket in the URL"),
        ("verify gs://b/x", "gs://b/x: unsupported storage scheme 'gs'"),
        ("tokenize {w}/src --out gs://b/x", "gs://b/x: unsupported storage scheme 'gs'"),
        ("tokenize gs://b/x --out {w}/t7", "gs://b/x: cannot be read"),
    ],
)
def test_a_location_no_store_reads_is_one_line(work, capsys, argv, words):
    assert main(argv.format(w=work).split()) == 2
    err = capsys.readouterr().err
    (line,) = err.strip().splitlines()
    assert words in line and "Traceback" not in err, err


@pytest.mark.parametrize("name,argv", S3_CASES, ids=[c[0] for c in S3_CASES])
def test_a_bucket_that_does_not_exist_is_named_in_one_line(work, s3_bucket, capsys, name, argv):
    missing = s3_bucket.removeprefix("s3://") + "-missing"
    code = main(argv.format(w=work, b=missing).split())
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("shardyard ") and f"s3://{missing}:" in line, line
    assert "does not exist" in line, line


def test_missing_credentials_are_one_line_naming_the_variables(
    work, s3_bucket, capsys, monkeypatch, tmp_path
):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code = main(["verify", f"{s3_bucket}/pool"])
    err = capsys.readouterr().err
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert "credentials" in line and "AWS_ACCESS_KEY_ID" in line, line

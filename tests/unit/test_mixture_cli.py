"""The mix, export, quality, materialize and locate-in-a-mixture commands, end to end."""

from __future__ import annotations

import json
import shlex

import pytest

from shardcore.cli import main
from shardcore.locate import locate_any
from tests.unit import mix_fixtures

SEQ = 64


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    return mix_fixtures.build_pools(tmp_path_factory.mktemp("cli"), seq_len=SEQ)


def test_it_mixes_exports_measures_and_materializes(pools, tmp_path, capsys):
    out = tmp_path / "mix"
    rc = main(
        ["mix", "--component", f"{pools['early']}:0.6", "--component", f"{pools['late']}:0.4",
         "--tokens", str(SEQ * 5000), "--seed", "3", "--order", "diversity", "--order-by", "package",
         "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    assert "5,000 samples" in capsys.readouterr().out
    assert main(["export", str(out), "--format", "megatron"]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if "--data-path" in x)
    assert len(shlex.split(line.split("--data-path ", 1)[1])) == 2 * 2  # one shard per pool
    assert "ORDER NOT GUARANTEED" in text  # no --out: no index cache
    meg = tmp_path / "megatron"
    argv = ["export", str(out), "--format", "megatron", "--out", str(meg), "--seed", "7"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "ORDER NOT GUARANTEED" not in text and f"--data-cache-path {meg / 'cache'}" in text
    assert "--seed 7 --split 100,0,0 --tokenizer-type NullTokenizer --vocab-size" in text
    assert (meg / "data-args-main.txt").is_file() and (meg / "megatron.txt").read_text() == text
    # One BlendedDataset key per tokenizer identity the export keys (megatron-core 0.16-0.19).
    assert len(list((meg / "cache").glob("*-BlendedDataset-train-description.txt"))) == 3
    assert main(["export", str(out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_samples"] == 5000
    assert main(["quality", str(out), "--by", "pool", "--batch-size", "256"]) == 0
    report = capsys.readouterr().out
    assert "max dev" in report and "distinct values per batch of 256" in report
    assert main(["quality", str(pools["late"]), "--by", "package", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["windows"]["num_samples"] > 0
    assert main(["materialize", str(out), "--out", str(tmp_path / "flat")]) == 0
    assert "materialized 5,000 samples" in capsys.readouterr().out
    argv = ["export", str(tmp_path / "flat"), "--format", "megatron", "--out", str(meg / "f")]
    assert main(argv) == 0
    assert "materialized mixture" in capsys.readouterr().out
    # Artifacts are immutable: neither command builds over a finished one.
    for argv in (
        ["materialize", str(out), "--out", str(tmp_path / "flat")],
        ["mix", "--component", f"{pools['early']}:1", "--tokens", "640", "--out", str(out)],
    ):
        assert main(argv) == 2
        assert "already holds a finished artifact" in capsys.readouterr().err
    assert locate_any(out, tokens=SEQ * 4999)["sample"] == 4999


def test_it_reads_a_spec_file_and_reports_user_errors(pools, tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"tokens: {SEQ * 1000}\ncomponents:\n  - pool: {pools['early']}\n    weight: 1\n"
        f"  - pool: {pools['middle']}\n    weight: 1\n"
    )
    assert main(["mix", "--spec", str(spec), "--out", str(tmp_path / "m"), "--plan-only"]) == 0
    assert "epochs" in capsys.readouterr().out
    rc = main(
        [
            "mix",
            "--component",
            f"{pools['early']}:-1",
            "--tokens",
            "1000",
            "--out",
            str(tmp_path / "x"),
        ]
    )
    assert rc == 2
    assert "weight" in capsys.readouterr().err
    rc = main(["mix", "--component", "nowhere:1", "--tokens", "1000", "--out", str(tmp_path / "x")])
    assert rc == 2
    assert "unknown pool" in capsys.readouterr().err


def test_export_out_says_what_it_wrote_and_counts_have_separators(pools, tmp_path, capsys):
    # A pool of the 300 stdlib modules: thousands of 65-token records, written "7,015".
    src = mix_fixtures.tokenized_code(tmp_path)
    assert main(["pool", str(src), "--out", str(tmp_path / "p"), "--seq-len", "64",
                 "--quiet"]) == 0  # fmt: skip
    line = capsys.readouterr().out
    records = json.loads((tmp_path / "p" / "manifest.json").read_text())["num_records"]
    assert records >= 1000 and f"{records:,} records of 65 tokens from 300 documents" in line

    mix = tmp_path / "mix"
    assert main(["mix", "--component", f"{pools['early']}:1", "--tokens", str(SEQ * 2000),
                 "--out", str(mix)]) == 0  # fmt: skip
    assert "2,000 samples" in capsys.readouterr().out
    out = tmp_path / "olmo.yaml"
    assert main(["export", str(mix), "--format", "olmo", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    size = out.stat().st_size
    assert said == f"wrote the olmo export of {mix} to {out} ({size:,} bytes)\n"

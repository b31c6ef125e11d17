"""The executor options and the ``unit`` commands from the command line, without a cluster:
what ``--dry-run`` would submit, the unit runner on a saved plan, and the refusals (each
one line naming the option or value). The builds on a real Slurm cluster and a real Ray
head are tests/integration/test_slurm_executor.py and test_ray_executor.py."""

from __future__ import annotations

import json
import re

import pytest

from shardcore import units
from shardcore.cli import main
from shardcore.demo import build_demo_corpus
from shardcore.executors.slurm import index_ranges


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("executors")
    build_demo_corpus(root / "corpus", max_bytes_per_source=30_000)
    return root


def test_it_prints_the_scripts_a_slurm_build_would_submit(corpus, tmp_path, capsys):
    out = tmp_path / "tok"
    argv = ["tokenize", str(corpus / "corpus"), "--out", str(out), "--unit-size", "10KB",
            "--executor", "slurm", "--dry-run", "--units-per-task", "3", "--max-running", "5",
            "--partition", "cpu", "--account", "lab", "--time", "1:00:00", "--mem", "4G",
            "--sbatch-option=--gres=gpu:1"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    commands = [line[2:] for line in printed.splitlines() if line.startswith("# sbatch ")]
    assert not out.exists()  # nothing written: the plan is not even saved
    first, *rest = commands
    assert "--dependency" not in first and re.search(r"--array=0-\d+%5", first)
    for flag in ("--partition=cpu", "--account=lab", "--time=1:00:00", "--mem=4G",
                 "--gres=gpu:1", "--requeue"):  # fmt: skip
        assert flag in first
    # Each later phase, and finalize last, waits for the one before.
    assert all("--dependency=afterok:<p" in c for c in rest)
    assert rest[-1].endswith("finalize.sh")
    assert "unit run" in printed and '--phase 1 --units "$A-$B"' in printed
    assert "K=3;" in printed


def test_it_writes_slurm_array_indices_as_ranges():
    assert index_ranges([0, 1, 2, 3, 4, 7, 9, 10, 11, 12]) == "0-4,7,9-12"
    assert index_ranges([5]) == "5"
    assert index_ranges([]) == ""


def test_unit_commands_run_finalize_and_count_a_saved_build(corpus, tmp_path, capsys):
    from shardcore.tokenize import plan_tokenize

    out = tmp_path / "tok"
    plan = plan_tokenize([str(corpus / "corpus")], str(out), unit_bytes=10_000)
    units.save_plan(plan)
    assert main(["unit", "status", str(out)]) == 0
    assert f"phase 1: 0/{len(plan.phases[0])} units done" in capsys.readouterr().out
    for p, phase in enumerate(plan.phases, start=1):
        assert main(["unit", "run", str(out), "--phase", str(p), "--units",
                     f"0-{len(phase) - 1}"]) == 0  # fmt: skip
    said = capsys.readouterr().out
    assert ": started" in said and ": done in" in said
    assert main(["unit", "run", str(out), "--phase", "1", "--units", "0"]) == 0
    assert "done earlier" in capsys.readouterr().out
    assert main(["unit", "finalize", str(out)]) == 0
    assert main(["unit", "finalize", str(out)]) == 0
    assert "finalized earlier" in capsys.readouterr().out
    assert json.loads((out / "manifest.json").read_text())["kind"] == "tokenized"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["unit", "run", "{out}", "--phase", "9", "--units", "0-1"], "--phase 9: the plan has phases 1-"),
        (["unit", "run", "{out}", "--phase", "1", "--units", "5-2"], "--units '5-2': the phase has units 0-"),
        (["unit", "run", "{out}", "--phase", "1", "--units", "a-b"], "expected A-B"),
        (["unit", "status", "{empty}"], "holds no saved plan (_plan.json)"),
    ],
)  # fmt: skip
def test_unit_commands_refuse_what_they_cannot_run(corpus, tmp_path, capsys, argv, message):
    from shardcore.tokenize import plan_tokenize

    out = tmp_path / "tok"
    units.save_plan(plan_tokenize([str(corpus / "corpus")], str(out), unit_bytes=10_000))
    (tmp_path / "empty").mkdir()
    argv = [a.format(out=out, empty=tmp_path / "empty") for a in argv]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_it_refuses_an_unknown_executor_and_slurm_options_elsewhere(
    corpus, tmp_path, capsys, monkeypatch
):
    base = ["tokenize", str(corpus / "corpus"), "--out", str(tmp_path / "tok")]
    monkeypatch.setenv("SHARDYARD_EXECUTOR", "kubernetes")
    assert main(base) == 2
    assert "SHARDYARD_EXECUTOR='kubernetes': expected one of local, slurm, ray" in (
        capsys.readouterr().err
    )
    monkeypatch.delenv("SHARDYARD_EXECUTOR")
    assert main([*base, "--no-wait"]) == 2
    assert "--no-wait and --dry-run submit Slurm jobs; --executor is local" in (
        capsys.readouterr().err
    )
    assert main([*base, "--executor", "slurm", "--units-per-task", "0"]) == 2
    assert "--units-per-task: 0 is below 1" in capsys.readouterr().err
    assert not (tmp_path / "tok").exists()


def test_a_slurm_build_into_an_output_of_another_build_is_refused(corpus, tmp_path, capsys):
    out = tmp_path / "tok"
    assert main(["tokenize", str(corpus / "corpus"), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    argv = ["tokenize", str(corpus / "corpus" / "docstrings"), "--out", str(out),
            "--executor", "slurm", "--dry-run"]  # fmt: skip
    assert main(argv) == 2
    assert "with other inputs or parameters" in capsys.readouterr().err
    # The same build again is recognized as finished, on any engine.
    argv = ["tokenize", str(corpus / "corpus"), "--out", str(out), "--executor", "slurm",
            "--dry-run", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    assert "finished earlier" in capsys.readouterr().err

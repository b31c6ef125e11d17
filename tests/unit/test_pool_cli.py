"""``shardyard pool`` and ``shardyard locate`` from the command line."""

from __future__ import annotations

import json

from shardcore import units
from shardcore.cli import main
from shardcore.pool import Pool
from tests.unit import pool_fixtures as pf


def test_it_builds_a_pool_and_locates_in_it_from_the_command_line(tmp_path, capsys):
    src = pf.write_tokenized(tmp_path / "src", pf.corpus("prose", 400), shard_docs=100)
    out = tmp_path / "pool"
    argv = ["pool", str(src), "--out", str(out), "--seq-len", "64", "--memory", "1MiB"]
    assert (
        main([*argv, "--val-fraction", "0.1", "--filter", "n_tokens > 5", "--quiet", "--json"]) == 0
    )
    totals = json.loads(capsys.readouterr().out)
    pool = Pool(out)
    assert totals["records"] == pool.num_records and totals["val"]["path"] == "val"
    assert main(["locate", str(out), "--tokens", str(64 * 10 + 3), "--json"]) == 0
    where = json.loads(capsys.readouterr().out)
    assert where == pool.locate(sample=10) | {"token_offset": 3}
    assert main(argv) == 2  # the pool exists: refuse to overwrite
    assert "already holds a finished artifact" in capsys.readouterr().err


def test_it_reports_a_bad_filter_as_a_user_error(tmp_path, capsys):
    src = pf.write_tokenized(tmp_path / "src", pf.corpus("prose", 50), shard_docs=100)
    argv = [
        "pool",
        str(src),
        "--out",
        str(tmp_path / "p"),
        "--seq-len",
        "8",
        "--filter",
        "colour = 'red'",
    ]
    assert main(argv) == 2
    assert "unknown property 'colour'" in capsys.readouterr().err
    assert main(["locate", str(src), "--sample", "0"]) == 2
    assert "is not a pool" in capsys.readouterr().err


def test_it_builds_the_same_pool_with_either_staging_from_the_command_line(tmp_path, capsys):
    src = pf.write_tokenized(tmp_path / "src", pf.corpus("prose", 300), shard_docs=70)
    built = {}
    for staging in ("references", "tokens", "auto"):
        out = tmp_path / staging
        argv = ["pool", str(src), "--out", str(out), "--seq-len", "64", "--seed", "5"]
        assert main([*argv, "--memory", "1MiB", "--staging", staging, "--quiet", "--json"]) == 0
        totals = json.loads(capsys.readouterr().out)
        # auto stages references on a local disk.
        assert totals["staging"] == ("references" if staging == "auto" else staging)
        built[staging] = {
            p.relative_to(out).as_posix(): p.read_bytes()
            for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != units.PLAN_NAME and units.MARKER_DIR not in p.parts
        }
    assert len([k for k in built["tokens"] if k.endswith(".bin")]) >= 1
    assert built["tokens"] == built["references"] == built["auto"]


def test_it_refuses_an_unknown_staging(tmp_path, capsys):
    src = pf.write_tokenized(tmp_path / "src", pf.corpus("prose", 20), shard_docs=10)
    argv = ["pool", str(src), "--out", str(tmp_path / "p"), "--seq-len", "8"]
    assert main([*argv, "--staging", "copy"]) == 2
    assert "invalid choice: 'copy'" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_the_command_line_builds_a_pool_whose_merge_is_a_tree_of_levels(
    tmp_path, capsys, monkeypatch
):
    """A pool of many inputs (10^8 documents in 64 MiB shards) merges in a tree: the
    progress line counts the merge's units of every level as metadata (they have no
    documents), and the pool is the one built without a tree."""
    from shardcore.pool import layout

    src = pf.write_tokenized(tmp_path / "src", pf.corpus("prose", 300), shard_docs=30)
    argv = ["pool", str(src), "--seq-len", "64", "--seed", "5", "--memory", "1MiB"]
    monkeypatch.setattr(layout, "DIRECT_OPENS", 0)
    assert main([*argv, "--out", str(tmp_path / "one-level")]) == 0
    monkeypatch.setattr(layout, "MERGE_FAN_IN", 2)
    assert main([*argv, "--out", str(tmp_path / "tree")]) == 0
    plan = units.load_plan(tmp_path / "tree")
    assert plan.meta["merge_levels"] > 1 and any("level" in u for u in plan.phases[1])
    assert "pool" in capsys.readouterr().err
    assert (
        Pool(tmp_path / "tree").manifest["fingerprint"]
        == (Pool(tmp_path / "one-level").manifest["fingerprint"])
    )

"""A pool's planning split into units by group of inputs (``shardcore.pool.select``): the
plan it saves is the plan ``plan_pool`` makes in one process, byte for byte (a filter on a
property one source lacks and on a joined annotation, a validation slice, several sources
and groups); the pool built from it is ``build_pool``'s; a filter that selects nothing and
a bad filter are refused as in one process, naming the work; a rerun unit writes the same
bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardcore import manifest as mf
from shardcore import planning, storage, units
from shardcore.annotate.stage import plan_annotation
from shardcore.errors import EmptySelectionError, InputError
from shardcore.pool import build_pool, plan_pool, select
from shardcore.tokenize import tokenize
from tests.unit.test_planning import _saved
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl

# A property only the second source has (read NULL in the first), a number that is an
# integer in one source and a float in the other, and the first source's pii annotation.
FILTER = "(topic IS NULL OR topic <> 'skip') AND (pii.emails IS NULL OR pii.emails < 3)"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("select")
    first = stdlib_records(24)
    second = stdlib_records(18, start=24)
    for i, r in enumerate(second):
        r["topic"] = "skip" if i % 3 == 0 else "keep"
        r["meta"]["chars"] = float(r["meta"]["chars"])
    toks = []
    for name, records in (("first", first), ("second", second)):
        src = write_jsonl(tmp / f"{name}.jsonl", records)
        tokenize([str(src)], str(tmp / name), shard_size=40_000)
        toks.append(str(tmp / name))
    ann = tmp / "pii"
    units.run_local(plan_annotation(toks[0], str(ann), annotator="pii"))
    shards = [len(mf.read_manifest(t)["shards"]) for t in toks]
    assert min(shards) > 1 and sum(shards) > 4, shards  # several groups of 2, one across
    return {"tmp": tmp, "tok": toks, "ann": str(ann), "documents": len(first) + len(second)}


def _kwargs(world: dict, out: Path, **kw) -> dict:
    return {
        "tokenized": world["tok"],
        "out": str(out),
        "seq_len": 64,
        "memory": 1 << 20,
        "shard_size": 20_000,
        "filter": FILTER,
        "seed": 7,
        "val_fraction": 0.3,
        "annotations": [world["ann"]],
        **kw,
    }


def _deferred(world: dict, out: Path, **kw) -> units.Plan:
    return select.deferred(
        kwargs=_kwargs(world, out, **kw), out=str(out), what="planning pool 'p'", group_inputs=2
    )


def test_the_split_saves_the_plan_plan_pool_makes_and_builds_the_same_pool(world, tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    direct = plan_pool(**_kwargs(world, here))
    units.save_plan(direct)
    deferred = _deferred(world, there)
    groups = len(deferred.phases[0])
    assert groups >= 3 and [len(p) for p in deferred.phases] == [groups, 1, groups, 1]
    assert deferred.phases[-1] == [{"id": "plan"}]
    manifest = units.run_local(deferred, workers=2)
    assert manifest["kind"] == "planning" and manifest["stage"] == "pool"

    made = units.load_plan(there)
    assert (
        made.meta["sources"] == direct.meta["sources"] and made.meta["splits"]["val"]["documents"]
    )
    assert made.params == direct.params and made.params["annotations"]
    ours, theirs = _saved(here), _saved(there)
    assert sorted(ours) == sorted(theirs) == ["_pass1/inputs.table", units.PLAN_NAME]
    assert ours["_pass1/inputs.table"] == theirs["_pass1/inputs.table"]
    plan_here, plan_there = json.loads(ours[units.PLAN_NAME]), json.loads(theirs[units.PLAN_NAME])
    assert plan_here.pop("out") == str(here) and plan_there.pop("out") == str(there)
    assert plan_here == plan_there

    built = units.run_local(made, workers=2)
    kwargs = _kwargs(world, tmp_path / "built")
    want = build_pool(kwargs.pop("tokenized"), kwargs.pop("out"), **kwargs)
    assert built["fingerprint"] == want["fingerprint"]
    assert mf.content_digest(built) == mf.content_digest(want)
    assert 0 < built["documents"] < world["documents"]
    assert not (there / "_pass1").exists()  # the planning's files went with the scratch


def test_a_filter_that_selects_nothing_is_refused_as_in_one_process(world, tmp_path):
    nothing = "n_tokens < 0"
    with pytest.raises(EmptySelectionError) as direct:
        plan_pool(**_kwargs(world, tmp_path / "here", filter=nothing))
    deferred = _deferred(world, tmp_path / "there", filter=nothing)
    with pytest.raises(EmptySelectionError) as split:
        units.run_local(deferred)
    assert str(split.value) == f"planning pool 'p': {direct.value}"
    assert f"selects none of the {world['documents']:,} documents of 2" in str(split.value)
    assert not (tmp_path / "there" / units.PLAN_NAME).exists()


def test_a_bad_filter_names_the_property_and_the_work(world, tmp_path):
    bad = "klingon = 'qapla'"
    with pytest.raises(InputError) as direct:
        plan_pool(**_kwargs(world, tmp_path / "here", filter=bad))
    with pytest.raises(InputError) as split:
        units.run_local(_deferred(world, tmp_path / "there", filter=bad))
    assert str(split.value) == f"planning pool 'p': {direct.value}"
    assert "unknown property 'klingon'" in str(split.value)


def test_a_rerun_unit_writes_the_same_bytes(world, tmp_path):
    out = tmp_path / "p"
    deferred = _deferred(world, out)
    units.run_local(deferred)
    scratch = out / planning.DIR
    first = {p: p.read_bytes() for p in sorted((scratch / select.DIR).iterdir())}
    assert len(first) == len(deferred.phases[2]) + 1  # each group's file and the type
    # Killed after writing, before the marker: each unit runs again, to the same bytes.
    for unit in ("props-type", deferred.phases[2][1]["id"], "plan"):
        units.marker_path(deferred.out, unit).unlink()
    (scratch / select.TYPE_FILE).write_text("{half")
    (out / units.PLAN_NAME).write_text("{half a plan")
    for unit in ("props-type", deferred.phases[2][1]["id"], "plan"):
        units.run_unit(deferred, unit)
    assert {p: p.read_bytes() for p in sorted((scratch / select.DIR).iterdir())} == first
    assert units.load_plan(out).to_json() == plan_pool(**_kwargs(world, out)).to_json()


def test_groups_cover_the_inputs_in_order_across_sources():
    """Ranges of consecutive inputs, one across two sources; one (empty) range at least."""
    assert select._groups([0, 0], 2) == [{"lo": 0, "hi": 0, "spans": []}]
    assert select._groups([3, 1], 2) == [
        {"lo": 0, "hi": 2, "spans": [[0, 0, 2]]},
        {"lo": 2, "hi": 4, "spans": [[0, 2, 3], [1, 0, 1]]},
    ]


def test_on_s3_each_unit_fetches_what_it_declares_and_lists_nothing(
    world, s3_bucket, tmp_path, monkeypatch
):
    """Sources and the pool on a bucket, each unit of the planning on a host of its own:
    a unit downloads exactly the files of the planning it declares, never lists its prefix,
    and the plan saved is the one ``plan_pool`` makes."""
    from tests.unit.test_s3_pipeline import _store_calls, each_unit_on_a_host

    toks = []
    for k, name in enumerate(("first", "second")):
        records = stdlib_records(12, start=12 * k)
        src = write_jsonl(tmp_path / f"{name}.jsonl", records)
        tokenize([str(src)], f"{s3_bucket}/{name}", shard_size=30_000)
        toks.append(f"{s3_bucket}/{name}")
    kwargs = {**_kwargs(world, Path(), filter="meta.private = false"), "annotations": []}
    kwargs["tokenized"] = toks
    direct = plan_pool(**{**kwargs, "out": f"{s3_bucket}/direct"})
    out = f"{s3_bucket}/pool"
    deferred = select.deferred(
        kwargs={**kwargs, "out": out}, out=out, what="planning pool 'p'", group_inputs=2
    )
    assert len(deferred.phases[0]) > 1
    calls = _store_calls(monkeypatch)
    units.save_plan(deferred)
    each_unit_on_a_host(deferred, planning._reads, tmp_path, monkeypatch, calls)
    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "host-final"))
    assert units.finalize(deferred)["stage"] == "pool"
    made = units.load_plan(out)
    assert made.to_json() == {**direct.to_json(), "out": out}
    table = storage.open_store(out).read_bytes("_pass1/inputs.table")
    assert table == direct.files["_pass1/inputs.table"]


def test_the_command_line_plans_large_inputs_with_its_workers(world, tmp_path, monkeypatch, capsys):
    """``shardyard pool --workers 2`` over more than SPLIT_DOCUMENTS documents plans through
    the units, from scratch (a refused planning's files in the same output are not
    reused), to the pool one process plans."""
    from shardcore.cli import main
    from shardcore.commands import pool as command

    def pool(out: Path, filter: str) -> int:
        kwargs = _kwargs(world, out)
        return main(
            ["pool", *world["tok"], "--out", str(out), "--seq-len", "64", "--memory", "1MiB"]
            + ["--shard-size", "20000", "--seed", "7", "--val-fraction", "0.3", "--quiet"]
            + ["--annotation", kwargs["annotations"][0], "--filter", filter, "--workers", "2"]
        )

    assert pool(tmp_path / "inline", FILTER) == 0
    want = mf.read_manifest(tmp_path / "inline")
    assert not (tmp_path / "inline" / planning.DIR).exists()
    monkeypatch.setattr(command, "SPLIT_DOCUMENTS", 0)
    out = tmp_path / "split"
    capsys.readouterr()
    assert pool(out, "n_tokens < 0") != 0
    assert "selects none" in capsys.readouterr().err
    assert (out / planning.DIR / select.DIR).is_dir()  # the refused planning's files
    assert pool(out, FILTER) == 0
    got = mf.read_manifest(out)
    assert got["fingerprint"] == want["fingerprint"]
    assert mf.content_digest(got) == mf.content_digest(want)

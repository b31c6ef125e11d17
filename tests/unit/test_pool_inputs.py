"""The pool plan's input table: a file of the plan, so that the header every unit loads does
not grow with the number of inputs; plans made before it still build the same bytes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from shardcore import manifest as mf
from shardcore import storage, units
from shardcore.errors import ManifestError
from shardcore.pool import plan_pool
from shardcore.pool.inputs import InputTable
from shardcore.pool.layout import SPLITS
from tests.unit import pool_fixtures as pf

SMALL = {"memory": 1 << 20, "shard_size": 200_000}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("tokenized")
    return [
        pf.write_tokenized(root / "prose", pf.corpus("prose", 600), shard_docs=50, name="prose"),
        pf.write_tokenized(root / "code", pf.corpus("code", 40), shard_docs=15, name="code"),
    ]


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != units.PLAN_NAME and units.MARKER_DIR not in p.parts
    }


def _legacy(plan: units.Plan, out: Path) -> units.Plan:
    """The plan as the code before the input table wrote it: every input in the meta, each
    split's per-input document counts in its entry."""
    table = InputTable(plan)
    meta = {k: v for k, v in plan.meta.items() if k not in ("inputs_table", "annotation_dirs")}
    meta["inputs"] = [table.spec(i) for i in range(len(table))]
    meta["splits"] = {
        s: {
            **{k: v for k, v in info.items() if k not in ("documents", "tokens")},
            "counts": table.counts(s).tolist(),
        }
        for s, info in plan.meta["splits"].items()
    }
    legacy = units.Plan(plan.stage, str(out), plan.params, [], meta)
    legacy.phases = plan.phases
    return legacy


def test_the_table_lists_each_input_as_the_plan_did(sources, tmp_path):
    plan = plan_pool([str(s) for s in sources], str(tmp_path / "p"), seq_len=64, **SMALL)
    assert "inputs" not in plan.meta and "counts" not in plan.meta["splits"]["train"]
    in_memory = InputTable(plan)
    units.save_plan(plan)
    saved = InputTable(units.load_plan(plan.out))  # read from the output, not from memory
    want = [
        (s, j, storage.join(str(src), sh["prefix"]))
        for s, src in enumerate(sources)
        for j, sh in enumerate(mf.read_manifest(src)["shards"])
    ]
    assert len(saved) == len(in_memory) == len(want) == len(plan.phases[0])
    for i, (s, j, prefix) in enumerate(want):
        spec = saved.spec(i)
        assert spec == in_memory.spec(i)
        assert (spec["source"], spec["shard"], spec["prefix"]) == (s, j, prefix)
        assert spec["sidecar"] == f"{prefix}.docs.parquet"
    for k, split in enumerate(SPLITS):
        counts = saved.counts(split)
        assert counts.tolist() == [saved.spec(i)["docs"][k] for i in range(len(saved))]
        assert int(counts.sum()) == plan.meta["splits"][split]["documents"]
        assert int(saved.column(f"tokens_{split}").sum()) == plan.meta["splits"][split]["tokens"]


def test_the_header_does_not_grow_with_the_inputs(tmp_path):
    docs = pf.corpus("prose", 600)
    few = pf.write_tokenized(tmp_path / "a", docs, shard_docs=300, name="prose")
    many = pf.write_tokenized(tmp_path / "b", docs, shard_docs=10, name="prose")
    sizes = {}
    for src in (few, many):
        plan = plan_pool([str(src)], str(tmp_path / f"p{src.name}"), seq_len=64, **SMALL)
        sizes[len(plan.phases[0])] = len(json.dumps(plan.header()))
    assert sorted(sizes) == [2, 60]
    # 58 more inputs: a few more digits (the table's size and offsets), not 58 entries.
    assert abs(sizes[60] - sizes[2]) < 100


@pytest.mark.parametrize("shuffle", ["exact", "grid"])
def test_a_plan_made_before_the_table_builds_the_same_bytes(sources, tmp_path, shuffle):
    kwargs = {"seq_len": 64, "val_fraction": 0.2, "seed": 4, "shuffle": shuffle, **SMALL}
    new = plan_pool([str(s) for s in sources], str(tmp_path / "new"), **kwargs)
    legacy = _legacy(new, tmp_path / "legacy")
    # A legacy plan read back from its JSON, as a job interrupted across an upgrade is.
    legacy = units.Plan.from_json(json.loads(json.dumps(legacy.to_json())))
    assert InputTable(legacy).spec(3) == InputTable(new).spec(3)
    m_new = units.run_local(new)
    m_legacy = units.run_local(legacy)
    assert m_new["files"] == m_legacy["files"] and m_new["fingerprint"] == m_legacy["fingerprint"]
    assert _files(tmp_path / "new") == _files(tmp_path / "legacy")
    # Finalize removes the table with the rest of the scratch.
    assert not (tmp_path / "new" / new.meta["inputs_table"]["path"]).exists()


def test_a_missing_or_foreign_table_is_refused_by_name(sources, tmp_path):
    a = plan_pool([str(sources[0])], str(tmp_path / "a"), seq_len=64, **SMALL)
    b = plan_pool([str(s) for s in sources], str(tmp_path / "b"), seq_len=64, **SMALL)
    units.save_plan(a)
    units.save_plan(b)
    table = a.meta["inputs_table"]["path"]
    saved = units.load_plan(a.out)
    shutil.copy(tmp_path / "b" / table, tmp_path / "a" / table)
    with pytest.raises(ManifestError, match="not the input table of this plan"):
        units.run_unit(saved, saved.phases[0][0]["id"])
    (tmp_path / "a" / table).unlink()
    with pytest.raises(ManifestError, match="input table is missing.*plan the pool again"):
        units.run_unit(saved, saved.phases[0][0]["id"])


def test_pass_one_reads_its_own_row_only(sources, tmp_path):
    plan = plan_pool([str(s) for s in sources], str(tmp_path / "p"), seq_len=64, **SMALL)
    units.save_plan(plan)
    saved = units.load_plan(plan.out)
    path = tmp_path / "p" / plan.meta["inputs_table"]["path"]
    layout = plan.meta["inputs_table"]
    # Damage every row's prefix but the last input's: its unit still runs.
    data = bytearray(path.read_bytes())
    at, _ = layout["columns"]["prefix_at"]
    last = len(plan.phases[0]) - 1
    lo = int(np.frombuffer(bytes(data[at + 8 * last : at + 8 * last + 8]), "<i8")[0])
    start = layout["columns"]["prefix"][0]
    data[start : start + lo] = b"#" * lo
    path.write_bytes(bytes(data))
    stats = units.run_unit(saved, saved.phases[0][last]["id"])
    assert stats["selected_documents"] == saved.meta["splits"]["train"]["documents"] - sum(
        InputTable(plan).counts("train")[:last]
    )
    with pytest.raises(ManifestError, match="##.idx: not listed"):
        units.run_unit(saved, saved.phases[0][0]["id"])

"""Finalize reads every unit's recorded stats once, in batches, on object storage many at
a time (``units.read_unit_results``), and a pool's finalize writes its manifest from
columns (per-shard numbers, checksums as integers and a spill file of block checksums):
the bytes ``write_manifest`` writes from the same shards as dicts."""

from __future__ import annotations

import filecmp

import pytest

from shardcore import manifest as mf
from shardcore import storage, units
from shardcore.pool import build_pool
from shardcore.pool import finalize as pool_finalize
from tests.unit import pool_fixtures as pf


def _plan(out: str, n: int) -> units.Plan:
    return units.Plan(
        stage="test-results", out=out, params={},
        phases=[[{"id": f"a{i:04d}"} for i in range(n // 2)],
                [{"id": f"b{i:04d}"} for i in range(n - n // 2)]],
    )  # fmt: skip


def test_it_reads_every_units_stats_from_s3_in_plan_order_a_batch_at_a_time(s3_bucket, monkeypatch):
    monkeypatch.setattr(units, "MARKER_READ_BATCH", 7)  # several batches of parallel reads
    plan = _plan(f"{s3_bucket}/out", 40)
    ids = [u["id"] for phase in plan.phases for u in phase]
    for k, uid in enumerate(ids):
        units.mark_done(plan.out, uid, {"k": k, "id": uid})

    results = units.read_unit_results(plan)

    assert len(results) == 40
    assert [r["id"] for r in results] == ids
    assert results[-1] == {"k": 39, "id": ids[-1]} and results[3:5] == [
        {"k": 3, "id": ids[3]},
        {"k": 4, "id": ids[4]},
    ]
    results.close()
    # A unit without its marker: finalize refuses, naming it.
    storage.open_store(plan.out).delete(units._marker_rel(ids[12]))
    with pytest.raises(RuntimeError, match=rf"1 unit\(s\) unfinished: \['{ids[12]}'\]"):
        units.read_unit_results(plan)


def test_a_pools_manifest_from_columns_is_the_one_written_from_dicts(tmp_path, monkeypatch):
    tok = pf.write_tokenized(tmp_path / "tok", pf.corpus("prose", 300), shard_docs=100)
    options = {"seq_len": 16, "seed": 3, "val_fraction": 0.2, "shard_size": 16 << 10}
    columns = build_pool([str(tok)], str(tmp_path / "columns"), **options)
    assert columns["num_records"] > 0 and len(columns["shards"]) > 1
    # The same build, its finalize made to write from dicts (as stats that do not fit
    # columns are written).
    monkeypatch.setattr(
        pool_finalize._ShardColumns, "add_files", lambda self, st: setattr(self, "fits", False)
    )
    dicts = build_pool([str(tok)], str(tmp_path / "dicts"), **options)

    assert dicts["fingerprint"] == columns["fingerprint"]
    for split in ("", "val"):
        for name in mf.MANIFEST_FILES:
            a, b = tmp_path / "columns" / split / name, tmp_path / "dicts" / split / name
            assert filecmp.cmp(a, b, shallow=False), (split, name)

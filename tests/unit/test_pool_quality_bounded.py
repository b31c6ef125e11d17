"""A pool's quality report on its first records (``shardcore.pool.quality.pool_quality``)
reads those records' documents by row range and every shuffle's first positions alone,
and reports exactly what the whole-pool computation did: every column of every document,
sorted into input order, and each shuffle's whole permutation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardcore import quality
from shardcore.pool import PoolReader, build_pool, layout
from shardcore.pool import quality as pool_quality_module
from shardcore.shuffle import SHUFFLES
from tests.unit import pool_fixtures as pf

SMALL: dict[str, Any] = {"memory": 1 << 20, "shard_size": 200_000}


@pytest.fixture(scope="module")
def pools(tmp_path_factory) -> dict[str, Path]:
    """Two sources with a validation slice (rows of an input shard not consecutive),
    flat and partitioned; one source without (consecutive rows)."""
    root = tmp_path_factory.mktemp("bounded")
    prose = pf.write_tokenized(
        root / "prose", pf.corpus("prose", 1200), shard_docs=300, name="prose"
    )
    code = pf.write_tokenized(root / "code", pf.corpus("code", 60), shard_docs=25, name="code")
    both = [str(prose), str(code)]
    out = {
        "two": build_pool(both, str(root / "two"), seq_len=64, val_fraction=0.1, **SMALL),
        "one": build_pool([str(prose)], str(root / "one"), seq_len=64, **SMALL),
    }
    fanout = layout.FANOUT
    layout.FANOUT = 3
    try:
        out["two-fanned"] = build_pool(
            both, str(root / "fanned"), seq_len=64, val_fraction=0.1, **SMALL
        )
    finally:
        layout.FANOUT = fanout
    return {
        "two": root / "two",
        "one": root / "one",
        "two-fanned": root / "fanned",
        "names": {str(prose): "prose", str(code): "code"},
    }


def _whole_pool_report(path: Path, records: int, by: str, names: dict[str, str]) -> dict:
    """The report as it was computed from every document's columns."""
    reader = PoolReader(path)
    docs = reader.documents
    source = docs.column("source").to_numpy()
    n_tokens = docs.column("n_tokens").to_numpy()
    record_docs = reader.main_documents(limit=records)
    n_docs = int(record_docs.max()) + 1 if len(record_docs) < reader.num_records else source.size
    paths = [s["path"] for s in reader.manifest["sources"]]
    if by and by != "length":
        values = reader.document_values(by)
        labels = np.array(["(absent)" if v is None else str(v) for v in values.tolist()])
        label = by
    elif len(np.unique(source)) > 1 and by != "length":
        labels = np.array([names.get(p, str(k)) for k, p in enumerate(paths)])[source]
        label = "tokenized source"
    else:
        bins = np.floor(np.log2(np.maximum(n_tokens, 1))).astype(int)
        labels = np.array([f"{2**b:,}-{2 ** (b + 1) - 1:,} tokens" for b in bins.tolist()])
        label = "document length (tokens)"
    report = quality.report(labels[record_docs[record_docs >= 0]], batch_size=256)
    report["label"] = label
    report["records"], report["measured"] = reader.num_records, len(record_docs)
    windows = report["windows"]
    bos = int(bool(reader.manifest.get("params", {}).get("bos")))
    ref = quality.document_shuffle_reference(
        labels[:n_docs],
        n_tokens[:n_docs].astype(np.int64) + bos,
        reader.seq_len,
        windows["window_sizes"],
        trials=8,
        seed=1234,
    )
    report["reference"] = ref
    report["verdict"] = quality.verdict(windows["window_sizes"], windows["max_all"], ref["mean"])
    report["label_verdicts"] = quality.label_verdicts(windows, ref)
    shard, row = docs.column("source_shard").to_numpy(), docs.column("source_row").to_numpy()
    order = np.lexsort((row, shard, source))
    key = source[order].astype(np.int64) << 32 | shard[order]
    counts = np.unique(key, return_counts=True)[1]
    report["by_shuffle"] = {}
    for name, module in SHUFFLES.items():
        perm = module.permutation(counts, 1234, module.num_buckets(counts, max(2, len(counts))))
        report["by_shuffle"][name] = {
            "windows": quality.window_deviation(labels[order][perm[:n_docs]])
        }
    return report


@pytest.mark.parametrize("pool", ["two", "one", "two-fanned"])
@pytest.mark.parametrize("records", [40, 300, 1 << 16])
@pytest.mark.parametrize("by", ["", "length", "kind", "_doc.n_tokens"])
def test_it_reports_what_the_whole_pool_computation_did(pools, pool, records, by):
    reader = PoolReader(pools[pool], ranged=True)
    got = pool_quality_module.pool_quality(
        reader, records=records, by=by, source_names=pools["names"]
    )
    want = _whole_pool_report(pools[pool], records, by, pools["names"])
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


def test_the_pools_cover_both_kinds_of_input_groups(pools):
    """The validation slice leaves gaps in an input shard's rows (the ranks are read from
    the rows), the pool of one source without it none (rank = row)."""
    gaps = pool_quality_module.input_groups(PoolReader(pools["two"]), rows=True)
    assert ((gaps.hi - gaps.lo + 1) != gaps.count).any()
    plain = pool_quality_module.input_groups(PoolReader(pools["one"]), rows=True)
    assert ((plain.hi - plain.lo + 1) == plain.count).all()


@pytest.mark.parametrize("pool", ["two", "two-fanned"])
def test_a_range_of_documents_reads_only_the_files_holding_it(pools, pool, monkeypatch):
    reader = PoolReader(pools[pool])
    names = ["_doc.source", "_doc.n_tokens", "kind"]
    n, whole = reader.document_columns(names)
    opened: list[str] = []
    file_of = reader._document_file

    def spy(rel):
        opened.append(rel)
        return file_of(rel)

    monkeypatch.setattr(reader, "_document_file", spy)
    for start, stop in [(0, 1), (0, 37), (5, n), (n - 1, n), (n // 2, n // 2 + 90), (3, 3)]:
        opened.clear()
        total, part = reader.document_columns(names, rows=slice(start, stop))
        assert total == n
        for name in names:
            assert np.array_equal(part[name], whole[name][start:stop]), (start, stop, name)
        if reader.partitioned and stop - start == 1:
            assert len(opened) == 1  # one sidecar, not every shard's


@pytest.mark.parametrize("pool", ["two", "two-fanned"])
def test_the_command_measures_a_pools_first_records_reading_their_documents(pools, pool, capsys):
    """``shardyard quality`` on a pool: its first ``--max-samples`` records, labelled from
    the documents they hold (read by row range), as the whole pool's labels cut there."""
    from shardcore.cli import main

    reader = PoolReader(pools[pool])
    whole = reader.record_labels("kind")
    for limit in (64, reader.num_records + 5):
        capsys.readouterr()
        args = ["quality", str(pools[pool]), "--by", "kind", "--max-samples", str(limit)]
        assert main([*args, "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        want = quality.report(whole[:limit], batch_size=1024)
        assert got == json.loads(json.dumps(want))
    assert main(["quality", str(pools[pool]), "--by", "kind", "--max-samples", "64"]) == 0
    assert f"64 samples (the first of {reader.num_records:,})" in capsys.readouterr().out
    recs = np.arange(0, reader.num_records, 7)
    assert np.array_equal(
        reader.record_labels("_doc.n_tokens", recs), reader.record_labels("_doc.n_tokens")[recs]
    )

"""Selecting documents with a DuckDB filter over their sidecar properties."""

from __future__ import annotations

import re

import pytest

from shardcore import filters
from shardcore.errors import InputError
from tests.unit import pool_fixtures as pf


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory):
    docs = pf.corpus("prose", 300) + pf.corpus("code", 30)
    src = pf.write_tokenized(tmp_path_factory.mktemp("sel"), docs, shard_docs=400)
    return src / "shards/src-00000.docs.parquet"


def test_it_selects_the_rows_matching_an_expression(sidecar):
    table = filters.read_sidecar(sidecar)
    rows, picked = filters.select_shard(sidecar, "kind = 'code' AND n_tokens > 500")
    kinds = [p["kind"] for p in table.column("props").to_pylist()]
    n = table.column("n_tokens").to_pylist()
    want = [i for i in range(table.num_rows) if kinds[i] == "code" and n[i] > 500]
    assert rows.tolist() == want and 0 < len(want) < 30
    assert picked.column("n_tokens").to_pylist() == [n[i] for i in want]


def test_it_selects_everything_without_a_filter(sidecar):
    rows, _ = filters.select_shard(sidecar, None)
    assert rows.tolist() == list(range(330))


def test_it_names_an_unknown_property(sidecar):
    with pytest.raises(
        InputError, match=r"unknown property 'langue'.*known: kind, lang, package, license, doc_id"
    ):
        filters.select_shard(sidecar, "langue = 'de'")


@pytest.mark.parametrize("expression", ["lang ==", "lang + 1 > 2", "lang"])
def test_it_names_an_invalid_expression(sidecar, expression):
    with pytest.raises(InputError, match=re.escape(f"filter {expression!r} is invalid")):
        filters.select_shard(sidecar, expression)


def test_it_refuses_more_than_one_statement(sidecar):
    with pytest.raises(InputError, match="';' is not allowed"):
        filters.select_shard(sidecar, "true; SELECT 1")


def test_it_gives_an_expression_no_access_to_files(sidecar):
    with pytest.raises(InputError, match="is invalid"):
        filters.select_shard(sidecar, "(SELECT count(*) FROM read_csv('/etc/hostname')) > 0")


def test_a_process_checks_an_expression_once_and_a_refused_one_every_time(sidecar, monkeypatch):
    """The check's DuckDB connection (about 15 ms) is paid once per expression, not once per
    input shard a pool's planning filters; a refusal is never kept as an acceptance."""
    import duckdb

    filters._check.cache_clear()
    opened = []
    real = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: opened.append(1) or real(*a, **k))
    for _ in range(3):
        filters.filter_parse("kind = 'code' AND n_tokens > 500")
    assert len(opened) == 1
    for _ in range(2):
        with pytest.raises(InputError, match="function 'read_csv' is not allowed"):
            filters.filter_parse("read_csv('x') IS NULL")
    assert len(opened) == 3
    long = " OR ".join(["n_tokens > 500"] * 400)  # longer than kept: checked every time
    filters.filter_parse(long)
    filters.filter_parse(long)
    assert len(opened) == 5
    rows, _ = filters.select_shard(sidecar, "kind = 'code' AND n_tokens > 500")
    assert rows.size and len(opened) == 6  # the filter's own connection; no second check

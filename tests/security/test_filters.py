"""Item: filters are parsed as expressions, never spliced into SQL, and evaluated under
time and memory limits outside the web process. The attacks: ``true) UNION ALL SELECT
__row FROM docs --`` built a "ready" pool with every document twice; a slow filter (a
large cross join) ran inside the web request until gunicorn killed the worker; no DuckDB
memory limit was set."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from shardcore import filters
from shardcore.errors import InputError
from shardcore.sandbox import LimitError, run_limited
from webapp.catalog.models import Pool
from webapp.jobs.models import Job


def _build(c, tokenized, flt, name="p"):
    return c.post(
        "/api/pools/",
        {"name": name, "tokenized_ids": [tokenized.pk], "seq_len": 64, "filter": flt},
        format="json",
    )


@pytest.mark.parametrize(
    "flt, why",
    [
        ("true) UNION ALL SELECT __row FROM docs --", "is invalid"),
        ("true) OR (true", "is invalid"),
        ("(SELECT count(*) FROM docs a, docs b, docs c) > 0", "cannot hold a subquery"),
        ("EXISTS (SELECT 1 FROM docs)", "cannot hold a subquery"),
        ("length(repeat(kind, 1000000000)) > 0", "function 'repeat' is not allowed"),
        ("len(range(1000000000000)) > 0", "function 'range' is not allowed"),
        ("count(*) OVER () > 0", "cannot hold a window function"),
        ("getenv('HOME') IS NOT NULL", "function 'getenv' is not allowed"),
        ("current_setting('memory_limit') = '1GB'", "is not allowed"),
    ],
)
def test_the_api_refuses_filters_that_are_not_expressions(api, tokenized, flt, why):
    pools, jobs = Pool.objects.count(), Job.objects.count()
    resp = _build(api("editor"), tokenized, flt)
    assert resp.status_code == 400
    assert resp.json()["detail"].startswith("filter: ")
    assert why in resp.json()["detail"]
    assert (Pool.objects.count(), Job.objects.count()) == (pools, jobs)


def test_the_pool_page_refuses_the_injection_too(page, tokenized):
    resp = page("editor").post(
        "/pools/build/",
        {"name": "p", "tokenized_ids": [tokenized.pk], "seq_len": 64, "shuffle": "exact",
         "seed": 0, "val_fraction": 0.0, "filter": "true) UNION ALL SELECT __row FROM docs --"},
        follow=True,
    )  # fmt: skip
    assert "is invalid" in resp.content.decode()
    assert not Pool.objects.filter(name="p").exists()


def test_an_honest_filter_plans_the_documents_it_selects(api, tokenized):
    resp = _build(api("editor"), tokenized, "kind = 'prose' AND n_tokens > 20")
    assert resp.status_code == 201, resp.content
    pool = Pool.objects.get(pk=resp.json()["id"])
    plan = Job.objects.get(pk=pool.job_id).plan
    planned = sum(s["documents"] for s in plan["meta"]["splits"].values())
    table = pa.concat_tables(
        filters.read_sidecar(p) for p in sorted(tokenized_sidecars(tokenized))
    )  # fmt: skip
    want = sum(n > 20 for n in table.column("n_tokens").to_pylist())
    assert planned == want and 0 < want < 120  # each document once, none twice


def tokenized_sidecars(ts):
    from pathlib import Path

    return Path(ts.path).glob("shards/*.docs.parquet")


def test_the_injection_selects_nothing_twice_in_the_library_either(tokenized):
    sidecar = sorted(tokenized_sidecars(tokenized))[0]
    with pytest.raises(InputError, match="is invalid"):
        filters.select_shard(sidecar, "true) UNION ALL SELECT __row FROM docs --")


def test_duckdb_runs_a_filter_under_a_memory_limit(monkeypatch):
    monkeypatch.setenv("SHARDYARD_FILTER_MEMORY", "1MB")
    n = 2_000_000
    table = pa.table({"doc_id": np.arange(n), "kind": pa.array(["prose"] * n)})
    # Sorting 2 M selected rows needs far more than 1 MB; DuckDB itself refuses.
    with pytest.raises(InputError, match="SHARDYARD_FILTER_MEMORY"):
        filters.filter_rows(table, "kind = 'prose' OR doc_id >= 0", where="big")


def test_a_filter_that_runs_too_long_is_interrupted(monkeypatch):
    monkeypatch.setenv("SHARDYARD_FILTER_SECONDS", "0.001")
    n = 3_000_000
    table = pa.table({"doc_id": np.arange(n), "kind": pa.array(["prose text"] * n)})
    with pytest.raises(
        InputError, match=r"took longer than 0.001 s on big \(SHARDYARD_FILTER_SECONDS\)"
    ):
        filters.filter_rows(table, "regexp_matches(kind, '(p|r)+o.*s[a-z]+ t')", where="big")


def _allocate_forever():
    hog = []
    while True:
        hog.append(bytearray(64 << 20))


def _spin():
    while True:
        pass


def test_planning_runs_in_a_child_that_cannot_take_the_web_process_down():
    with pytest.raises(LimitError, match="memory"):
        run_limited(_allocate_forever, seconds=60, memory=256 << 20, what="the hog")
    with pytest.raises(LimitError, match="took longer than 1 s"):
        run_limited(_spin, seconds=1, memory=256 << 20, what="the spinner")
    assert run_limited(sum, ([1, 2, 3],), seconds=10, memory=256 << 20) == 6

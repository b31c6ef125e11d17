"""Annotations as a units stage and joined into pools: the stage writes the same bytes as
the library's one-process build; a pool that joins a pii annotation filters on
``pii.emails`` and carries ``<annotator>.<column>`` in its documents; the pool's
fingerprint covers the annotation; a name taken by a property, an annotation of another
source and two of one annotator are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from shardcore import props, units
from shardcore.annotate import pii
from shardcore.annotate.artifact import annotate, read_annotation
from shardcore.annotate.stage import plan_annotation, summarize
from shardcore.errors import InputError
from shardcore.filters import filter_rows
from shardcore.pool import PoolReader, build_pool
from shardcore.tokenize import tokenize
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl

PLANTED = "Write to guido.example@python.example.org or call +1 415 555 0132."


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("annjoin")
    records = stdlib_records(30)
    planted = [i for i in range(len(records)) if i % 4 == 1]
    for i in planted:
        records[i]["text"] += "\n" + PLANTED
    # Real modules hold addresses of their own: the documents with any, counted directly.
    with_email = [i for i, r in enumerate(records) if pii.counts(r["text"])["emails"] > 0]
    assert set(planted) <= set(with_email)
    src = write_jsonl(tmp / "stdlib.jsonl", records)
    tok = tmp / "tok"
    tokenize([str(src)], str(tok), shard_size=60_000)
    ann = tmp / "pii"
    units.run_local(plan_annotation(str(tok), str(ann), annotator="pii"))
    return {
        "tmp": tmp, "tok": tok, "ann": ann, "planted": with_email, "records": records,
        "counts": [pii.counts(r["text"]) for r in records],
    }  # fmt: skip


def test_the_stage_writes_the_bytes_of_the_one_process_build(world):
    clean = world["tmp"] / "pii-local"
    m = annotate(world["tok"], clean, "pii")
    mine = json.loads((world["ann"] / "manifest.json").read_text())
    assert mine["fingerprint"] == m["fingerprint"] and len(m["shards"]) > 1
    for f in m["files"]:
        assert (world["ann"] / f["path"]).read_bytes() == (clean / f["path"]).read_bytes()
    emails = read_annotation(world["ann"]).column("emails").to_pylist()
    assert [i for i, e in enumerate(emails) if e > 0] == world["planted"]


def test_the_summary_counts_each_column(world):
    s = summarize(str(world["ann"]))
    assert s["documents"] == len(world["records"])
    emails = s["columns"]["emails"]
    assert emails["nonzero"] == len(world["planted"])
    want = sum(1 for c in world["counts"] if c["emails"] == 1)
    assert dict(map(tuple, emails["values"]))[1] == want


def test_a_pool_filters_on_annotation_columns_and_carries_them(world):
    out = world["tmp"] / "pool"
    m = build_pool(
        [str(world["tok"])], str(out), seq_len=64, filter="pii.emails > 0",
        annotations=[str(world["ann"])],
    )  # fmt: skip
    assert m["params"]["annotations"] == [
        json.loads((world["ann"] / "manifest.json").read_text())["fingerprint"]
    ]
    docs = PoolReader(out).documents
    assert sorted(docs.column("doc_id").to_pylist()) == world["planted"]
    by_doc = dict(
        zip(
            docs.column("doc_id").to_pylist(),
            props.column(docs, "pii.emails").to_pylist(),
            strict=True,
        )
    )
    assert by_doc == {i: world["counts"][i]["emails"] for i in world["planted"]}
    plain = build_pool([str(world["tok"])], str(world["tmp"] / "plain"), seq_len=64)
    assert "annotations" not in plain["params"]
    assert plain["fingerprint"] != m["fingerprint"]


def test_a_filter_over_an_annotation_names_a_missing_column(world):
    out = world["tmp"] / "pool-bad"
    with pytest.raises(InputError, match="pii.nope|nope"):
        build_pool(
            [str(world["tok"])], str(out), seq_len=64, filter="pii.nope > 0",
            annotations=[str(world["ann"])],
        )  # fmt: skip


def test_it_refuses_two_annotations_of_one_annotator_and_foreign_ones(world, tmp_path):
    again = tmp_path / "pii2"
    annotate(world["tok"], again, "pii")
    with pytest.raises(InputError, match="two 'pii' annotations"):
        build_pool(
            [str(world["tok"])], str(tmp_path / "p"), seq_len=64,
            annotations=[str(world["ann"]), str(again)],
        )  # fmt: skip
    other_src = write_jsonl(tmp_path / "o.jsonl", stdlib_records(5, start=40))
    other = tmp_path / "otok"
    tokenize([str(other_src)], str(other))
    with pytest.raises(InputError, match="not an input of the pool"):
        build_pool([str(other)], str(tmp_path / "q"), seq_len=64, annotations=[str(world["ann"])])


def test_a_property_with_an_annotators_name_is_refused(world, tmp_path):
    recs = [{**r, "pii": "yes"} for r in world["records"][:6]]
    src = write_jsonl(tmp_path / "p.jsonl", recs)
    tok = tmp_path / "tok"
    tokenize([str(src)], str(tok))
    ann = tmp_path / "ann"
    annotate(tok, ann, "pii")
    with pytest.raises(InputError, match="property named 'pii'"):
        build_pool([str(tok)], str(tmp_path / "pool"), seq_len=64, annotations=[str(ann)])


def test_filter_rows_reads_an_annotation_as_a_struct(world):
    table = read_annotation(world["ann"])
    rows = filter_rows(props_table(table), "pii.emails > 0 AND pii.phones >= 1", where="annotation")
    c = world["counts"]
    assert rows.tolist() == [i for i in range(len(c)) if c[i]["emails"] and c[i]["phones"]]


def props_table(table):
    import pyarrow as pa

    cols = [c for c in table.column_names if c != "doc_id"]
    struct = pa.StructArray.from_arrays([table.column(c).combine_chunks() for c in cols], cols)
    return pa.table(
        {"doc_id": table.column("doc_id"), "props": pa.StructArray.from_arrays([struct], ["pii"])}
    )


def test_pool_sidecar_schema_holds_the_struct(world):
    out = world["tmp"] / "pool"
    shard = sorted((out / "shards").glob("*.docs.parquet"))[0]
    t = props.props_type(pq.read_schema(shard))
    assert "pii" in [f.name for f in t]
    assert Path(out).exists()


def test_quality_labels_and_diversity_families_read_annotation_columns(world, tmp_path):
    import numpy as np

    from shardcore.cli import main
    from shardcore.mixture import Mixture, MixtureSpec, build_mixture

    out = tmp_path / "pool"
    build_pool([str(world["tok"])], str(out), seq_len=64, annotations=[str(world["ann"])])
    reader = PoolReader(out)
    labels = reader.record_labels("pii.emails")
    assert labels.size == reader.manifest["num_records"]
    emails = {i: c["emails"] for i, c in enumerate(world["counts"])}
    main_docs = reader.documents.column("doc_id").to_numpy()[reader.main_documents()]
    assert [int(x) for x in labels] == [emails[int(d)] for d in main_docs]
    # `shardyard quality --by` names the column as filters do.
    assert main(["quality", str(out), "--by", "pii.emails", "--json"]) == 0
    spec = MixtureSpec.from_dict(
        {
            "tokens": 64 * reader.manifest["num_records"], "seed": 3,
            "components": [{"pool": str(out), "weight": 1}],
            "order": "diversity", "order_options": {"by": ["pii.emails"]},
        }
    )  # fmt: skip
    build_mixture(spec, tmp_path / "mix")
    mix = Mixture(tmp_path / "mix")
    got = mix.labels("pii.emails")
    assert sorted(np.asarray(got).tolist()) == sorted(
        np.asarray(labels)[np.asarray(mix.record_index)].tolist()
    )


def test_the_pool_command_joins_an_annotation(world, tmp_path, capsys):
    from shardcore.cli import main

    out = tmp_path / "cli-pool"
    code = main(
        ["pool", str(world["tok"]), "--out", str(out), "--seq-len", "64", "--quiet",
         "--filter", "pii.emails > 0", "--annotation", str(world["ann"])]
    )  # fmt: skip
    assert code == 0
    assert sorted(PoolReader(out).documents.column("doc_id").to_pylist()) == world["planted"]
    code = main(
        ["pool", str(world["tok"]), "--out", str(tmp_path / "no"), "--seq-len", "64",
         "--quiet", "--filter", "pii.emails > 0"]
    )  # fmt: skip
    assert code != 0 and "pii" in capsys.readouterr().err  # not joined: no such property


class Lengths(__import__("shardcore.annotate", fromlist=["Annotator"]).Annotator):
    """A clustering annotator for the test: a document's cluster is its length's decade."""

    name = "lengths"
    defaults = {}

    def fields(self):
        import pyarrow as pa

        return [pa.field("cluster", pa.int32()), pa.field("distance", pa.float32())]

    def annotate(self, texts):
        return {
            "cluster": [min(len(t) // 1000, 5) for t in texts],
            "distance": [0.0 for _ in texts],
        }


def test_the_summary_gives_cluster_sizes_with_their_terms_and_snippets(
    world, tmp_path, monkeypatch
):
    from collections import Counter

    from shardcore import annotate as registry

    monkeypatch.setitem(registry.BUILTIN, "lengths", f"{__name__}:Lengths")
    out = tmp_path / "lengths"
    units.run_local(plan_annotation(str(world["tok"]), str(out), annotator="lengths"))
    want = Counter(min(len(r["text"]) // 1000, 5) for r in world["records"])
    s = summarize(str(out))
    assert [(c["cluster"], c["documents"]) for c in s["clusters"]] == sorted(
        want.items(), key=lambda kv: (-kv[1], kv[0])
    )
    assert all(c["terms"] == [] and c["snippets"] == [] for c in s["clusters"])
    big = s["clusters"][0]["cluster"]
    (out / "summary.json").write_text(
        json.dumps(
            {
                "clusters": [
                    {
                        "cluster": big,
                        "size": want[big],
                        "top_terms": ["def", "self"],
                        "examples": [{"doc_id": 0, "text": "import os"}],
                    }
                ]
            }
        )  # fmt: skip
    )
    s = summarize(str(out))
    assert s["clusters"][0]["terms"] == ["def", "self"]
    assert s["clusters"][0]["snippets"] == ["import os"]


def test_a_pool_joins_two_annotators_at_once(world, tmp_path):
    from shardcore.annotate import quality

    q = tmp_path / "quality"
    units.run_local(plan_annotation(str(world["tok"]), str(q), annotator="quality"))
    out = tmp_path / "both"
    # Given in either order, the pool reads both structs and names them the same way.
    build_pool(
        [str(world["tok"])], str(out), seq_len=64,
        filter="pii.emails > 0 AND quality.n_words >= 200",
        annotations=[str(q), str(world["ann"])],
    )  # fmt: skip
    words = [quality.signals(r["text"])["n_words"] for r in world["records"]]
    want = [i for i in world["planted"] if words[i] >= 200]
    docs = PoolReader(out).documents
    assert want and sorted(docs.column("doc_id").to_pylist()) == want
    t = props.props_type(docs.schema)
    assert [f.name for f in t][-2:] == ["pii", "quality"]  # after the records' own
    got = dict(zip(docs.column("doc_id").to_pylist(),
                   props.column(docs, "quality.n_words").to_pylist(), strict=True))  # fmt: skip
    assert got == {i: words[i] for i in want}

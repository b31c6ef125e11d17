"""Decontamination on planted contamination from real text (CPython's docstrings planted
into its sources, ``tests.support.decon_plants``): recall and precision on the plants, the
index equal to a brute-force reference, normalization, the minimum-overlap rule, the
benchmark spec's formats and errors, the index's fingerprint, the annotation (resumable,
joined into a pool filtered on ``decon.items = 0``) and the command line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardcore import storage, units
from shardcore.annotate.artifact import annotate, read_annotation
from shardcore.annotate.stage import plan_annotation, summarize
from shardcore.cli import main
from shardcore.decon import text as tx
from shardcore.decon.index import compile_index, load_index, open_index, save_index
from shardcore.errors import InputError
from shardcore.manifest import read_manifest
from shardcore.pool import PoolReader, build_pool
from shardcore.tokenize import tokenize
from tests.support import decon_plants
from tests.unit.test_tokenize_s3 import s3  # noqa: F401 - a fixture
from tests.unit.tokenize_fixtures import write_jsonl


def _spec(tmp: Path, items: list[dict], name: str = "stdlib_qa") -> Path:
    write_jsonl(tmp / f"{name}.jsonl", [{"id": it["id"], "question": it["text"]} for it in items])
    spec = tmp / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "benchmarks": [
                    {"name": name, "files": [f"{name}.jsonl"], "fields": ["question"], "id": "id"}
                ]
            }
        )
    )
    return spec


@pytest.fixture(scope="module")
def plants():
    return decon_plants.make(240, 600, seed=3)


@pytest.fixture(scope="module")
def index(plants, tmp_path_factory):
    return compile_index(_spec(tmp_path_factory.mktemp("spec"), plants.items))


def _found(index, docs: list[str], threshold: float = 0.5) -> list[set[str]]:
    _, _, items = index.match(docs, threshold)
    return [{index.item_ids[i].split(":", 1)[1] for i in found} for found in items]


def test_it_finds_planted_items_with_recall_and_precision_above_099(plants, index):
    s = decon_plants.scores(_found(index, plants.docs), plants)
    assert s["positives"] >= 250
    assert s["recall"] >= 0.99 and s["precision"] >= 0.99, s
    for kind in ("whole", "changed", "fragment"):
        assert s[f"flagged_{kind}"] >= 0.99, (kind, s)
    for kind in ("near_miss", "common", "clean"):
        assert s[f"flagged_{kind}"] <= 0.01, (kind, s)


def test_it_reports_what_a_brute_force_reference_finds(plants, index):
    count, best, _ = index.match(plants.docs, 0.5)
    want, want_best = decon_plants.reference(plants.docs, plants.items)
    got = _found(index, plants.docs)
    assert got == want
    assert count.tolist() == [len(w) for w in want]
    np.testing.assert_allclose(best, want_best, rtol=1e-6)
    # a lower threshold reports the fragments below the default too, as the reference does
    low = _found(index, plants.docs, 0.1)
    assert low == decon_plants.reference(plants.docs, plants.items, threshold=0.1)[0]
    assert sum(map(len, low)) > sum(map(len, got))


def test_a_document_longer_than_a_chunk_is_read_in_overlapping_pieces(plants, index, monkeypatch):
    item = next(it for it in plants.items if len(tx.words(it["text"])) > 40)
    host = " ".join(d for d in plants.docs[5::6][:6])  # clean hosts
    doc = host[:3000] + " " + item["text"] + " " + host[3000:]
    whole = _found(index, [doc])
    monkeypatch.setattr(tx, "CHUNK_BYTES", 400)  # pieces of ~200 characters
    assert _found(index, [doc, "x", doc]) == [whole[0], set(), whole[0]]
    assert item["id"] in whole[0]


def test_normalization_folds_unicode_case_punctuation_and_whitespace():
    assert tx.normalize("Ｈｅｌｌｏ,\tWORLD!!  Straße —\n ﬁne (x_y) 3.14") == (
        "hello world strasse fine x y 3 14"
    )
    assert tx.normalize("«¿Qué?» ½ café") == tx.normalize("qué 1⁄2 CAFÉ")
    assert tx.normalize("") == "" and tx.normalize(" ,.; ") == ""


def test_short_items_match_whole_and_the_shortest_are_skipped_and_named(tmp_path):
    items = [
        {"id": "short", "text": "Return the number of items in the sorted queue"},  # 9 words
        {"id": "tiny", "text": "Close the file."},  # 3 words: skipped
        {"id": "long", "text": " ".join(f"w{i}" for i in range(30))},
    ]
    index = compile_index(_spec(tmp_path, items, "mini"), ngram=13, min_words=8)
    assert index.lengths == [9, 13]
    assert index.describe()["benchmarks"] == [
        {"name": "mini", "items": 3, "indexed": 2, "skipped": 1, "skipped_ids": ["tiny"]}
    ]
    docs = [
        "Well: RETURN the number of items, in the sorted queue!",
        "return the number of items in the queue",  # a word missing
        "close the file",
        " ".join(f"w{i}" for i in range(5, 22)),  # 17 words: 5 of 18 n-grams
        " ".join(f"w{i}" for i in range(0, 21)),  # 9 of 18
    ]
    count, best, found = index.match(docs, 0.5)
    assert count.tolist() == [1, 0, 0, 0, 1]
    assert [index.item_ids[i] for f in found for i in f] == ["mini:short", "mini:long"]
    assert best.tolist() == pytest.approx([1.0, 0.0, 0.0, 5 / 18, 0.5])


def test_the_four_file_formats_give_the_same_items_and_fingerprint(tmp_path, plants):
    rows = [{"id": it["id"], "q": it["text"], "choices": ["yes", "no"]} for it in plants.items[:40]]
    (tmp_path / "b.json").write_text(json.dumps({"data": rows}))
    write_jsonl(tmp_path / "b.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "b.parquet")
    with open(tmp_path / "b.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["id", "q", "choices"])
        w.writeheader()
        for r in rows:
            w.writerow({**r, "choices": "yes no"})
    prints = set()
    for ext in ("json", "jsonl", "parquet", "csv"):
        spec = tmp_path / f"spec-{ext}.json"
        spec.write_text(json.dumps({"benchmarks": [
            {"name": "b", "files": [f"b.{ext}"], "fields": ["q", "choices"], "id": "id"}
        ]}))  # fmt: skip
        prints.add(compile_index(spec).fingerprint)
    assert len(prints) == 1
    # the same items elsewhere: the same fingerprint; one item changed: another
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "b.json").write_text(json.dumps(rows))
    (other / "spec.json").write_text((tmp_path / "spec-json.json").read_text())
    assert compile_index(other / "spec.json").fingerprint in prints
    rows[3]["q"] += " and more"
    (other / "b.json").write_text(json.dumps(rows))
    assert compile_index(other / "spec.json").fingerprint not in prints
    assert compile_index(tmp_path / "spec-json.json", ngram=8).fingerprint not in prints


def test_a_saved_index_loads_with_its_fingerprint_and_answers_the_same(tmp_path, plants, index):
    save_index(index, tmp_path / "idx")
    back = load_index(tmp_path / "idx")
    assert back.fingerprint == index.fingerprint
    assert _found(back, plants.docs[:60]) == _found(index, plants.docs[:60])
    assert open_index(str(tmp_path / "idx"), ngram=13, min_words=8) is not None
    with pytest.raises(InputError, match="compiled with ngram=13"):
        open_index(str(tmp_path / "idx"), ngram=10, min_words=8)
    np.save(tmp_path / "idx" / "keys.npy", back.keys[:-1])
    with pytest.raises(Exception, match="fingerprint"):
        load_index(tmp_path / "idx")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"benchmarks": []}, "names no benchmark"),
        ({"benchmarks": [{"name": "a:b", "files": ["x.jsonl"], "fields": ["q"]}]}, "name 'a:b'"),
        ({"benchmarks": [{"name": "a", "files": ["x.txt"], "fields": ["q"]}]}, "expected one of"),
        ({"benchmarks": [{"name": "a", "files": ["x.jsonl"], "fields": []}]}, "fields"),
        ({"benchmarks": [{"name": "a", "files": ["x.jsonl"], "fields": ["q"], "ids": "i"}]}, "unknown key 'ids'"),
        ({"benchmarks": [{"name": "a", "files": ["missing.jsonl"], "fields": ["q"]}]}, "no such file"),
        ({"benchmarks": [{"name": "a", "files": ["x.jsonl"], "fields": ["nope"]}]}, r"x.jsonl line 1: no field 'nope'"),
        ({"benchmarks": [{"name": "a", "files": ["x.jsonl"], "fields": ["q"], "id": "i"}]}, r"x.jsonl line 4: id '1' given twice"),
    ],
)  # fmt: skip
def test_a_bad_spec_or_benchmark_file_is_refused_naming_file_line_and_field(
    tmp_path, spec, message
):
    (tmp_path / "x.jsonl").write_text(
        '{"q": "a b c d e f g h i", "i": 0}\n\n{"q": "z", "i": 1}\n{"q": "y", "i": 1}\n'
    )
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(InputError, match=message):
        compile_index(path)


# ------------------------------------------------------------------ the annotation


@pytest.fixture(scope="module")
def world(tmp_path_factory, plants):
    tmp = tmp_path_factory.mktemp("deconann")
    docs = plants.docs[:180]
    src = write_jsonl(tmp / "docs.jsonl", [{"text": d} for d in docs])
    tok = tmp / "tok"
    tokenize([str(src)], str(tok), shard_size=120_000)
    spec = _spec(tmp, plants.items)
    ann = tmp / "decon"
    units.run_local(
        plan_annotation(str(tok), str(ann), annotator="decon", params={"benchmarks": str(spec)})
    )
    return {"tmp": tmp, "tok": tok, "ann": ann, "spec": spec, "docs": docs}


def test_the_annotation_has_the_decon_columns_and_the_index_fingerprint(world, plants):
    t = read_annotation(world["ann"])
    m = read_manifest(world["ann"])
    assert len(m["shards"]) > 1
    want, best = decon_plants.reference(world["docs"], plants.items)
    assert t.column("items").to_pylist() == [len(w) for w in want]
    assert [set(x) for x in t.column("item_ids").to_pylist()] == [
        {f"stdlib_qa:{i}" for i in w} for w in want
    ]
    assert t.column("benchmarks").to_pylist() == [["stdlib_qa"] if w else [] for w in want]
    np.testing.assert_allclose(t.column("max_overlap").to_numpy(), best, rtol=1e-6)
    index = compile_index(world["spec"])
    assert m["annotator"]["index"]["fingerprint"] == index.fingerprint
    s = summarize(str(world["ann"]))
    assert s["decon"]["benchmarks"][0]["name"] == "stdlib_qa"
    assert s["decon"]["benchmarks"][0]["documents"] == sum(1 for w in want if w)
    assert s["decon"]["benchmarks"][0]["items_hit"] == len(set().union(*want))


def test_a_rerun_rewrites_a_lost_unit_to_the_same_bytes_and_other_benchmarks_change_the_fingerprint(
    world, plants
):
    params = {"benchmarks": str(world["spec"])}
    out = world["tmp"] / "one-process"
    annotate(world["tok"], out, "decon", params)
    units_built = {p.name: p.read_bytes() for p in (world["ann"] / "shards").glob("*.parquet")}
    assert {p.name: p.read_bytes() for p in (out / "shards").glob("*.parquet")} == units_built
    (out / "manifest.json").unlink()
    lost = out / "shards" / sorted(units_built)[1]
    lost.unlink()
    annotate(world["tok"], out, "decon", params)
    assert lost.read_bytes() == units_built[lost.name]
    (world["tmp"] / "other").mkdir()
    other = _spec(world["tmp"] / "other", plants.items[:50])
    tok = str(world["tok"])
    same = plan_annotation(tok, str(world["tmp"] / "x"), annotator="decon",
                           params={"benchmarks": str(world["spec"])})  # fmt: skip
    fewer = plan_annotation(tok, str(world["tmp"] / "y"), annotator="decon",
                            params={"benchmarks": str(other)})  # fmt: skip
    assert fewer.meta["fingerprint"] != same.meta["fingerprint"]


def test_a_pool_filtered_on_no_overlap_holds_only_the_clean_documents(world, plants):
    out = world["tmp"] / "pool"
    build_pool(
        [str(world["tok"])], str(out), seq_len=64, filter="decon.items = 0",
        annotations=[str(world["ann"])],
    )  # fmt: skip
    want, _ = decon_plants.reference(world["docs"], plants.items)
    kept = sorted(PoolReader(out).documents.column("doc_id").to_pylist())
    assert kept == [i for i, w in enumerate(want) if not w]
    assert len(kept) < len(world["docs"])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "parameter benchmarks"),
        ({"benchmarks": "/nonexistent/spec.json"}, "no such spec file"),
        ({"benchmarks": "x", "ngram": 0}, r"ngram: 0 is outside the allowed range \[1, 64\]"),
        ({"benchmarks": "x", "ngram": 65}, r"ngram: 65 is outside"),
        (
            {"benchmarks": "x", "min_words": 14},
            r"min_words: 14 is outside the allowed range \[1, 13\]",
        ),
        (
            {"benchmarks": "x", "threshold": 0.0},
            r"threshold: 0.0 is outside the allowed range \(0, 1\]",
        ),
    ],
)
def test_bad_parameters_are_refused_before_anything_is_written(world, tmp_path, params, message):
    with pytest.raises(InputError, match=message):
        plan_annotation(str(world["tok"]), str(tmp_path / "a"), annotator="decon", params=params)
    assert not (tmp_path / "a").exists()


def test_the_command_line_compiles_an_index_the_annotator_reads(world, tmp_path, capsys):
    assert main(["decon", "compile", str(world["spec"]), "--out", str(tmp_path / "idx")]) == 0
    out = capsys.readouterr().out
    index = compile_index(world["spec"])
    assert index.fingerprint in out and "stdlib_qa: 240 items" in out
    assert main([
        "annotate", str(world["tok"]), "--annotator", "decon",
        "--param", f"benchmarks={tmp_path / 'idx'}", "--out", str(tmp_path / "ann"),
    ]) == 0  # fmt: skip
    a = read_annotation(tmp_path / "ann").column("item_ids").to_pylist()
    assert a == read_annotation(world["ann"]).column("item_ids").to_pylist()
    assert (
        main(["decon", "compile", str(tmp_path / "nope.json"), "--out", str(tmp_path / "i2")]) == 2
    )
    assert "nope.json: no such file" in capsys.readouterr().err


def test_on_object_storage_a_spec_and_an_index_give_the_bytes_of_a_local_build(
    tmp_path,
    plants,
    s3,  # noqa: F811
):
    fs, bucket = s3
    docs = plants.docs[:90]
    src = write_jsonl(tmp_path / "docs.jsonl", [{"text": d} for d in docs])
    tok = f"s3://{bucket}/tok"
    tokenize([str(src)], tok, shard_size=60_000)
    (tmp_path / "bench").mkdir()
    spec = _spec(tmp_path / "bench", plants.items)
    store = storage.open_store(f"s3://{bucket}/bench")
    store.put_bytes("spec.json", spec.read_bytes())
    store.put_bytes("stdlib_qa.jsonl", (tmp_path / "bench" / "stdlib_qa.jsonl").read_bytes())
    save_index(compile_index(spec), tmp_path / "idx")
    for f in (tmp_path / "idx").iterdir():
        storage.open_store(f"s3://{bucket}/idx").put_bytes(f.name, f.read_bytes())
    local_tok, local = tmp_path / "tok-local", tmp_path / "local"
    tokenize([str(src)], str(local_tok), shard_size=60_000)
    want = annotate(local_tok, local, "decon", {"benchmarks": str(spec)})
    for where in (f"s3://{bucket}/bench/spec.json", f"s3://{bucket}/idx"):
        out = f"s3://{bucket}/ann/{where.rsplit('/', 1)[1]}"
        m = units.run_local(
            plan_annotation(tok, out, annotator="decon", params={"benchmarks": where})
        )
        assert m["annotator"]["index"]["fingerprint"] == want["annotator"]["index"]["fingerprint"]
        got = storage.open_store(out)
        for f in want["files"]:
            assert got.read_bytes(f["path"]) == (local / f["path"]).read_bytes()

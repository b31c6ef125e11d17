"""Building pools: selection, validation slice, global shuffle, packing, shards, manifest."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardcore import manifest as mf
from shardcore import units
from shardcore.errors import InputError
from shardcore.pool import Pool, build_pool, plan_pool
from shardcore.shuffle import get_shuffle
from tests.unit import pool_fixtures as pf

SEQ_LEN = 255
SMALL = {"memory": 1 << 20, "shard_size": 200_000}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("tokenized")
    return [
        pf.write_tokenized(root / "prose", pf.corpus("prose", 1500), shard_docs=400, name="prose"),
        pf.write_tokenized(root / "code", pf.corpus("code", 60), shard_docs=25, name="code"),
    ]


@pytest.fixture(scope="module")
def pool(sources, tmp_path_factory) -> Pool:
    out = tmp_path_factory.mktemp("pool") / "p"
    build_pool(
        [str(s) for s in sources], str(out), seq_len=SEQ_LEN, val_fraction=0.1, seed=3, **SMALL
    )
    return Pool(out)


def _all_docs(sources) -> dict[tuple[int, int], np.ndarray]:
    return {
        (s, d): ids for s, src in enumerate(sources) for d, ids in enumerate(pf.source_tokens(src))
    }


def _pool_docs(pool: Pool) -> dict[int, np.ndarray]:
    """Every pool document's tokens, rebuilt from the records and their segments."""
    pieces = collections.defaultdict(list)
    for i in range(pool.num_records):
        rec = pool.record(i)
        b = pool.boundaries(i)
        for start, length, doc, offset in zip(
            b["start"], b["length"], b["doc"], b["doc_offset"], strict=True
        ):
            if doc >= 0:
                pieces[int(doc)].append((int(offset), rec[start : start + length]))
    return {
        d: np.concatenate([p for _, p in sorted(ps, key=lambda x: x[0])])
        for d, ps in pieces.items()
    }


def test_it_loses_and_duplicates_no_document(sources, pool):
    everything = _all_docs(sources)
    seen = []
    for p in (pool, Pool(pool.path / "val")):
        docs = p.documents
        keys = list(
            zip(docs.column("source").to_pylist(), docs.column("doc_id").to_pylist(), strict=True)
        )
        rebuilt = _pool_docs(p)
        assert sorted(rebuilt) == list(range(len(keys)))
        for k, key in enumerate(keys):
            assert np.array_equal(rebuilt[k], everything[key]), key
        seen.extend(keys)
    assert sorted(seen) == sorted(everything)  # the multiset of documents is unchanged
    # And a checksum of all tokens: the records minus their padding hold every token once.
    want = sum(int(v.astype(np.int64).sum()) for v in everything.values())
    got = 0
    for p in (pool, Pool(pool.path / "val")):
        eos = p.manifest["tokenizer"]["eos_id"]
        records = p.records(0, p.num_records).astype(np.int64)
        got += int(records.sum()) - eos * p.manifest["padding_tokens"]
    assert got == want


def test_it_writes_records_of_seq_len_plus_one_tokens_with_little_padding(pool):
    m = pool.manifest
    assert m["kind"] == "pool" and m["record_tokens"] == SEQ_LEN + 1
    assert pool.records(0, pool.num_records).shape == (pool.num_records, SEQ_LEN + 1)
    assert m["num_records"] * (SEQ_LEN + 1) == m["num_tokens"] + m["padding_tokens"]
    assert m["padding_tokens"] < len(m["shards"]) * (SEQ_LEN + 1)  # under one record per bucket
    assert len(m["shards"]) > 3
    assert m["cumulative_records"] == [s["first_record"] for s in m["shards"]] + [m["num_records"]]


def test_it_checksums_every_file_and_lists_its_parents(pool, sources):
    m = pool.manifest
    assert m["parents"] == [mf.read_manifest(s)["fingerprint"] for s in sources]
    listed = {f["path"] for f in m["files"]}
    assert "documents.parquet" in listed and all(
        f"{s['prefix']}.{ext}" in listed
        for s in m["shards"]
        for ext in ("bin", "idx", "segments.npz", "docs.parquet")
    )
    for info in m["files"]:
        rel = info["path"]
        assert mf.file_checksum(pool.path / rel) == info["xxh3"]
        assert (pool.path / rel).stat().st_size == info["size"]
    assert not (pool.path / "_pass1").exists()


def test_it_passes_verify_and_verify_finds_a_damaged_shard(pool, tmp_path):
    import shutil

    from shardcore.verify import verify

    assert verify(pool.path).problems == []
    copy = tmp_path / "copy"
    shutil.copytree(pool.path, copy)
    victim = copy / f"{pool.manifest['shards'][1]['prefix']}.bin"
    data = bytearray(victim.read_bytes())
    data[5000] ^= 0xFF
    victim.write_bytes(bytes(data))
    problems = verify(copy).problems
    assert len(problems) == 1 and "pool-" in problems[0].path and problems[0].offset <= 5000


def test_it_opens_pool_shards_with_megatron_core(pool):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    first = 0
    for shard in pool.manifest["shards"]:
        ds = IndexedDataset(str(pool.path / shard["prefix"]), multimodal=False, mmap=True)
        assert len(ds) == shard["records"]
        assert (ds.sequence_lengths == SEQ_LEN + 1).all()
        for r in (0, len(ds) - 1):
            assert np.array_equal(ds[r], pool.record(first + r))
        first += shard["records"]


def test_it_holds_out_a_validation_slice_stable_across_rebuilds(sources, pool, tmp_path):
    val = Pool(pool.path / "val")
    assert val.manifest["split"] == "val" and pool.manifest["val"]["path"] == "val"
    assert (
        0.05
        < val.manifest["documents"] / (val.manifest["documents"] + pool.manifest["documents"])
        < 0.15
    )
    rebuilt = build_pool(
        [str(sources[0])],
        str(tmp_path / "p2"),
        seq_len=100,
        val_fraction=0.1,
        seed=99,
        filter="n_tokens > 20",
        **SMALL,
    )
    assert rebuilt["fingerprint"] != pool.manifest["fingerprint"]
    before = {
        d
        for s, d in zip(
            val.documents.column("source").to_pylist(),
            val.documents.column("doc_id").to_pylist(),
            strict=True,
        )
        if s == 0
    }
    after = set(Pool(tmp_path / "p2" / "val").documents.column("doc_id").to_pylist())
    long_enough = {d for d in before if pf.corpus("prose", 1500)[d][1].size > 20}
    assert after == long_enough


@pytest.mark.parametrize(
    "shuffle,options", [("exact", {}), ("grid", {}), ("local", {}), ("buffer", {"buffer": 8})]
)
def test_it_orders_documents_as_the_shuffle_does_in_memory(sources, tmp_path, shuffle, options):
    m = build_pool(
        [str(s) for s in sources],
        str(tmp_path / "p"),
        seq_len=64,
        shuffle=shuffle,
        seed=5,
        shuffle_options=options,
        **SMALL,
    )
    stream = [
        (s, d) for s, src in enumerate(sources) for d in range(mf.read_manifest(src)["documents"])
    ]
    counts = np.array(
        [sh["documents"] for src in sources for sh in mf.read_manifest(src)["shards"]]
    )
    order = get_shuffle(shuffle).permutation(counts, 5, m["shuffle"]["num_buckets"], **options)
    docs = Pool(tmp_path / "p").documents
    got = list(
        zip(docs.column("source").to_pylist(), docs.column("doc_id").to_pylist(), strict=True)
    )
    assert got == [stream[i] for i in order]


def test_it_writes_identical_bytes_with_one_and_two_workers(sources, tmp_path):
    kwargs = dict(seq_len=SEQ_LEN, val_fraction=0.1, seed=11, **SMALL)
    one = build_pool([str(s) for s in sources], str(tmp_path / "w1"), workers=1, **kwargs)
    two = build_pool([str(s) for s in sources], str(tmp_path / "w2"), workers=2, **kwargs)
    assert one["files"] == two["files"] and one["fingerprint"] == two["fingerprint"]
    assert one["val"] == two["val"]
    assert (
        mf.read_manifest(tmp_path / "w1" / "val")["files"]
        == mf.read_manifest(tmp_path / "w2" / "val")["files"]
    )


def _built_bytes(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != units.PLAN_NAME and units.MARKER_DIR not in p.parts
    }


def test_it_writes_the_same_bytes_without_the_merge_when_the_inputs_differ(tmp_path, monkeypatch):
    # Two sources whose documents carry different properties, and buckets one per group:
    # some inputs have no document in a group. Pass 2 reading the pass-1 files writes what
    # it writes after the merge, columns and all.
    from shardcore.pool import layout
    from shardcore.pool import plan as pool_plan

    prose = pf.write_tokenized(tmp_path / "a", pf.corpus("prose", 120), shard_docs=40, name="a")
    code = tuple(({**p, "stars": i}, ids) for i, (p, ids) in enumerate(pf.corpus("code", 20)))
    starred = pf.write_tokenized(tmp_path / "b", code, shard_docs=7, name="b")
    inputs = [str(prose), str(starred)]
    kwargs = dict(seq_len=63, val_fraction=0.1, seed=3, **SMALL)
    monkeypatch.setattr(pool_plan, "_group_buckets", lambda *a: 1)
    built = {}
    for name, opens in (("no merge", layout.DIRECT_OPENS), ("merge", 0)):
        monkeypatch.setattr(layout, "DIRECT_OPENS", opens)
        for staging in ("references", "tokens"):
            out = tmp_path / f"{name}-{staging}"
            assert plan_pool(inputs, str(out), staging=staging, **kwargs).meta["merge_levels"] == (
                0 if name == "no merge" else 1
            )
            build_pool(inputs, str(out), staging=staging, **kwargs)
            built[name, staging] = _built_bytes(out)
    first = built["no merge", "references"]
    assert len([k for k in first if k.endswith(".bin")]) > 3
    for key, files in built.items():
        assert files == first, key


def test_it_writes_the_same_bytes_with_either_staging_and_any_worker_count(tmp_path, monkeypatch):
    # Prose docstrings are mostly short (gathered through an index array), code modules
    # long (copied as slices); a BOS before every document exercises the head tokens.
    src = pf.write_tokenized(
        tmp_path / "mixed",
        pf.corpus("prose", 300) + pf.corpus("code", 30),
        shard_docs=70,
        name="mixed",
        bos_id=100257,
    )
    kwargs = dict(seq_len=127, val_fraction=0.1, seed=7, bos=True, **SMALL)
    built = {}
    for staging, workers in (("references", 1), ("references", 2), ("tokens", 1), ("tokens", 2)):
        out = tmp_path / f"{staging}-{workers}"
        build_pool([str(src)], str(out), staging=staging, workers=workers, **kwargs)
        built[staging, workers] = _built_bytes(out)
    first = built["references", 1]
    assert "manifest.json" in first and "val/manifest.json" in first
    assert len([k for k in first if k.endswith(".bin")]) > 3
    # A bucket whose documents come from more inputs than a unit holds open is read into
    # memory input by input: the same bytes.
    from shardcore.pool import pass2

    monkeypatch.setattr(pass2, "_MAX_OPEN", 1)
    build_pool([str(src)], str(tmp_path / "few-open"), staging="references", **kwargs)
    built["references", "one open file"] = _built_bytes(tmp_path / "few-open")
    # Five inputs: pass 2 reads the pass-1 files, no merge. Planned with one (every input
    # in one level), the merge's grouping (one bucket per group, or every bucket in one
    # group) and its combining of the inputs' slices in batches change no byte either.
    from shardcore.pool import layout, merge, unit_reads
    from shardcore.pool import plan as pool_plan

    plan = plan_pool([str(src)], str(tmp_path / "direct-plan"), **kwargs)
    assert plan.meta["merge_levels"] == 0 and len(plan.phases) == 2  # pass 1, pass 2
    assert len(unit_reads(plan, plan.phases[1][0])) == 6  # five pass-1 files, the table
    monkeypatch.setattr(layout, "DIRECT_OPENS", 0)
    plan = plan_pool([str(src)], str(tmp_path / "merge-plan"), **kwargs)
    assert plan.meta["merge_levels"] == 1 and len(plan.phases) == 3
    monkeypatch.setattr(merge, "_COMBINE_EVERY", 2)
    for name, group in (("one bucket per group", lambda *a: 1), ("one group", lambda *a: 10**6)):
        monkeypatch.setattr(pool_plan, "_group_buckets", group)
        for staging in ("references", "tokens"):
            out = tmp_path / f"{staging}-{name}"
            build_pool([str(src)], str(out), staging=staging, **kwargs)
            built[staging, name] = _built_bytes(out)
    # Nor does the merge's tree: with at most two files per merge unit, the five inputs
    # are merged in three levels (ranges of 4 groups, then 2, then the groups).
    monkeypatch.setattr(layout, "MERGE_FAN_IN", 2)
    for name, group in (("tree of single buckets", lambda *a: 1), ("tree", lambda *a: 2)):
        monkeypatch.setattr(pool_plan, "_group_buckets", group)
        plan = plan_pool([str(src)], str(tmp_path / "tree-plan"), **kwargs)
        assert (plan.meta["merge_levels"], plan.meta["merge_fan_in"]) == (3, 2)
        assert len(plan.phases) == 5  # pass 1, three merge levels, pass 2
        # Level 1: three batches (of two, two and one inputs) per range; the last level
        # one unit per group; every merge unit reads at most two files.
        assert len(plan.phases[1]) % 3 == 0 and plan.phases[3][0]["id"] == "merge-00000"
        reads = [unit_reads(plan, u) for phase in plan.phases[1:4] for u in phase]
        assert max(len(r) for r in reads) == 2 and min(len(r) for r in reads) == 1
        for staging in ("references", "tokens"):
            out = tmp_path / f"{staging}-{name}"
            build_pool([str(src)], str(out), staging=staging, **kwargs)
            built[staging, name] = _built_bytes(out)
    for key, files in built.items():
        assert files == first, key
    # And each shard holds its documents, each after a BOS, then its padding (EOS).
    pool = Pool(tmp_path / "references-1")
    tokens = pf.source_tokens(src)
    doc_ids = pool.documents.column("doc_id").to_pylist()
    eos = pool.manifest["tokenizer"]["eos_id"]
    for k, shard in enumerate(pool.manifest["shards"]):
        first = shard["first_document"]
        stream = np.concatenate(
            [
                np.concatenate([[100257], tokens[d]])
                for d in doc_ids[first : first + shard["documents"]]
            ]
        )
        records = np.asarray(pool.reader(k).tokens)
        assert np.array_equal(records[: stream.size], stream)
        assert records.size - stream.size == shard["padding"]
        assert (records[stream.size :] == eos).all()


def test_a_pool_of_more_buckets_than_a_directory_holds_fans_its_shards_out(
    sources, tmp_path, monkeypatch
):
    """Shards, unit markers and scratch files are spread over directories of at most
    FANOUT entries (here 3), and the documents table stays partitioned (the shards'
    sidecars: finalize reads no shard); the records, documents and shard checksums are
    the flat pool's."""
    from shardcore import verify
    from shardcore.pool import layout

    kwargs = dict(seq_len=64, val_fraction=0.1, **SMALL)
    flat = build_pool([str(s) for s in sources], str(tmp_path / "flat"), **kwargs)
    monkeypatch.setattr(layout, "FANOUT", 3)
    fanned = build_pool([str(s) for s in sources], str(tmp_path / "fanned"), **kwargs)
    assert len(flat["shards"]) > 3
    prefixes = [sh["prefix"] for sh in fanned["shards"]]
    assert prefixes[:4] == [
        "shards/0000/pool-0000000",
        "shards/0000/pool-0000001",
        "shards/0000/pool-0000002",
        "shards/0001/pool-0000003",
    ]
    shards = tmp_path / "fanned" / "shards"
    assert all(len(list(d.iterdir())) <= 3 * 4 for d in shards.iterdir())  # 4 files a shard
    assert not list(shards.glob("*.bin"))
    markers = list((tmp_path / "fanned" / units.MARKER_DIR).rglob("*.done.json"))
    assert markers and all(m.parent.parent.name == units.MARKER_DIR for m in markers)
    a, b = Pool(tmp_path / "flat"), Pool(tmp_path / "fanned")
    assert a.num_records == b.num_records
    assert np.array_equal(a.records(0, a.num_records), b.records(0, b.num_records))
    assert not a.partitioned and b.partitioned and fanned["documents_table"] == "shards"
    assert not (tmp_path / "fanned" / "documents.parquet").exists()
    assert b.document_files()[:2] == [f"{p}.docs.parquet" for p in prefixes[:2]]
    assert verify.check_files_read(b.path, b.manifest, b.document_files()) > 0
    assert a.documents.equals(b.documents)  # source_fingerprint included
    assert a.documents.num_rows == fanned["documents"]
    assert np.array_equal(a.document_values("kind"), b.document_values("kind"))
    # The properties a pool page offers: the same from the first sidecar's footer.
    from shardcore import props
    from webapp.catalog.measures import pool_properties_measure
    from webapp.catalog.models import Pool as PoolRow

    listed = [pool_properties_measure(pool=PoolRow(path=str(p.path))) for p in (a, b)]
    assert listed[0] == listed[1] == props.names(props.props_type(a.document_schema))
    assert "kind" in listed[1]
    # A property reads its column alone, flat or partitioned (the source fingerprints of
    # a partitioned table from its source column and the manifest).
    import pyarrow.parquet as pq

    asked: list = []
    iter_batches = pq.ParquetFile.iter_batches

    def batches(self, **kw):
        asked.append(kw.get("columns"))
        return iter_batches(self, **kw)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", batches)
    for name in ("_doc.source_fingerprint", "source_fingerprint", "_doc.line"):
        assert np.array_equal(a.document_values(name), b.document_values(name)), name
    assert asked and all(c and len(c) == 1 for c in asked), asked
    assert {c[0] for c in asked} == {"source_fingerprint", "source", "line"}
    # In batches of a bounded number of rows, the same values in pool order.
    got = [(first, cols["kind"]) for first, cols in b.iter_document_columns(["kind"], 7)]
    assert all(len(v) <= 7 for _, v in got) and got[0][0] == 0
    assert all(f + len(v) == g for (f, v), (g, _) in zip(got, got[1:], strict=False))
    assert np.array_equal(np.concatenate([v for _, v in got]), a.document_values("kind"))
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", iter_batches)
    # The labels of some records: those of the whole pool's labels, reading only what
    # holds them (repeated and unordered records included).
    rng = np.random.default_rng(2)
    for pool in (a, b):
        recs = rng.integers(0, pool.num_records, 40)
        for name in ("kind", "_doc.n_tokens"):
            whole = pool.record_labels(name)
            assert np.array_equal(pool.record_labels(name, recs), whole[recs]), name
        assert pool.record_labels("kind", recs[:0]).size == 0
    # What the orderings and the recipe read of a pool: the same from the sidecars.
    from shardcore.order import recipe

    names = ["kind", "_doc.n_tokens"]
    (na, ca), (nb, cb) = recipe.document_columns(a, names), recipe.document_columns(b, names)
    assert na == nb == a.documents.num_rows
    assert all(np.array_equal(ca[n], cb[n]) for n in names)
    ch_a = recipe.pool_characteristics([a], by=["kind"])
    ch_b = recipe.pool_characteristics([b], by=["kind"])
    assert np.array_equal(ch_a.idx, ch_b.idx) and np.array_equal(ch_a.val, ch_b.val)
    assert ch_a.names == ch_b.names
    # The same shard files' bytes under the fanned-out names (and no documents.parquet).
    shard_sums = sorted(e["xxh3"] for e in flat["files"] if e["path"] != "documents.parquet")
    assert shard_sums == sorted(e["xxh3"] for e in fanned["files"])
    assert verify.verify(str(tmp_path / "fanned")).ok


@pytest.mark.parametrize("staging", ["references", "tokens"])
def test_it_stages_references_or_tokens_in_pass_one(sources, tmp_path, staging):
    plan = plan_pool(
        [str(s) for s in sources], str(tmp_path / "p"), seq_len=64, staging=staging, **SMALL
    )
    assert plan.meta["staging"] == staging
    assert "staging" not in plan.params  # not part of the fingerprint: same output bytes
    units.save_plan(plan)
    for unit in plan.phases[0]:
        units.run_unit(plan, unit["id"])
    # The plan's input table, saved with it; then pass 1's files.
    table = tmp_path / "p" / plan.meta["inputs_table"]["path"]
    assert table.is_file()
    staged = [p for p in (tmp_path / "p" / "_pass1").rglob("*") if p.is_file() and p != table]
    # Per input, one metadata file (plus its tokens with "tokens" staging), fanned out.
    for ext in (".arrow",):
        assert len([p for p in staged if p.name.endswith(ext)]) == len(plan.phases[0])
    assert all(p.parent.parent.name == "in" for p in staged)
    token_bytes = sum(p.stat().st_size for p in staged if p.name.endswith(".tokens"))
    data_bytes = sum(mf.read_manifest(s)["tokens"] for s in sources) * 4
    if staging == "tokens":
        assert token_bytes == data_bytes
    else:
        assert token_bytes == 0
        assert sum(p.stat().st_size for p in staged) < data_bytes / 4


def test_it_chooses_reference_staging_for_local_inputs_and_checks_the_mode(sources, tmp_path):
    plan = plan_pool([str(sources[1])], str(tmp_path / "p"), seq_len=32)
    assert plan.meta["staging"] == "references"
    with pytest.raises(InputError, match="staging must be auto, references or tokens"):
        plan_pool([str(sources[1])], str(tmp_path / "p"), seq_len=32, staging="copy")


def test_it_selects_documents_with_a_filter(sources, tmp_path):
    m = build_pool(
        [str(s) for s in sources], str(tmp_path / "p"), seq_len=64, filter="kind = 'code'", **SMALL
    )
    kinds = set(Pool(tmp_path / "p").document_values("kind").tolist())
    assert kinds == {"code"} and m["documents"] == 60


def test_it_names_an_unknown_property_before_any_work(sources, tmp_path):
    with pytest.raises(InputError, match="unknown property 'langue'"):
        plan_pool([str(sources[0])], str(tmp_path / "p"), seq_len=8, filter="langue = 'de'")
    assert not (tmp_path / "p").exists()


def test_it_labels_each_record_by_its_main_document(pool):
    labels = pool.record_labels("kind")
    source = pool.record_labels("source")
    kinds = pool.document_values("kind").tolist()
    for i in range(0, pool.num_records, 7):
        b = pool.boundaries(i)
        main = int(b["doc"][np.argmax(np.where(b["doc"] >= 0, b["length"], -1))])
        assert labels[i] == kinds[main]
        assert source[i] == pool.documents.column("source")[main].as_py()
    with pytest.raises(InputError, match="unknown property 'colour'"):
        pool.record_labels("colour")


def test_it_skips_finished_units_when_rerun(sources, tmp_path):
    plan = plan_pool([str(sources[1])], str(tmp_path / "p"), seq_len=32, **SMALL)
    first = units.run_local(plan)
    stamp = {p: p.stat().st_mtime_ns for p in (tmp_path / "p" / "shards").iterdir()}
    again = units.run_local(plan)
    assert first == again
    assert stamp == {p: p.stat().st_mtime_ns for p in (tmp_path / "p" / "shards").iterdir()}


def test_it_refuses_bos_for_a_tokenizer_without_one(sources, tmp_path):
    with pytest.raises(InputError, match="has no BOS token"):
        plan_pool([str(sources[1])], str(tmp_path / "p"), seq_len=32, bos=True)


@pytest.mark.parametrize("staging", ["references", "tokens"])
def test_it_keeps_peak_memory_under_the_budget(tmp_path, staging):
    src = pf.write_tokenized(tmp_path / "code", pf.corpus("code", 400), shard_docs=50, name="code")
    budget = 2 << 20
    data_bytes = mf.read_manifest(src)["tokens"] * 4
    assert data_bytes > 3 * budget  # the input does not fit in the budget
    code = f"""
import json, tracemalloc
from shardcore.pool import build_pool
# A first, small build imports everything (modules are not data), then measure a real one.
build_pool([{str(src)!r}], {str(tmp_path / "warm")!r}, seq_len=64, filter="n_tokens < 200")
tracemalloc.start()
m = build_pool([{str(src)!r}], {str(tmp_path / "p")!r}, seq_len=2047, memory={budget}, shard_size=64 << 20, staging={staging!r})
print(json.dumps({{"peak": tracemalloc.get_traced_memory()[1], "buckets": m["shuffle"]["num_buckets"]}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["buckets"] >= 3
    assert result["peak"] < budget, result


def test_it_pools_a_source_made_by_the_tokenize_stage(tmp_path):
    from shardcore.tokenize import tokenize
    from shardcore.tokenized import TokenizedSource

    docs = pf.corpus("prose", 300)
    enc_text = [
        json.dumps({"text": pf._encoding().decode(ids[:-1].tolist()), "kind": props["kind"]})
        for props, ids in docs
    ]
    (tmp_path / "in.jsonl").write_text("\n".join(enc_text) + "\n")
    tokenize([str(tmp_path / "in.jsonl")], str(tmp_path / "tok"), shard_size=1 << 14)
    source = TokenizedSource(tmp_path / "tok")
    m = build_pool([str(tmp_path / "tok")], str(tmp_path / "p"), seq_len=63, **SMALL)
    pool = Pool(tmp_path / "p")
    assert m["documents"] == source.num_documents == 300
    rebuilt = _pool_docs(pool)
    ids = pool.documents.column("doc_id").to_pylist()
    for k, doc_id in enumerate(ids):
        assert np.array_equal(rebuilt[k], source.tokens(doc_id))

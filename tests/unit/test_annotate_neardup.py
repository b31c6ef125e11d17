"""Near-duplicates across two tokenized sources, as units (stage annotate.neardup): real
documents (CPython's stdlib sources) in one source, planted near-copies (a known fraction
of words replaced) and exact copies of them in the other; recall and precision against
brute-force Jaccard over every pair; the same clusters for any number of partitions; one
source gives the ``minhash`` annotator's columns; an interrupted run heals to the same
bytes."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from shardcore import units
from shardcore.annotate import create
from shardcore.annotate.artifact import annotate, read_annotation
from shardcore.annotate.dedup import jaccard, shingles
from shardcore.annotate.neardup import annotation_paths, dedup_group, plan_group
from shardcore.errors import InputError
from shardcore.manifest import read_manifest
from shardcore.storage import artifact_cache
from shardcore.tokenize import tokenize
from tests.unit.test_annotate_dedup import _mutate
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    rng = random.Random(11)
    originals = [r["text"] for r in stdlib_records(140, start=60, max_chars=2500)]
    vocab = sorted({w for t in originals for w in t.split()})
    a_docs = originals[:110]
    b_docs = originals[110:]  # texts of its own
    near, exact = [], []
    for frac in (0.005, 0.01, 0.02):
        for i in rng.sample(range(len(a_docs)), 8):
            near.append((i, len(a_docs) + len(b_docs), frac))
            b_docs.append(_mutate(a_docs[i], frac, rng, vocab))
    for i in rng.sample(range(len(a_docs)), 15):
        exact.append((i, len(a_docs) + len(b_docs)))
        b_docs.append(a_docs[i])
    tmp = tmp_path_factory.mktemp("neardup")
    toks = []
    for name, docs in (("a", a_docs), ("b", b_docs)):
        src = write_jsonl(tmp / f"{name}.jsonl", [{"text": t} for t in docs])
        tokenize([str(src)], str(tmp / name), shard_size=60_000)
        toks.append(str(tmp / name))
    return a_docs + b_docs, len(a_docs), near, exact, toks


def _columns(group) -> dict[str, np.ndarray]:
    tables = [read_annotation(p) for p in annotation_paths(group)]
    return {
        c: np.concatenate([np.asarray(t.column(c)) for t in tables])
        for c in ("dup_cluster", "dup_size", "dup_rank", "exact_hash")
    }


def test_clusters_across_sources_like_brute_force_jaccard(sources, tmp_path):
    docs, n_a, near, exact, toks = sources
    m = dedup_group(toks, str(tmp_path / "g"))
    assert m["kind"] == "annotation_group" and len(m["sources"]) == 2
    for p, tok in zip(annotation_paths(tmp_path / "g"), toks, strict=True):
        am = read_manifest(p)
        assert am["kind"] == "annotation" and am["tokenized"]["path"] == tok
        assert len(am["shards"]) >= 2  # clusters span shards and sources
    col = _columns(tmp_path / "g")
    cluster, rank, size = col["dup_cluster"], col["dup_rank"], col["dup_size"]
    assert len(cluster) == len(docs)
    for orig, copy in exact:  # every exact copy: in its original's cluster, after it
        assert cluster[copy] == cluster[orig] <= orig
        assert col["exact_hash"][orig] == col["exact_hash"][copy]
        assert rank[copy] > rank[orig]
    threshold = create("minhash").params["threshold"]
    sh = [shingles(d, 5) for d in docs]
    truth, pred = set(), set()
    for a, b in itertools.combinations(range(len(docs)), 2):
        if jaccard(sh[a], sh[b]) >= threshold:
            truth.add((a, b))
        if cluster[a] == cluster[b]:
            pred.add((a, b))
    hit = len(truth & pred)
    recall, precision = hit / len(truth), hit / len(pred)
    print(f"pairs: truth {len(truth)}, predicted {len(pred)}; recall {recall:.3f}, "
          f"precision {precision:.3f}")  # fmt: skip
    assert sum(1 for a, b in truth if a < n_a <= b) >= len(exact) + 10  # across sources
    assert recall >= 0.9 and precision >= 0.95
    for c in np.unique(cluster):  # dup_rank = 0 keeps each cluster once, the earliest
        members = np.flatnonzero(cluster == c)
        assert c == members[0] and (size[members] == len(members)).all()
        assert sorted(rank[members].tolist()) == list(range(len(members)))


def test_any_number_of_partitions_gives_the_same_clusters(sources, tmp_path):
    toks = sources[4]
    one = units.run_local(plan_group(toks, str(tmp_path / "one"), partitions=1))
    many = units.run_local(plan_group(toks, str(tmp_path / "many"), partitions=7))
    assert one["fingerprint"] == many["fingerprint"]
    a, b = _columns(tmp_path / "one"), _columns(tmp_path / "many")
    assert all((a[c] == b[c]).all() for c in a)


def test_one_source_gives_the_minhash_annotators_columns(sources, tmp_path):
    tok = sources[4][1]
    dedup_group([tok], str(tmp_path / "g"))
    mine = _columns(tmp_path / "g")
    annotate(tok, tmp_path / "single", "minhash")
    single = read_annotation(tmp_path / "single")
    for c, values in mine.items():
        assert (np.asarray(single.column(c)) == values).all(), c


def test_an_interrupted_group_heals_to_the_same_bytes(sources, tmp_path):
    toks = sources[4]
    clean = dedup_group(toks, str(tmp_path / "clean"))
    plan = plan_group(toks, str(tmp_path / "cut"), partitions=3)
    units.save_plan(plan)
    for phase in plan.phases[:2]:  # signatures and buckets done, then killed
        for unit in phase:
            units.run_unit(plan, unit["id"])
    # a bucket unit whose file was renamed into place but whose marker was never written
    units.marker_path(plan.out, "bucket-1").unlink()
    healed = units.run_local(plan_group(toks, str(tmp_path / "cut"), partitions=3))
    files = lambda root, m: {  # noqa: E731
        (s["annotation"], f["path"], f["xxh3"])
        for s in m["sources"]
        for f in read_manifest(root / s["annotation"])["files"]
    }
    assert files(tmp_path / "cut", healed) == files(tmp_path / "clean", clean)
    assert not (tmp_path / "cut" / "_work").exists()


def test_bad_groups_are_refused(sources, tmp_path):
    toks = sources[4]
    with pytest.raises(InputError, match="named twice"):
        plan_group([toks[0], toks[0]], str(tmp_path / "x"))
    with pytest.raises(InputError, match="at least one"):
        plan_group([], str(tmp_path / "x"))


def test_the_command_line_clusters_across_sources(sources, tmp_path, capsys):
    from shardcore.cli import main

    toks = sources[4]
    out = str(tmp_path / "cli")
    assert main(["annotate", *toks, "--annotator", "minhash", "--out", out]) == 0
    said = capsys.readouterr().out
    assert f"-> {out}/sources/1" in said and "near-duplicates across 2 sources" in said
    assert len(annotation_paths(out)) == 2
    # another annotator reads one source only: refused with the reason
    assert main(["annotate", *toks, "--annotator", "pii", "--out", str(tmp_path / "x")]) == 2
    assert "only minhash clusters across several (2 given)" in capsys.readouterr().err


def test_a_group_on_s3_writes_the_bytes_of_a_local_run(sources, s3_bucket, tmp_path):
    from shardcore import storage

    toks = sources[4]
    local = dedup_group(toks, str(tmp_path / "local"))
    remote = units.run_local(plan_group(toks, f"{s3_bucket}/group"), workers=2)
    assert remote["fingerprint"] == local["fingerprint"]
    for mine, theirs in zip(
        annotation_paths(f"{s3_bucket}/group"), annotation_paths(tmp_path / "local"), strict=True
    ):
        assert read_manifest(mine)["files"] == read_manifest(theirs)["files"]
        copy = artifact_cache.local_artifact(mine)  # a checked local copy of the remote one
        assert read_annotation(copy).equals(read_annotation(theirs))
    keys = storage.open_store(f"{s3_bucket}/group").list()
    assert not [k for k in keys if k.startswith("_work/")]  # the scratch is gone


@pytest.mark.parametrize("bands", [1, 17, 300])
def test_bucket_rows_are_ordered_as_a_lexsort_by_band_key_and_document(bands):
    """``bucket_order`` gives ``np.lexsort``'s order of (band, key, doc), with many copies
    (runs of equal keys), rows arriving in no order, and more bands than a byte counts."""
    from shardcore.annotate.buckets import ROW, bucket_order

    rng = np.random.default_rng(bands)
    n = 2000
    origin = np.where(rng.random(n) < 0.4, rng.integers(0, n, n), np.arange(n))
    rows = np.empty(n * bands, ROW)
    rows["band"] = np.repeat(np.arange(bands, dtype=np.uint64), n)
    rows["doc"] = np.tile(rng.permutation(n).astype(np.uint64), bands)
    rows["key"] = (origin[rows["doc"].astype(np.int64)] * 7919 + rows["band"] * 31) % 997
    rows = rows[rng.permutation(rows.size)]
    expected = np.lexsort((rows["doc"], rows["key"], rows["band"]))
    assert (bucket_order(rows) == expected).all()
    assert bucket_order(rows[:0]).size == 0

"""Near-duplicates on real documents (CPython's stdlib sources) with planted near-copies
(a known fraction of words replaced) and exact copies, through the annotation artifact:
recall and precision of the clusters against brute-force Jaccard over every pair."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from shardcore.annotate import create
from shardcore.annotate.artifact import annotate, read_annotation
from shardcore.annotate.dedup import jaccard, shingles
from shardcore.manifest import read_manifest
from shardcore.tokenize import tokenize
from tests.unit.tokenize_fixtures import stdlib_records, write_jsonl


def _mutate(text: str, frac: float, rng: random.Random, vocab: list[str]) -> str:
    words = text.split(" ")
    for i in rng.sample(range(len(words)), max(1, int(len(words) * frac))):
        words[i] = rng.choice(vocab)
    return " ".join(words)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(7)
    originals = [r["text"] for r in stdlib_records(160, start=40, max_chars=2500)]
    vocab = sorted({w for t in originals for w in t.split()})
    docs, planted_near, planted_exact = list(originals), [], []
    for frac in (0.005, 0.01, 0.02):
        for i in rng.sample(range(len(originals)), 10):
            planted_near.append((i, len(docs), frac))
            docs.append(_mutate(originals[i], frac, rng, vocab))
    for i in rng.sample(range(len(originals)), 20):
        planted_exact.append((i, len(docs)))
        docs.append(originals[i])
    tmp = tmp_path_factory.mktemp("dedup")
    src = write_jsonl(tmp / "docs.jsonl", [{"text": t} for t in docs])
    tok = tmp / "tok"
    tokenize([str(src)], str(tok), shard_size=200_000)
    return docs, planted_near, planted_exact, tok


def test_it_clusters_near_and_exact_copies_like_brute_force_jaccard(corpus, tmp_path):
    docs, planted_near, planted_exact, tok = corpus
    m = annotate(tok, tmp_path / "mh", "minhash")
    assert len(m["shards"]) >= 2  # clusters span shards
    t = read_annotation(tmp_path / "mh")
    cluster = np.asarray(t.column("dup_cluster"))
    rank = np.asarray(t.column("dup_rank"))
    size = np.asarray(t.column("dup_size"))
    exact = np.asarray(t.column("exact_hash"))
    # exact copies: all found, same exact hash, the copy ranks after its original
    for orig, copy in planted_exact:
        assert cluster[orig] == cluster[copy] == min(cluster[orig], orig)
        assert exact[orig] == exact[copy]
        assert rank[copy] > rank[orig]
    # brute force over every pair
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
    print(
        f"pairs: truth {len(truth)}, predicted {len(pred)}; recall {recall:.3f}, precision {precision:.3f}"
    )
    assert len(truth) >= len(planted_exact) + 20
    assert recall >= 0.9 and precision >= 0.95
    # each cluster's size and ranks are consistent: dup_rank = 0 keeps each cluster once
    for c in np.unique(cluster):
        members = np.flatnonzero(cluster == c)
        assert c == members[0] and (size[members] == len(members)).all()
        assert sorted(rank[members]) == list(range(len(members)))
    assert int((rank == 0).sum()) == len(np.unique(cluster))


def test_it_stays_within_a_small_memory_budget_with_the_same_clusters(corpus, tmp_path):
    docs, _, _, tok = corpus
    ann = create("minhash")
    sig, exact = ann.signatures(docs)
    wide = ann.cluster([sig], exact)
    assert ann.stats["passes"] == 1 and ann.stats["compactions"] == 0
    # a budget of 1 KiB: several passes per band (16 bytes x docs > budget) and the
    # pairs compacted whenever they outgrow it; the clusters are the same
    tight = ann.cluster([sig[:100], sig[100:]], exact, budget_bytes=1024)
    assert ann.stats["passes"] >= 3 and ann.stats["compactions"] >= 1
    assert (tight == wide).all()


def test_it_refuses_bands_that_do_not_divide_the_permutations():
    from shardcore.errors import InputError

    with pytest.raises(InputError, match="multiple of bands"):
        create("minhash", {"num_perm": 100, "bands": 16})


def _files(m) -> set:
    return {(f["path"], f["xxh3"]) for f in m["files"]}


def test_the_clusters_as_units_write_the_bytes_of_the_one_process_build(
    corpus, tmp_path, monkeypatch, capsys
):
    """The stage plans minhash's clusters as units over ranges of documents (the command
    line runs them too): the same files as the annotator's own finish in one process, for
    any number of ranges, and a build killed between phases heals to them."""
    from shardcore import units
    from shardcore.annotate import neardup
    from shardcore.annotate.stage import plan_annotation
    from shardcore.cli import main

    tok = corpus[3]
    one = annotate(tok, tmp_path / "one", "minhash")
    monkeypatch.setattr(neardup, "partitions_for", lambda n, params: 3)
    plan = plan_annotation(str(tok), str(tmp_path / "units"), annotator="minhash")
    assert plan.meta["partitions"] == 3 and len(plan.phases) > 5
    assert _files(units.run_local(plan, workers=2)) == _files(one)
    assert not (tmp_path / "units" / "work").exists()

    cut = plan_annotation(str(tok), str(tmp_path / "cut"), annotator="minhash")
    units.save_plan(cut)
    for phase in cut.phases[:4]:  # signatures, buckets, two rounds; then killed
        for unit in phase:
            units.run_unit(cut, unit["id"])
    units.marker_path(cut.out, "round-2-1").unlink()  # its files in place, no marker
    assert _files(units.run_local(cut)) == _files(one)

    assert (
        main(["annotate", str(tok), "--annotator", "minhash", "--out", str(tmp_path / "cli")]) == 0
    )
    assert _files(read_manifest(tmp_path / "cli")) == _files(one)
    said = capsys.readouterr().out.splitlines()
    assert "clusters: round-1 done (3 units)" in said and "clusters: resolve done (1 unit)" in said
    assert sum(line.startswith("shard ") for line in said) == len(one["shards"])


def _datasketch_signature(text: str, params: dict) -> np.ndarray:
    """datasketch's own MinHash of the document's shingles, one object per document."""
    import xxhash
    from datasketch import MinHash

    m = MinHash(params["num_perm"], seed=params["seed"], hashfunc=xxhash.xxh32_intdigest)
    m.update_batch(list(shingles(text, params["shingle"])))
    return m.hashvalues


@pytest.mark.parametrize("kernel", [True, False], ids=["compiled", "numpy"])
def test_batch_signatures_are_datasketchs_minhash_of_each_document(kernel, monkeypatch):
    """The batch signatures (shingles hashed and permuted for many documents at once)
    equal datasketch's MinHash of each document, on real text and on the edges: no word,
    fewer words than a shingle, exactly one shingle, non-ASCII words and punctuation."""
    from shardcore.annotate import dedup

    if not kernel:
        monkeypatch.setattr(dedup, "_hash_kernel", lambda: None)
    texts = [r["text"][:n] for r, n in zip(stdlib_records(300), itertools.cycle([90, 700, 3000]))]
    texts += ["", "  \n ", "...!?", "one", "one two three four", "one two three four five"]
    texts += ["Ünïcödé ﬁle ½ naïve café — straße", "x " * 40, "日本語 の テキスト です よ ね"]
    ann = create("minhash", {"shingle": 5, "num_perm": 64, "bands": 8, "seed": 3})
    sig, exact = ann.signatures(texts)
    expected = np.stack([_datasketch_signature(t, ann.params) for t in texts])
    assert sig.dtype == np.uint32 and (sig == expected).all()
    assert exact.tolist() == [dedup.exact_hash(t) for t in texts]
    one = [ann.signatures([t])[0][0] for t in texts[-9:]]  # a batch of one each
    assert (np.stack(one) == expected[-9:]).all()


def test_the_compiled_xxh32_is_xxhashs_at_every_length():
    import xxhash

    from shardcore.annotate import dedup

    data = "".join(r["text"] for r in stdlib_records(3)).encode("utf-8")[:5000]
    buf = np.frombuffer(data, dtype=np.uint8)
    starts = np.arange(0, 200, dtype=np.int64) * 7
    lengths = np.arange(0, 200, dtype=np.int64)  # 0 to 199 bytes: every tail case
    got = dedup._xxh32_ranges(buf, starts, lengths)
    assert dedup._hash_kernel() is not None
    assert got.tolist() == [
        xxhash.xxh32_intdigest(data[s : s + n])
        for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
    ]

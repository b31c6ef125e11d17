"""Topic clusters on real documents (pieces of CPython's stdlib packages, labelled by
package), through the annotation artifact: columns, the summary's top terms and snippets,
determinism and healing; the two encoders against their reference behaviour."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import pytest

from shardcore.annotate import create
from shardcore.annotate.artifact import annotate, read_annotation, read_summary
from shardcore.annotate.embed import get_encoder
from shardcore.errors import InputError
from shardcore.tokenize import tokenize
from tests.unit.annotate_corpus import stdlib_package_documents


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    docs = stdlib_package_documents(per_package=30)
    tmp = tmp_path_factory.mktemp("topics")
    src = tmp / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for _, t in docs))
    tok = tmp / "tok"
    tokenize([str(src)], str(tok), shard_size=150_000)
    return docs, tok


def test_static_encoder_matches_the_packages_own_encoder():
    from static_model import get_embeddings

    texts = [
        "The quick brown fox jumps over the lazy dog.",
        "Le chat dort sur la table de la cuisine.",
        "def f(x):\n    return x + 1\n" * 40,
        "",
    ]
    ours = get_encoder("static", 512).encode(texts)
    theirs = np.array(get_embeddings(texts[:3]))
    assert np.abs(ours[:3] - theirs).max() < 1e-5
    assert not ours[3].any()  # an empty text has no tokens: the zero vector


def test_minilm_places_a_paraphrase_nearer_than_an_unrelated_text():
    pytest.importorskip("torch")
    enc = get_encoder("minilm", 256)
    v = enc.encode(
        [
            "The parser reads the XML document and reports each element to a handler.",
            "Each element of the XML file is passed to a callback by the SAX reader.",
            "The asyncio event loop schedules coroutines and runs their callbacks.",
        ]
    )
    assert v.shape == (3, 384)
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.1


def test_minilm_static_is_distilled_once_and_read_from_the_cache(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from shardcore.annotate.embed import MiniLMStaticEncoder

    monkeypatch.setenv("SHARDYARD_CACHE", str(tmp_path / "cache"))
    built = MiniLMStaticEncoder(512)
    cached = list((tmp_path / "cache" / "annotate").glob("minilm-static-*.npy"))
    assert len(cached) == 1 and built.table.shape == (30522, 384)
    assert np.allclose(built.table.mean(0), 0, atol=1e-4)  # the vocabulary's mean removed
    again = MiniLMStaticEncoder(512)  # from the cache: the same table
    assert np.array_equal(again.table, built.table)
    v = again.encode(
        [
            "The parser reads the XML document and reports each element to a handler.",
            "Each element of the XML file is passed to a callback by the SAX reader.",
            "The asyncio event loop schedules coroutines and runs their callbacks.",
            "",
        ]
    )
    assert v[0] @ v[1] > v[0] @ v[2] and not v[3].any()


def test_topic_clusters_through_the_artifact(corpus, tmp_path):
    docs, tok = corpus
    k = 9
    m = annotate(tok, tmp_path / "t", "topics", {"k": k})
    assert len(m["shards"]) >= 2
    t = read_annotation(tmp_path / "t")
    cluster = np.asarray(t.column("cluster"))
    distance = np.asarray(t.column("distance"))
    assert len(cluster) == len(docs) and set(cluster) <= set(range(k))
    # distance: from a unit vector to a centroid inside the unit ball
    assert (distance >= 0).all() and (distance <= 2).all() and distance.std() > 0
    s = read_summary(tmp_path / "t")
    assert s["k"] == k and s["documents"] == len(docs) and s["encoder"] == "static"
    assert [c["cluster"] for c in s["clusters"]] == list(range(k))
    assert [c["size"] for c in s["clusters"]] == np.bincount(cluster, minlength=k).tolist()
    for c in s["clusters"]:
        members = np.flatnonzero(cluster == c["cluster"])
        if not len(members):
            continue
        assert 1 <= len(c["top_terms"]) <= 10
        ex = c["examples"]
        assert len(ex) == min(3, len(members))
        # the examples are the members nearest the centroid, nearest first, with their text
        nearest = members[np.lexsort((members, distance[members]))][: len(ex)]
        assert [e["doc_id"] for e in ex] == nearest.tolist()
        for e in ex:
            assert e["text"] == " ".join(docs[e["doc_id"]][1].split())[:240]
    # top terms come from the cluster's own words
    for c in s["clusters"]:
        text = " ".join(docs[i][1].lower() for i in np.flatnonzero(cluster == c["cluster"]))
        assert all(term in text for term in c["top_terms"])
    # the summary is a file of the manifest; nothing of the text beyond the snippets
    assert any(f["path"] == "summary.json" for f in m["files"])
    labels = [label for label, _ in docs]
    purity = sum(
        Counter(labels[i] for i in np.flatnonzero(cluster == c)).most_common(1)[0][1]
        for c in np.unique(cluster)
    ) / len(docs)
    print(f"static encoder, k={k}: purity against the stdlib package {purity:.3f}")


def test_a_rerun_and_a_healed_run_write_the_same_bytes(corpus, tmp_path):
    _, tok = corpus
    a = annotate(tok, tmp_path / "a", "topics", {"k": 5, "sample": 100})
    b = annotate(tok, tmp_path / "b", "topics", {"k": 5, "sample": 100})
    assert a["files"] == b["files"]
    # a run killed after the summary: the manifest and one shard's columns gone
    (tmp_path / "b" / "manifest.json").unlink()
    (tmp_path / "b" / b["files"][0]["path"]).unlink()
    (tmp_path / "b" / "summary.json").unlink()
    shutil.rmtree(tmp_path / "b" / "work", ignore_errors=True)
    c = annotate(tok, tmp_path / "b", "topics", {"k": 5, "sample": 100})
    assert c["files"] == a["files"]


def test_bad_parameters_are_refused_by_name():
    with pytest.raises(InputError, match="encoder 'glove' unknown"):
        create("topics", {"encoder": "glove"})
    with pytest.raises(InputError, match="sample .* must be at least k"):
        create("topics", {"k": 50, "sample": 10})

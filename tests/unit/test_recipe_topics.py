"""Topic clusters as the diversity recipe's family, on real text: CPython stdlib package
modules cut into documents, annotated with ``topics`` (the static encoder), a pool joining
the annotation, and the recipe's greedy ordering and a ``greedy_block`` mixture by ``topics.cluster``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardcore.annotate.artifact import annotate, read_annotation
from shardcore.cli import main
from shardcore.order import greedy, recipe
from shardcore.pool import PoolReader, build_pool
from shardcore.tokenize import tokenize
from tests.unit.annotate_corpus import stdlib_package_documents


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    docs = stdlib_package_documents(per_package=20)
    tmp = tmp_path_factory.mktemp("recipe-topics")
    src = tmp / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for _, t in docs))
    tokenize([str(src)], str(tmp / "tok"), shard_size=100_000)
    annotate(tmp / "tok", tmp / "topics", "topics", {"k": 8, "sample": 1_000})
    build_pool([str(tmp / "tok")], str(tmp / "pool"), seq_len=64, seed=1,
               annotations=[str(tmp / "topics")])  # fmt: skip
    cluster = np.asarray(read_annotation(tmp / "topics").column("cluster"))
    return {"docs": docs, "pool": tmp / "pool", "cluster": cluster}


def test_the_recipe_reads_the_cluster_column(world):
    reader = PoolReader(world["pool"])
    ch = recipe.pool_characteristics([reader], by=["topics.cluster"], length_bins_count=10)
    assert ch.families == ["topics.cluster", "length"]
    # the cluster of each pool document, from the annotation by its doc_id
    doc_cluster = world["cluster"][reader.documents.column("doc_id").to_numpy()]
    names = ch.names[0]
    assert sorted(int(n) for n in names) == sorted(set(doc_cluster.tolist()))
    assert len(names) >= 4  # several clusters occur
    for r in range(reader.num_records):
        seg = reader.boundaries(r)
        want: dict[str, float] = {}
        for d, n in zip(seg["doc"].tolist(), seg["length"].tolist(), strict=True):
            if d >= 0:
                key = str(int(doc_cluster[d]))
                want[key] = want.get(key, 0) + n
        got = {names[i]: float(v) for i, v in zip(ch.idx[r], ch.val[r], strict=True)
               if 0 <= i < len(names)}  # fmt: skip
        assert got == want, r
    # the greedy ordering on it: every record once, deterministic for a seed
    a = greedy.greedy_order(ch, seed=4)
    assert np.array_equal(np.sort(a), np.arange(ch.num_records))
    assert np.array_equal(a, greedy.greedy_order(ch, seed=4))


def test_the_greedy_order_by_cluster_is_below_every_random_order(world, capsys):
    assert main(["quality", str(world["pool"]), "--recipe", "--by", "topics.cluster",
                 "--length-bins", "10", "--batch-size", "32", "--trials", "8",
                 "--with-greedy", "--json"]) == 0  # fmt: skip
    rep = json.loads(capsys.readouterr().out)
    g = rep["greedy"]
    assert g["num_records"] == PoolReader(world["pool"]).num_records > 500
    assert set(g["families"]) == {"topics.cluster", "length"}
    for fam, d in g["families"].items():
        c = d["cumulative"]
        # the cumulative error at every inner checkpoint below every random permutation's
        assert c["below_all"], (fam, c)
        order, low = np.asarray(c["order"][:-1]), np.asarray(c["random_min"][:-1])
        assert (order < low).all(), fam


def test_a_greedy_block_mixture_ordered_by_cluster(world, tmp_path, capsys):
    from shardcore.mixture import MixtureSpec, build_mixture

    n = PoolReader(world["pool"]).num_records
    spec = MixtureSpec.from_dict(
        {
            "tokens": 65 * n, "seed": 2,
            "components": [{"pool": str(world["pool"]), "weight": 1}],
            "order": "greedy_block",
            "order_options": {"by": ["topics.cluster"], "length_bins": 10},
        }
    )  # fmt: skip
    build_mixture(spec, tmp_path / "mix")
    assert main(["quality", str(tmp_path / "mix"), "--recipe", "--by", "topics.cluster",
                 "--length-bins", "10", "--batch-size", "32", "--trials", "8",
                 "--json"]) == 0  # fmt: skip
    rep = json.loads(capsys.readouterr().out)["order"]
    assert "topics.cluster" in rep["families"]
    # whole batches (256 samples) of the greedy order shuffled: the cluster error stays
    # below the random orders' mean at every inner checkpoint
    c = rep["families"]["topics.cluster"]["cumulative"]
    assert (np.asarray(c["order"][:-1]) < np.asarray(c["random_mean"][:-1])).all(), c

"""Connected components over ranges of nodes (shardcore.annotate.components), against
scipy's over the whole graph: random graphs, stars, chains far longer than the planned
rounds (finished by the resolve unit), isolated nodes, any number of ranges and edge
producers, any run of nodes read back."""

from __future__ import annotations

import numpy as np
import pytest

from shardcore.annotate.components import ROUNDS, Components, file_split
from shardcore.annotate.dedup import _components


def reference(n: int, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    roots = _components(n, a, b)
    size = np.bincount(roots, minlength=n)[roots]
    order = np.lexsort((np.arange(n), roots))
    rank = np.empty(n, dtype=np.int64)
    sorted_roots = roots[order]
    start = np.r_[True, sorted_roots[1:] != sorted_roots[:-1]]
    rank[order] = np.arange(n) - np.maximum.accumulate(np.where(start, np.arange(n), 0))
    return roots, size, rank


def run(tmp_path, n: int, a: np.ndarray, b: np.ndarray, parts: int, sources: int) -> dict:
    comp = Components(tmp_path / "cc", n, parts, sources)
    stats = {"changed": [], "pending": 0}
    for s, idx in enumerate(np.array_split(np.arange(len(a)), sources)):
        both = np.stack([np.r_[a[idx], b[idx]], np.r_[b[idx], a[idx]]])
        file_split(comp.adjacency_file(s), both, comp.part(both[0]), parts)
    for r in range(1, ROUNDS + 1):
        stats["changed"].append(sum(comp.run_round(r, q)["changed"] for q in range(parts)))
    stats["pending"] = comp.run_resolve(ROUNDS)["pending"]
    clustered = sum(comp.run_count(ROUNDS, q)["clustered"] for q in range(parts))
    for lq in range(parts):
        comp.run_tally(lq)
    stats["clustered"] = clustered
    stats["comp"] = comp
    return stats


def graphs():
    rng = np.random.default_rng(5)
    n = 3000
    yield "random sparse", n, rng.integers(0, n, 1200), rng.integers(0, n, 1200)
    # stars: each member joined to its star's first member, as band runs are
    first = rng.integers(0, n, 300)
    members = rng.integers(0, n, 1500)
    yield "stars", n, members, first[rng.integers(0, 300, 1500)]
    # chains far longer than ROUNDS, their nodes shuffled over every range
    perm = rng.permutation(n)
    chain = perm[: 40 * ROUNDS]
    yield "long chain", n, chain[1:], chain[:-1]
    yield "no edges", 50, np.empty(0, np.int64), np.empty(0, np.int64)


@pytest.mark.parametrize("parts,sources", [(1, 1), (3, 2), (7, 5)])
@pytest.mark.parametrize(
    "name,n,a,b", list(graphs()), ids=lambda x: x if isinstance(x, str) else ""
)
def test_components_equal_scipys_over_the_whole_graph(tmp_path, parts, sources, name, n, a, b):
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    keep = a != b
    a, b = a[keep], b[keep]
    got = run(tmp_path, n, a, b, parts, sources)
    roots, size, rank = reference(n, a, b)
    comp = got["comp"]
    cluster, sz, rk = comp.cluster_columns(0, n)
    assert (cluster == roots).all() and (sz == size).all() and (rk == rank).all()
    # any run of nodes reads back the same, reading only its ranges
    for lo, hi in ((0, 1), (n // 3, n // 3 + 17), (n - 5, n), (n // 2, n // 2)):
        c, s, r = comp.cluster_columns(lo, hi)
        assert (c == roots[lo:hi]).all() and (s == size[lo:hi]).all() and (r == rank[lo:hi]).all()
    assert got["clustered"] == int((size > 1).sum())
    if name == "long chain":
        assert got["pending"] > 0  # the rounds did not finish it: the resolve unit did


def test_a_rerun_round_writes_the_same_files(tmp_path):
    rng = np.random.default_rng(2)
    n, a, b = 500, rng.integers(0, 500, 300), rng.integers(0, 500, 300)
    got = run(tmp_path, n, a, b, 3, 2)
    comp = got["comp"]
    files = sorted((tmp_path / "cc").rglob("*.npy"))
    before = {p: p.read_bytes() for p in files}
    for r in range(1, ROUNDS + 1):  # a killed run's units run again from their inputs
        for q in range(3):
            comp.run_round(r, q)
    comp.run_resolve(ROUNDS)
    for q in range(3):
        comp.run_count(ROUNDS, q)
        comp.run_tally(q)
    assert {p: p.read_bytes() for p in sorted((tmp_path / "cc").rglob("*.npy"))} == before


def test_a_run_of_exact_copies_is_joined_as_a_tree_of_bounded_degree():
    """10,000 exact copies (one exact-hash run) and their band rows: one cluster, as the
    run's star would make it, but no copy with more than EXACT_FAN_IN + 1 edges; the bands'
    pairs of exact copies are left out."""
    from shardcore.annotate import buckets

    n, bands = 10_000, 4
    params = {"bands": bands, "num_perm": 8, "threshold": 0.75}
    docs = np.random.default_rng(1).permutation(n).astype(np.uint64)
    rows = np.empty(n * (bands + 1), buckets.ROW)
    rows["band"] = np.repeat(np.arange(bands + 1, dtype=np.uint64), n)
    rows["key"] = 77  # every band's key the same: one run a band
    rows["doc"] = np.tile(docs, bands + 1)
    sigs = [np.zeros((n, 8), dtype=np.uint32)]
    exacts = [np.full(n, 5, dtype=np.uint64)]
    starts = np.array([0, n])
    a, b = buckets.verified_edges(rows, sigs, starts, params, exacts)
    assert len(a) == n - 1  # the exact band's tree only
    degree = np.bincount(np.r_[a, b], minlength=n)
    assert degree.max() <= buckets.EXACT_FAN_IN + 1
    roots = _components(n, a, b)
    assert (roots == 0).all()

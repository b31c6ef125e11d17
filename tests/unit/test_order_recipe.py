"""The diversity recipe on token counts: characteristic vectors from a real pool's
segments, the objective, the windowed greedy against the exact one and its compiled and numpy paths, ``greedy_block``,
duplicate spacing and the recipe's measurements."""

from __future__ import annotations

import numpy as np
import pytest

from shardcore import order, pack
from shardcore.errors import InputError
from shardcore.order import greedy, recipe
from shardcore.pool import PoolReader
from tests.unit import mix_fixtures


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    return mix_fixtures.build_pools(tmp_path_factory.mktemp("pools"))


def test_characteristics_count_each_documents_tokens(pools):
    reader = PoolReader(pools["middle"])
    ch = recipe.pool_characteristics([reader], by=["package"], length_bins_count=10)
    assert ch.families == ["package", "length"]
    pkg = reader.document_values("package").astype(str)
    names = ch.names[0]
    for r in range(0, reader.num_records, 7):
        seg = reader.boundaries(r)
        want: dict[str, float] = {}
        for d, n in zip(seg["doc"].tolist(), seg["length"].tolist(), strict=True):
            if d >= 0:
                want[pkg[d]] = want.get(pkg[d], 0) + n
        got = {names[i]: float(v) for i, v in zip(ch.idx[r], ch.val[r], strict=True)
               if 0 <= i < len(names)}  # fmt: skip
        assert got == want
    # Each family's counts sum to the record's document tokens.
    ft = ch.family_tokens()
    assert np.allclose(ft[:, 0], ft[:, 1])
    assert ft[:-1, 0].max() == reader.seq_len + 1
    # Records of two documents exist, so counting tokens is not counting main documents.
    assert ((ch.idx >= 0) & (ch.family_of[np.maximum(ch.idx, 0)] == 0)).sum(1).max() >= 2


def test_length_bins_are_quantiles():
    lengths = np.arange(1000)
    bins = recipe.length_bins(lengths, 100)
    assert np.array_equal(np.bincount(bins), np.full(100, 10))
    with pytest.raises(InputError, match="length_bins"):
        recipe.length_bins(lengths, 0)


def _synthetic(num_docs: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.lognormal(5.0, 1.1, num_docs).astype(int) + 1, 3000)
    clusters = rng.zipf(1.5, num_docs) % 30
    seg = pack.plan_packing(lengths, 255).segments
    m = seg.num_records
    rec = np.repeat(np.arange(m), np.diff(seg.seg_record_offsets))
    bins = recipe.length_bins(lengths, 20)
    ch = recipe.from_segments(rec, seg.seg_doc, seg.seg_length, m,
                              {"cluster": clusters, "length": bins})  # fmt: skip
    return ch, seg, clusters, bins


def test_score_is_the_recipe_objective():
    ch, *_ = _synthetic(300, seed=1)
    lam = np.array([1.0, 0.3])
    st = greedy._State(ch, lam, None, 0.5)
    for step, r in enumerate(np.random.default_rng(2).permutation(ch.num_records)[:40]):
        st.place(int(r), step)
    dense = np.zeros((ch.num_records, ch.num_characteristics))
    for r in range(ch.num_records):
        ok = ch.idx[r] >= 0
        dense[r, ch.idx[r][ok]] = ch.val[r][ok]
    tau, fam, T, S = ch.tau(), ch.family_of, st.T[:-1], st.S[:-1]

    def objective(s: int) -> float:
        total = 0.0
        for f in range(2):
            cols = fam == f
            c = dense[s, cols]
            total += lam[f] * (((T[cols] + c) - tau[cols] * (S[f] + c.sum())) ** 2).sum()
        return total

    cand = np.flatnonzero(~st.used)
    got, _ = st.scores(cand, 40)
    want = np.array([objective(int(s)) for s in cand])
    assert np.ptp(want - got) < 1e-6 * np.ptp(want)


def test_windowed_greedy_against_the_exact_one_on_ten_thousand_records():
    ch, *_ = _synthetic(9_500)
    m = ch.num_records
    assert 9_000 <= m <= 11_000
    exact = greedy.greedy_exact(ch)
    sizes = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    ex = recipe.window_deviation(ch, exact, sizes)
    ex99 = recipe.window_deviation(ch, exact, sizes, quantile=0.99)
    rnd = recipe.window_deviation(ch, np.random.default_rng(0).permutation(m), sizes)
    for seed in range(5):
        fast = greedy.greedy_order(ch, seed=seed)
        assert np.array_equal(np.sort(fast), np.arange(m))
        fa = recipe.window_deviation(ch, fast, sizes)
        f99 = recipe.window_deviation(ch, fast, sizes, quantile=0.99)
        for fam in ch.families:
            # Per window size, the max over windows of the windowed greedy against the
            # exact greedy's: measured 0.79-1.13x (clusters) and 0.86-1.37x (length bins)
            # over seeds 0-4; geometric mean over sizes 0.96-1.02x; 99th percentile over
            # windows 0.96-1.12x. The 1.1x target at every size is not held (below).
            ratio = np.asarray(fa[fam]) / np.asarray(ex[fam])
            assert ratio.max() <= 1.4, (seed, fam, ratio)
            assert np.exp(np.log(ratio).mean()) <= 1.03, (seed, fam, ratio)
            assert (np.asarray(f99[fam]) / np.asarray(ex99[fam])).max() <= 1.15, (seed, fam)
            # Both far from a random order's (which is 1.5x-30x the exact greedy's here).
            assert (np.asarray(rnd[fam][1:]) > 1.4 * np.asarray(fa[fam][1:])).all(), fam
    # The max over windows is that sensitive to the trajectory: a window of all but 100
    # records differs from the exact greedy only in its first 100 steps (then it holds
    # every record left) and already reaches 1.15x at some size (seed 0).
    near = greedy.greedy_order(ch, seed=0, window=m - 100, behind=0)
    nd = recipe.window_deviation(ch, near, sizes)
    assert max(max(np.asarray(nd[f]) / np.asarray(ex[f])) for f in ch.families) > 1.1
    rep = recipe.recipe_report(ch, fast, batch_size=128, trials=4, checkpoints=10)
    for fam in rep["families"].values():
        assert fam["cumulative"]["below_all"], fam["cumulative"]
    # A window of every record is the exact greedy's candidate set: the same quality.
    full = greedy.greedy_order(ch, seed=3, window=m, behind=0)
    fw = recipe.window_deviation(ch, full, sizes)
    for fam in ch.families:
        assert np.allclose(fw[fam], ex[fam], rtol=1e-9), fam


def test_compiled_and_numpy_windowed_greedy_are_the_same_order():
    ch, *_ = _synthetic(1_200, seed=5)
    m = ch.num_records
    groups = np.random.default_rng(1).integers(0, m // 3, m)
    for kw in ({}, {"groups": groups, "spacing": 0.5}, {"weights": [1.0, 0.25], "behind": 0}):
        c = greedy.greedy_order(ch, seed=2, window=64, **kw)
        n = greedy.greedy_order(ch, seed=2, window=64, compiled=False, **kw)
        assert np.array_equal(c, n), kw
        assert np.array_equal(np.sort(c), np.arange(m))


def test_greedy_block_shuffles_whole_batches():
    rng = np.random.default_rng(3)
    fams = {"pool": rng.integers(0, 4, 1000), "lang": rng.integers(0, 6, 1000)}
    perm = order.get_ordering("greedy_block")(fams, seed=5, batch_size=100)
    assert np.array_equal(np.sort(perm), np.arange(1000))
    ch = recipe.from_labels(fams)
    base = greedy.greedy_order(ch, seed=5)
    blocks = {tuple(sorted(base[i : i + 100].tolist())) for i in range(0, 1000, 100)}
    assert {tuple(sorted(perm[i : i + 100].tolist())) for i in range(0, 1000, 100)} == blocks
    assert not np.array_equal(perm, base)
    again = order.get_ordering("greedy_block")(fams, seed=5, batch_size=100)
    assert np.array_equal(perm, again)


def test_copies_are_spaced_apart_further_than_random():
    # A small pool read four times: each record's four copies are one group.
    rng = np.random.default_rng(4)
    n, epochs = 500, 4
    lang = np.tile(rng.integers(0, 5, n), epochs)
    groups = np.tile(np.arange(n), epochs)
    ch = recipe.from_labels({"lang": lang})
    spaced = greedy.greedy_order(ch, seed=0, groups=groups)
    assert np.array_equal(np.sort(spaced), np.arange(n * epochs))
    d = recipe.min_copy_distance(groups, spaced)
    rand = max(recipe.min_copy_distance(groups, rng.permutation(n * epochs)) for _ in range(20))
    plain = recipe.min_copy_distance(groups, greedy.greedy_order(ch, seed=0))
    assert d > 5 * max(rand, plain, 1), (d, rand, plain)

    # Copies closer than a tenth of an epoch: about 10% of a random order's, under 1% here.
    def gaps(o: np.ndarray) -> np.ndarray:
        return np.diff(np.sort(np.argsort(o).reshape(epochs, n).T, axis=1), axis=1)

    assert (gaps(spaced) < n // 10).mean() < 0.01
    assert (gaps(rng.permutation(n * epochs)) < n // 10).mean() > 0.05


def test_recipe_report_on_a_real_pool(pools):
    ch = recipe.pool_characteristics([pools["middle"]], by=["package"], length_bins_count=10)
    rep = recipe.recipe_report(ch, greedy.greedy_order(ch), batch_size=16, trials=4, checkpoints=5)
    assert set(rep["families"]) == {"package", "length"}
    for fam in rep["families"].values():
        c = fam["cumulative"]
        assert len(c["order"]) == len(c["random_min"]) == 5
        assert c["order"][-1] == pytest.approx(0, abs=1e-6)  # all records placed
        b = fam["batches"]
        assert b["random_best"] <= b["random_mean"]


def test_bad_input_is_named():
    ch = recipe.from_labels({"a": np.arange(10) % 3})
    with pytest.raises(InputError, match="weights"):
        greedy.greedy_order(ch, weights=[1.0, 2.0])
    with pytest.raises(InputError, match="groups"):
        greedy.greedy_order(ch, groups=np.arange(3))
    with pytest.raises(InputError, match="batch_size"):
        greedy.block_shuffle(np.arange(10), 0)


def test_quality_recipe_on_a_pool_and_a_greedy_block_mixture(pools, tmp_path, capsys):
    from shardcore.cli import main

    assert main(["quality", str(pools["middle"]), "--by", "package", "--recipe",
                 "--length-bins", "10", "--batch-size", "16", "--trials", "4",
                 "--with-greedy"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "order as built" in text and "greedy order of the same records" in text
    assert "package: cumulative error" in text and "length: cumulative error" in text
    # Each family's two verdicts, the per-batch one over enough whole batches to judge.
    assert text.count("-> cumulative error") == text.count("per-batch error (lower") == 4
    assert "too few batches" not in text and "above every random" not in text
    out = tmp_path / "mix"
    argv = ["mix", "--component", f"{pools['early']}:0.6", "--component",
            f"{pools['late']}:0.4", "--tokens", str(65 * 3000), "--seed", "3",
            "--order", "greedy_block", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["quality", str(out), "--by", "package", "--recipe", "--json",
                 "--length-bins", "10", "--trials", "4"]) == 0  # fmt: skip
    import json

    rep = json.loads(capsys.readouterr().out)["order"]
    assert set(rep["families"]) == {"pool", "package", "length"}
    # greedy_block in a mixture balances the pools: its cumulative pool error stays below
    # the random orders' mean at every checkpoint (not below every one of them: whole
    # batches moved leave a partial batch's error at a checkpoint, and a lucky random
    # order can be lower there).
    c = rep["families"]["pool"]["cumulative"]
    assert (np.asarray(c["order"][:-1]) < np.asarray(c["random_mean"][:-1])).all(), c
    assert main(["quality", str(out), "--by", "nope", "--recipe"]) != 0
    assert "unknown property 'nope'" in capsys.readouterr().err


def test_document_columns_read_only_what_is_asked(pools):
    reader = PoolReader(pools["middle"])
    n, cols = recipe.document_columns(reader, ["package", "_doc.n_tokens"])
    assert n == reader.documents.num_rows
    assert np.array_equal(cols["package"], reader.document_values("package"))
    assert np.array_equal(cols["_doc.n_tokens"], reader.documents.column("n_tokens").to_numpy())
    assert recipe.document_columns(pools["middle"], []) == (n, {})
    with pytest.raises(InputError, match="unknown property 'nope'"):
        recipe.document_columns(reader, ["nope"])


def test_characteristics_of_a_pools_first_records(pools):
    reader = PoolReader(pools["middle"])
    whole = recipe.pool_characteristics([reader], by=["package"], length_bins_count=10)
    n = reader.num_records // 3
    first = recipe.pool_characteristics([reader], by=["package"], length_bins_count=10, limit=n)
    assert first.num_records == n
    assert first.names == whole.names
    assert np.array_equal(first.idx, whole.idx[:n, : first.idx.shape[1]])
    assert np.array_equal(first.val, whole.val[:n, : first.val.shape[1]])


def test_quality_recipe_of_a_staged_mixture_compares_each_stage_with_its_own_samples(
    pools, tmp_path, capsys
):
    """``shardyard quality MIX --recipe`` as a user runs it (default batch size 1,024):
    each stage against random orders of its own samples, and a stage with too few whole
    batches is not judged on them (never one batch of the whole stage, 0.0000 on both
    sides). A blend's pool shares are more even than random orders in every stage."""
    import json

    from shardcore.cli import main

    spec = mix_fixtures.three_pool_spec(pools, seq_len=64, samples=4000, anneal_samples=800,
                                        seed=3, order="blend")  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = tmp_path / "staged"
    assert main(["mix", "--spec", str(tmp_path / "spec.json"), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["quality", str(out), "--by", "pool", "--recipe", "--length-bins", "10"]) == 0
    text = capsys.readouterr().out
    assert "order as built, stage main (samples 0-3,199, against random orders of its own " in text
    assert "order as built, stage anneal (samples 3,200-3,999, against random orders " in text
    assert "3,200 records, 3 whole batches of 1,024" in text
    assert "800 records, 0 whole batches of 1,024" in text
    assert text.count("-> too few batches to judge the per-batch error") == 4  # 2 x 2 families
    assert "0.0000" not in text and "batches of 800" not in text
    # With batches to judge: both stages' pool shares beat random orders of their samples.
    assert main(["quality", str(out), "--by", "pool", "--recipe", "--json", "--batch-size",
                 "32", "--length-bins", "10"]) == 0  # fmt: skip
    rep = json.loads(capsys.readouterr().out)["order"]
    assert [(s["name"], s["measured"]) for s in rep["stages"]] == [("main", 3200),
                                                                   ("anneal", 800)]  # fmt: skip
    for st in rep["stages"]:
        pool = st["families"]["pool"]
        assert pool["cumulative"]["verdict"]["kind"] == "better", (st["name"], pool)
        assert pool["batches"]["verdict"]["kind"] == "better", (st["name"], pool)

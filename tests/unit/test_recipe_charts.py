"""The recipe's page view (``webapp.dashboard.charts.recipe``): a recorded report's numbers
become the table rows and both figures unchanged."""

import numpy as np

from shardcore.order import greedy, recipe
from webapp.dashboard.charts import recipe as recipe_charts


def test_recipe_view_shows_the_report_numbers():
    rng = np.random.default_rng(0)
    ch = recipe.from_labels({"lang": rng.integers(0, 5, 2000), "pool": rng.integers(0, 3, 2000)})
    rep = recipe.recipe_report(ch, greedy.greedy_order(ch), batch_size=64, trials=3, checkpoints=8)
    view = recipe_charts.recipe_view(rep)
    assert [f["name"] for f in view["families"]] == ["lang", "pool"]
    assert view["records"] == 2000 and view["batch_size"] == 64 and view["trials"] == 3
    for f in view["families"]:
        fam = rep["families"][f["name"]]
        assert len(f["rows"]) == 7  # the last checkpoint (every record) is left out
        assert [r["order"] for r in f["rows"]] == fam["cumulative"]["order"][:-1]
        assert (
            f["rows"][0]["ratio"]
            == fam["cumulative"]["order"][0] / fam["cumulative"]["random_min"][0]
        )
        lines = {t["name"]: t for t in f["cumulative_figure"]["data"]}
        assert lines["this order"]["x"] == rep["position"]
        assert lines["random, lowest of 3"]["y"] == [
            round(v, 3) for v in fam["cumulative"]["random_min"]
        ]
        bars = {t["name"]: t for t in f["batch_figure"]["data"]}
        assert sum(bars["this order"]["y"]) == 2000 // 64
        # one random order's batches on average (rounded to 3 decimals per bar)
        assert abs(sum(bars["random (one order, mean)"]["y"]) - 2000 // 64) < 0.02
        shapes = [s["x0"] for s in f["batch_figure"]["layout"]["shapes"]]
        assert shapes == [fam["batches"]["order_worst"], fam["batches"]["random_best"]]
    assert recipe_charts.recipe_view(None) == {"missing": True}
    assert recipe_charts.recipe_view({"error": "no recipe measurement: x"})["error"].endswith("x")


def test_recipe_card_judges_like_with_like_and_says_when_batches_are_too_few():
    """A staged report shows each stage with its verdicts; a stage with too few whole
    batches says so instead of drawing a one-batch "distribution"; a record from before
    like was compared with like is not shown."""
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 4, 3000)
    ch = recipe.from_labels({"pool": labels})
    main = recipe.recipe_report(ch, rng.permutation(3000), batch_size=64, trials=4)
    short = recipe.recipe_report(ch.take(np.arange(300)), np.arange(300), batch_size=64, trials=4)
    staged = {**main, "stages": [
        {"name": "main", "first_sample": 0, "num_samples": 3000, "measured": 3000, **main},
        {"name": "anneal", "first_sample": 3000, "num_samples": 300, "measured": 300, **short},
    ]}  # fmt: skip
    card = recipe_charts.recipe_card(staged, unit="samples", stages=2)
    assert card["staged"] and [s["name"] for s in card["stages"]] == ["main", "anneal"]
    assert (card["stages"][1]["first"], card["stages"][1]["last"]) == (3000, 3299)
    first, second = card["stages"][0]["families"][0], card["stages"][1]["families"][0]
    assert (first["key"], second["key"]) == ("0-pool", "1-pool")
    # A random order is like a random order, over 46 batches of 64.
    assert first["verdict"]["kind"] == "random" and first["ok"], first["verdict"]
    assert first["batch_verdict"]["kind"] == "random" and first["batch_figure"]
    assert second["batch_verdict"] == {
        "kind": "unjudged", "ok": True,
        "text": "too few batches to judge the per-batch error: 4 whole batches of 64, and a "
                "distribution needs at least 8",
    }  # fmt: skip
    assert second["batch_figure"] is None
    # Measured before: a staged version's record without stages, or one with no baseline.
    assert recipe_charts.recipe_card(main, unit="samples", stages=2) == {"outdated": True}
    old = {k: v for k, v in main.items() if k != "baseline"}
    assert recipe_charts.recipe_card(old) == {"outdated": True}
    assert recipe_charts.recipe_card(None) == {"missing": True}


def test_recipe_verdicts_warn_only_beyond_what_random_orders_reach():
    """A sorted order is less even than random orders on both measures; the verdicts say
    so, with the ratio to the random orders' mean."""
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 4, 4000)
    ch = recipe.from_labels({"c": labels})
    rep = recipe.recipe_report(ch, np.argsort(labels, kind="stable"), batch_size=64, trials=4)
    cum, b = rep["families"]["c"]["cumulative"], rep["families"]["c"]["batches"]
    assert cum["verdict"]["kind"] == "worse" and not cum["verdict"]["ok"]
    assert cum["verdict"]["text"].startswith("cumulative error above every random order's")
    assert b["verdict"]["kind"] == "worse" and not b["verdict"]["ok"]
    greedy_rep = recipe.recipe_report(ch, greedy.greedy_order(ch), batch_size=64, trials=4)
    assert greedy_rep["families"]["c"]["cumulative"]["verdict"]["kind"] == "better"

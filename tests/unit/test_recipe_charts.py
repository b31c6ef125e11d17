"""The recipe's page view (``webapp.dashboard.recipe_charts``): a recorded report's numbers
become the table rows and both figures unchanged."""

import numpy as np

from shardcore.order import greedy, recipe
from webapp.dashboard import recipe_charts


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

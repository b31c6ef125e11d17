"""The chart functions: figures as data, checked by their numbers, without a database."""

import json

import pytest

from webapp.dashboard import charts


def test_it_computes_shares_per_property_for_each_measure_one_chart_per_property():
    figs = dict(
        charts.composition_by_property(
            {
                "language": {
                    "en": {"documents": 3, "bytes": 900, "tokens": 200},
                    "de": {"documents": 1, "bytes": 100, "tokens": 50},
                },
                "license": {"cc-by": {"documents": 4, "bytes": 1000, "tokens": 250}},
            }
        )
    )
    assert list(figs) == ["language", "license"]
    by_name = {t["name"]: t for t in figs["language"]["data"]}
    assert by_name["documents"]["x"] == ["en", "de"]
    assert by_name["documents"]["y"] == [0.75, 0.25]
    assert by_name["bytes"]["y"] == [0.9, 0.1]
    assert by_name["tokens"]["customdata"] == [200, 50]
    assert figs["language"]["layout"]["xaxis"]["title"]["text"] == "language"
    assert {t["name"]: t["x"] for t in figs["license"]["data"]}["documents"] == ["cc-by"]
    json.dumps(figs)


def test_it_shows_the_largest_values_of_a_property_and_groups_the_rest():
    # 233 file paths, as the demo's "path" property has: the top 12 by documents, then
    # one bar for the other 221, so that no axis holds hundreds of labels.
    paths = {f"Lib/m{i:03}.py": {"documents": 1000 - i, "bytes": 10, "tokens": 5}
             for i in range(233)}  # fmt: skip
    fig = charts.composition_bars(paths, prop="path")
    docs = next(t for t in fig["data"] if t["name"] == "documents")
    assert docs["x"] == [f"Lib/m{i:03}.py" for i in range(12)] + ["other (221 values)"]
    assert docs["customdata"][-1] == sum(1000 - i for i in range(12, 233))
    assert sum(docs["y"]) == pytest.approx(1.0)


def test_shares_are_of_every_value_when_the_stats_list_only_the_most_common():
    # A source's stats keep 30 of 233 paths (one document each) and sum the other 203:
    # each path is 1/233 of the documents, not 1/30.
    listed = {f"Lib/m{i:03}.py": {"documents": 1, "bytes": 10, "tokens": 5} for i in range(30)}
    rest = {"values": 203, "documents": 203, "bytes": 2030, "tokens": 1015}
    fig = charts.composition_bars(listed, prop="path", rest=rest)
    docs = next(t for t in fig["data"] if t["name"] == "documents")
    assert docs["x"][-1] == "other (221 values)"  # 18 listed beyond the top 12, and 203
    assert docs["y"][:12] == [pytest.approx(1 / 233)] * 12
    assert docs["customdata"][-1] == 221 and docs["y"][-1] == pytest.approx(221 / 233)
    assert sum(docs["y"]) == pytest.approx(1.0)
    figs = dict(charts.composition_by_property({"path": listed}, others={"path": rest}))
    assert figs["path"] == fig


def test_it_draws_an_empty_composition_with_a_message():
    fig = charts.composition_bars({}, prop="lang")
    assert fig["data"] == []
    assert fig["layout"]["annotations"][0]["text"] == "no values of lang recorded"


def test_it_places_length_bins_at_geometric_centres_on_a_log_axis():
    fig = charts.length_histogram([1, 100, 10000], [5, 2])
    bar = fig["data"][0]
    assert bar["x"] == [10.0, 1000.0]
    assert bar["y"] == [5, 2]
    assert bar["width"] == [99, 9900]
    assert fig["layout"]["xaxis"]["type"] == "log"


def test_it_refuses_histogram_edges_that_do_not_fit_the_counts():
    with pytest.raises(ValueError, match="3 edges for 3 counts"):
        charts.length_histogram([0, 1, 2], [1, 2, 3])


def test_it_draws_window_deviation_log_log_with_the_ideal_bound():
    curve = {
        "window_sizes": [16, 256, 4096],
        "deviations": {"language": [0.5, 0.2, 0.05], "source": [0.4, 0.1, 0.02]},
        "ideal": [0.25, 0.0625, 0.015625],
    }
    fig = charts.window_deviation(curve)
    names = [t["name"] for t in fig["data"]]
    assert names == ["language", "source", "i.i.d. bound (sample level)"]
    assert fig["data"][2]["y"] == [0.25, 0.0625, 0.015625]
    assert fig["data"][2]["line"]["dash"] == "dash"
    assert fig["layout"]["xaxis"]["type"] == fig["layout"]["yaxis"]["type"] == "log"


def test_it_builds_a_composition_heat_map_row_per_category():
    fig = charts.position_heatmap([0.25, 0.75], ["code", "web"], [[0.3, 0.4], [0.7, 0.6]])
    hm = fig["data"][0]
    assert hm["type"] == "heatmap"
    assert hm["y"] == ["code", "web"]
    assert hm["z"] == [[0.3, 0.4], [0.7, 0.6]]


def test_it_refuses_a_heat_map_with_ragged_rows():
    with pytest.raises(ValueError, match="1 shares for 2 positions"):
        charts.position_heatmap([0.25, 0.75], ["code"], [[0.3]])


def test_it_puts_each_shuffle_in_its_own_panel_side_by_side():
    curve = {"window_sizes": [8, 64], "deviations": {"language": [0.3, 0.1]}, "ideal": [0.2, 0.07]}
    fig = charts.shuffle_comparison({"exact": curve, "grid": curve, "buffer": curve})
    lay = fig["layout"]
    assert lay["xaxis"]["domain"][0] == 0
    assert lay["xaxis3"]["domain"][1] == pytest.approx(1.0)
    assert lay["xaxis"]["domain"][1] < lay["xaxis2"]["domain"][0]
    assert lay["yaxis2"]["matches"] == "y"
    axes = {(t.get("xaxis"), t.get("yaxis")) for t in fig["data"]}
    assert axes == {("x", "y"), ("x2", "y2"), ("x3", "y3")}
    assert [a["text"] for a in lay["annotations"]] == [
        "<b>exact</b>",
        "<b>grid</b>",
        "<b>buffer</b>",
    ]
    # One legend entry per characteristic, not one per panel.
    assert sum(t["showlegend"] for t in fig["data"]) == 2


def test_it_marks_pools_repeated_beyond_the_warning_in_red():
    fig = charts.predicted_epochs(
        [
            {"pool": "web", "tokens": 9_000_000, "epochs": 0.9},
            {"pool": "wiki", "tokens": 1_000_000, "epochs": 6.5},
        ],
        warn_epochs=4,
    )
    bars, marks = fig["data"]
    assert bars["y"] == [9_000_000, 1_000_000]
    assert marks["y"] == [0.9, 6.5]
    assert marks["marker"]["color"][0] != charts.TAINT
    assert marks["marker"]["color"][1] == charts.TAINT
    assert fig["layout"]["shapes"][0]["y0"] == 4


def test_it_plots_progress_by_step_with_stage_starts_and_the_budget_line():
    fig = charts.progress_by_step(
        [
            {"at": "2025-01-01T00:00:00+00:00", "tokens": 0, "step": 0},
            {"at": "2025-01-01T01:00:00+00:00", "tokens": 4096, "step": 2},
        ],
        stages=[
            {"label": "anneal", "tokens": 2048, "step": 1},
            {"label": "cooldown", "tokens": 6144, "step": None},
        ],
        total_tokens=8192,
    )
    assert fig["data"][0]["x"] == [0, 2]
    assert fig["data"][0]["y"] == [0, 4096]
    assert fig["layout"]["xaxis"]["title"]["text"] == "training step"
    shapes = fig["layout"]["shapes"]
    assert shapes[0]["y0"] == 8192
    assert [s["x0"] for s in shapes if s.get("yref") == "paper"] == [1]
    assert [a["text"] for a in fig["layout"]["annotations"]] == [
        "budget: 8,192 tokens",  # the dashed line says what it is
        "anneal from step 1",
        "cooldown from 6,144 tokens (not reached)",
    ]


def test_it_lays_lineage_out_in_columns_and_highlights_taint():
    nodes = [
        {"id": "run:1", "kind": "run", "label": "run 1", "tainted": True},
        {"id": "mv:1", "kind": "mixture_version", "label": "mix v1", "tainted": True},
        {"id": "pool:1", "kind": "pool", "label": "web pool", "tainted": True},
        {"id": "pool:2", "kind": "pool", "label": "wiki pool"},
        {"id": "src:1", "kind": "source", "label": "crawl", "tainted": True},
        {"id": "src:2", "kind": "source", "label": "wikipedia"},
    ]
    edges = [
        ("run:1", "mv:1"),
        ("mv:1", "pool:1"),
        ("mv:1", "pool:2"),
        ("pool:1", "src:1"),
        ("pool:2", "src:2"),
    ]
    pos = charts.lineage_layout(nodes, edges)
    assert pos["run:1"][0] == 0 and pos["mv:1"][0] == 1 and pos["pool:2"][0] == 2
    assert pos["src:2"][0] == 3  # no tokenized-source column in this graph
    assert pos["pool:1"][1] > pos["pool:2"][1]
    fig = charts.lineage_graph(nodes, edges)
    tainted = next(t for t in fig["data"] if t.get("name") == "tainted")
    clean = next(t for t in fig["data"] if t.get("name") == "clean")
    assert set(tainted["text"]) == {"run 1", "mix v1", "web pool", "crawl"}
    assert set(clean["text"]) == {"wiki pool", "wikipedia"}
    red_edges = [
        t for t in fig["data"] if t["mode"] == "lines" and t["line"]["color"] == charts.TAINT
    ]
    # run->mv, mv->pool:1, mv->pool:2 (touches a tainted node), pool:1->src:1: 4 segments.
    assert red_edges[0]["x"].count(None) == 4
    assert fig["layout"]["xaxis"]["ticktext"] == ["run", "mixture version", "pool", "source"]
    assert fig["layout"]["xaxis"]["range"] == [-0.5, 3.5]  # room for the edge columns' labels
    json.dumps(fig)


def test_it_shortens_lineage_labels_to_their_column_and_grows_with_the_longest_column():
    nodes = [{"id": "run:1", "kind": "run", "label": "a run with a very long name indeed"}]
    nodes += [{"id": f"pool:{i}", "kind": "pool", "label": f"pool {i}"} for i in range(20)]
    edges = [("run:1", f"pool:{i}") for i in range(20)]
    fig = charts.lineage_graph(nodes, edges)
    trace = next(t for t in fig["data"] if t.get("name") == "clean")
    run = trace["hovertext"].index("a run with a very long name indeed")
    chars = int((charts.LINEAGE_PLOT_PX / 2 - 12) / charts.LINEAGE_CHAR_PX)
    assert trace["text"][run] == "a run with a very long name indeed"[: chars - 1] + "…"
    assert trace["text"][1:] == [f"pool {i}" for i in range(20)]  # short ones stay whole
    # 20 nodes in one column: a row of LINEAGE_ROW_PX each, beyond the minimum height.
    assert fig["layout"]["height"] == 110 + charts.LINEAGE_ROW_PX * 21 > charts.LINEAGE_MIN_HEIGHT


# --- what a newcomer read wrong on the pages (the journey: test_journey_fixes) -----------


def test_it_gives_each_pool_of_a_page_its_own_colour():
    # Two names that crc32 sends to the same palette entry.
    names = [f"demo-{i}" for i in range(50)]
    a, b = next((a, b) for a in names for b in names if a < b and charts.colour_of(a) == charts.colour_of(b))  # fmt: skip
    pools = ["demo-code", a, b, "demo-reference"]
    assert charts.colour_of(a) == charts.colour_of(b)
    colours = charts.colours_of(pools)
    assert len(set(colours.values())) == 4
    assert colours == charts.colours_of(list(reversed(pools)))  # the same set, the same colours
    fig = charts.schedule_composition(
        [{"name": "main", "first_token": 0, "num_tokens": 1000, "samples_per_pool": [1, 2, 3, 4]}],
        pools,
    )
    assert len({t["marker"]["color"] for t in fig["data"]}) == 4
    curve = {"window_sizes": [2, 4], "deviations": {p: [0.1, 0.05] for p in pools}}
    lines = [t["line"]["color"] for t in charts.window_deviation(curve)["data"]]
    assert sorted(lines) == sorted(colours.values())


def test_legends_sit_below_the_axis_titles_which_push_the_margins():
    figures = [
        charts.window_deviation({"window_sizes": [2, 4], "deviations": {"a": [0.1, 0.05]}}),
        charts.predicted_epochs([{"pool": "a", "tokens": 10, "epochs": 1.0}]),
        charts.schedule_composition(
            [{"name": "main", "first_token": 0, "num_tokens": 10, "samples_per_pool": [1]}], ["a"]
        ),
        charts.shuffle_comparison({"exact": {"window_sizes": [2], "deviations": {"a": [0.1]}}}),
    ]
    for fig in figures:
        layout = fig["layout"]
        # At the bottom of the whole figure (container), not at a fraction of the plot
        # where plotly also draws the x axis's title.
        assert layout["legend"]["yref"] == "container" and layout["legend"]["y"] == 0
        axes = [v for k, v in layout.items() if k.startswith(("xaxis", "yaxis"))]
        assert axes and all(a["automargin"] is True for a in axes)


def test_token_ticks_are_human_numbers():
    assert [charts.human_number(n) for n in (0, 512, 900_096, 999_999, 1_000_096, 2_011_136)] == [
        "0", "512", "900k", "1M", "1M", "2.01M",
    ]  # fmt: skip
    fig = charts.schedule_composition(
        [
            {"name": "main", "first_token": 0, "num_tokens": 900_096, "samples_per_pool": [3]},
            {"name": "anneal", "first_token": 900_096, "num_tokens": 100_000,
             "samples_per_pool": [1]},
        ],
        ["a"],
    )  # fmt: skip
    axis = fig["layout"]["xaxis"]
    assert axis["tickvals"] == [0, 900_096, 1_000_096]
    assert axis["ticktext"] == ["0", "900k", "1M"]  # never "900.096k"


def test_heatmap_rows_are_in_the_labels_natural_order():
    fig = charts.position_heatmap(
        [0.25, 0.75], ["10", "2", "1,024-2,047", "128-255"], [[1, 1], [2, 2], [3, 3], [4, 4]]
    )
    heat = fig["data"][0]
    assert heat["y"] == ["2", "10", "128-255", "1,024-2,047"]
    assert heat["z"] == [[2, 2], [1, 1], [4, 4], [3, 3]]  # each row keeps its shares
    assert fig["layout"]["yaxis"]["autorange"] == "reversed"  # first row on top


def test_the_epochs_warning_line_and_the_budget_line_are_labelled():
    fig = charts.predicted_epochs([{"pool": "a", "tokens": 10, "epochs": 5.0}])
    assert fig["layout"]["yaxis2"]["tickmode"] == "auto"  # round epochs, not "2.43"
    (note,) = fig["layout"]["annotations"]
    assert note["text"] == "4 epochs: repeats beyond are worth less" and note["y"] == 4
    progress = charts.progress_by_step([{"step": 1, "tokens": 10}], total_tokens=100_000)
    assert progress["layout"]["annotations"][0]["text"] == "budget: 100,000 tokens"


def test_log_axes_label_round_values_not_minor_tick_digits():
    # Left to plotly, a log axis from 2 to 64 reads "2 3 4 5 6 7 8 9 10 2 3 4 5 6".
    curve = {
        "window_sizes": [2, 4, 8, 16, 32, 64],
        "deviations": {"a": [0.4, 0.3, 0.2, 0.1, 0.07, 0.05]},
        "ideal": [0.3, 0.2, 0.1, 0.07, 0.05, 0.04],
        "reference": {"mean": [0.5, 0.4, 0.3, 0.2, 0.1, 0.06], "lo": [0.45] * 6,
                      "hi": [0.6] * 6, "trials": 4},
    }  # fmt: skip
    lay = charts.window_deviation(curve)["layout"]
    assert lay["xaxis"]["tickmode"] == lay["yaxis"]["tickmode"] == "array"
    assert lay["xaxis"]["ticktext"] == ["2", "5", "10", "20", "50"]
    assert lay["yaxis"]["ticktext"] == ["0.05", "0.1", "0.2", "0.5"]  # 0.04 to 0.6
    # The shuffles' panels share one y axis whose ticks span every panel.
    low = {**curve, "deviations": {"a": [0.01] * 6}}
    lay = charts.shuffle_comparison({"exact": curve, "grid": low})["layout"]
    assert lay["yaxis"]["ticktext"][0] == "0.01" and lay["yaxis"]["ticktext"][-1] == "0.5"
    assert lay["xaxis2"]["ticktext"] == ["2", "5", "10", "20", "50"]
    # Over more than three decades, powers of ten only, as human numbers.
    assert charts.log_ticks([3, 40, 25_000])["ticktext"] == ["10", "100", "1k", "10k"]
    lengths = charts.length_histogram([10, 100, 100_000], [1, 2])["layout"]["xaxis"]
    assert lengths["ticktext"] == ["10", "100", "1k", "10k", "100k"]
    assert charts.log_ticks([0, 0]) == {}  # nothing positive: plotly's own ticks

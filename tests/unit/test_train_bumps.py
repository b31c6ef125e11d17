"""The loss-bump report's arithmetic on fixed inputs: shard boundaries in steps from a real
pool's manifest, the mean loss either side of a step, and the chart's curves and lines."""

from __future__ import annotations

import re

import pytest

from bench.train.bumps import around, shard_steps, svg
from shardcore.pool import build_pool
from tests.unit.mix_fixtures import tokenized_code


def test_shard_boundaries_are_the_pools_cumulative_records_in_steps(tmp_path):
    pool = tmp_path / "pool"
    manifest = build_pool([str(tokenized_code(tmp_path, 60))], str(pool), seq_len=32,
                          shard_size=4 << 10)  # fmt: skip
    cumulative = manifest["cumulative_records"]
    assert len(cumulative) > 2
    assert shard_steps(pool, 4) == [c / 4 for c in cumulative[1:-1]]


def test_around_averages_the_window_each_side_of_a_step():
    losses = [5.0] * 10 + [7.0] * 10  # step s has loss losses[s - 1]
    assert around(losses, 10, 4) == (5.0, 7.0)
    assert around(losses, 12, 4) == pytest.approx((6.0, 7.0))


def test_the_chart_draws_both_curves_and_each_pools_boundaries(tmp_path):
    path = tmp_path / "c.svg"
    svg({"local": [6.0] * 20 + [7.0] * 20, "exact": [6.5] * 40}, {"local": [20], "exact": [10, 30]},
        path, smooth=5)  # fmt: skip
    text = path.read_text()
    assert len(re.findall(r"<polyline", text)) == 2
    dashed = re.findall(r'<line x1="([\d.]+)"[^>]*stroke="(#\w+)" stroke-dasharray', text)
    # x = 50 + 690 * step / 40
    assert [(float(x), c) for x, c in dashed] == [
        (395.0, "#c0392b"),
        (222.5, "#2a6fdb"),
        (567.5, "#2a6fdb"),
    ]

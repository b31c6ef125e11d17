"""The proposal rule on fixed inputs: values computed by hand from its formula."""

import math

import pytest

from shardcore.adapt import propose_weights
from shardcore.errors import InputError


def test_weight_moves_to_the_pool_where_the_run_lags_the_reference():
    out = propose_weights(
        {"code": 1.0, "docs": 1.0}, {"code": 3.0, "docs": 2.0}, {"code": 2.5, "docs": 2.2},
        eta=1.0, smoothing=0.0,
    )  # fmt: skip
    e = math.exp(0.5)
    assert out["code"]["excess"] == pytest.approx(0.5)
    assert out["docs"]["excess"] == 0.0  # ahead of the reference: no excess
    assert out["code"]["proposed"] == pytest.approx(e / (1 + e))  # 0.6225
    assert out["docs"]["proposed"] == pytest.approx(1 / (1 + e))
    assert out["code"]["weight"] == 0.5


def test_smoothing_mixes_in_the_uniform_mixture_and_eta_zero_keeps_the_weights():
    w = {"a": 0.7, "b": 0.2, "c": 0.1}
    losses, ref = {"a": 1.0, "b": 4.0, "c": 2.0}, {"a": 1.0, "b": 1.0, "c": 1.0}
    kept = propose_weights(w, losses, ref, eta=0.0, smoothing=0.0)
    assert {p: v["proposed"] for p, v in kept.items()} == pytest.approx(w)
    out = propose_weights(w, losses, ref, eta=2.0, smoothing=0.1)
    raw = {"a": 0.7, "b": 0.2 * math.exp(6.0), "c": 0.1 * math.exp(2.0)}
    norm = sum(raw.values())
    for p in w:
        assert out[p]["proposed"] == pytest.approx(0.9 * raw[p] / norm + 0.1 / 3)
    assert sum(v["proposed"] for v in out.values()) == pytest.approx(1.0)


def test_a_huge_excess_does_not_overflow():
    out = propose_weights({"a": 1, "b": 1}, {"a": 900.0, "b": 1.0}, {"a": 0.0, "b": 1.0},
                          eta=10.0, smoothing=0.0)  # fmt: skip
    assert out["a"]["proposed"] == pytest.approx(1.0) and out["b"]["proposed"] >= 0


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (({"a": 1}, {}, {"a": 1.0}), {}, "losses: no validation loss for a"),
        (({"a": 1}, {"a": 1.0}, {"a": float("nan")}), {}, "reference[a]: nan is not a finite"),
        (({"a": 0}, {"a": 1.0}, {"a": 1.0}), {}, "weights: they sum to 0"),
        (({"a": 1}, {"a": 1.0}, {"a": 1.0}), {"eta": -1}, "eta: must be"),
        (({"a": 1}, {"a": 1.0}, {"a": 1.0}), {"smoothing": 2}, "smoothing: must be in"),
    ],
)
def test_bad_input_names_what_is_wrong(args, kwargs, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        propose_weights(*args, **kwargs)

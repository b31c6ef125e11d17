"""Mixtures that adapt: propose the next stage's weights from a run's validation losses.

The rule is DoReMi's domain-weight update (Xie et al., 2023), applied once between stages
with a reference run in place of DoReMi's reference model: for each pool d with current
weight w_d, the run's validation loss L_d and the reference run's R_d at comparable
progress, the excess loss is lambda_d = max(L_d - R_d, 0) and

    w'_d = w_d * exp(eta * lambda_d) / sum_e w_e * exp(eta * lambda_e)
    proposed_d = (1 - c) * w'_d + c / k

(k pools; c mixes in the uniform mixture so that no pool's weight reaches zero). Pools on
which the run is no worse than the reference keep their relative weight; weight moves to
the pools where the run lags most. ``eta`` sets how far one update moves (DoReMi uses 1
per step over many steps; one update between stages wants a larger step if the excess is
small). Pure: dicts of floats in, dicts of floats out.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import TypeVar

from shardcore.errors import InputError

K = TypeVar("K", bound=Hashable)  # a pool: its name or its catalog id

RULE = "doremi-excess-loss"


def propose_weights(
    weights: Mapping[K, float],
    losses: Mapping[K, float],
    reference: Mapping[K, float],
    *,
    eta: float = 1.0,
    smoothing: float = 1e-3,
) -> dict[K, dict[str, float]]:
    """Per pool: its weight (normalized), loss, reference loss, excess and proposed weight.
    Every pool of ``weights`` needs a loss in both runs; InputError names what is wrong."""
    if not weights:
        raise InputError("weights: no pools")
    if not (eta >= 0 and math.isfinite(eta)):
        raise InputError(f"eta: must be a finite number >= 0, got {eta}")
    if not 0 <= smoothing <= 1:
        raise InputError(f"smoothing: must be in [0, 1], got {smoothing}")
    for name, table in (("losses", losses), ("reference", reference)):
        missing = [p for p in weights if p not in table]
        if missing:
            raise InputError(f"{name}: no validation loss for {', '.join(map(str, missing))}")
        for p in weights:
            if not (math.isfinite(table[p]) and table[p] >= 0):
                raise InputError(f"{name}[{p}]: {table[p]} is not a finite loss >= 0")
    if any(not (w >= 0 and math.isfinite(w)) for w in weights.values()):
        raise InputError("weights: must be finite and >= 0")
    total = sum(weights.values())
    if total <= 0:
        raise InputError("weights: they sum to 0")
    k = len(weights)
    excess = {p: max(float(losses[p]) - float(reference[p]), 0.0) for p in weights}
    # Shift the exponent by its maximum: the same ratios without overflow.
    top = max(eta * x for x in excess.values())
    scaled = {p: weights[p] / total * math.exp(eta * excess[p] - top) for p in weights}
    norm = sum(scaled.values())
    return {
        p: {
            "weight": weights[p] / total,
            "loss": float(losses[p]),
            "reference_loss": float(reference[p]),
            "excess": excess[p],
            "proposed": (1 - smoothing) * scaled[p] / norm + smoothing / k,
        }
        for p in weights
    }

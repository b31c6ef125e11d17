"""The diversity recipe's measurements of a built pool or schedule, taken by the job that
builds it (its recorder) and kept on the row (``params["recipe"]``): pages read them,
never the artifact. ``shardcore.quality.recipe_quality`` on the first ``RECIPE_RECORDS``
records of the order (of each stage of a schedule), characteristic vectors from the pools'
segments: document-length quantile bins, the pool (a schedule of several pools) or the
tokenized source (a pool of several), and the order like with like: a pool's against
random orders of its documents packed alike, each stage of a schedule against random
orders of that stage's samples; cumulative characteristic error over training and the
per-batch error distribution, each with a verdict."""

from __future__ import annotations

import logging
from typing import Any

from shardcore import quality, storage
from shardcore.errors import ShardcoreError

log = logging.getLogger(__name__)

# Measured on the first this many records of the order (a bounded cost per build).
RECIPE_RECORDS = 200_000
RECIPE_LENGTH_BINS = 20
RECIPE_BATCH = 256
RECIPE_TRIALS = 8
RECIPE_CHECKPOINTS = 20


def recipe_measure(*, path: str) -> dict[str, Any]:
    """The recipe report of the pool or schedule at ``path`` (``recipe_report``'s dict
    with ``measured`` and ``batch_size``), or ``{"error": ...}`` when it cannot be measured
    (the artifact itself is still good). A store that does not answer raises."""
    try:
        out = quality.recipe_quality(
            path,
            length_bins=RECIPE_LENGTH_BINS,
            batch_size=RECIPE_BATCH,
            trials=RECIPE_TRIALS,
            checkpoints=RECIPE_CHECKPOINTS,
            limit=RECIPE_RECORDS,
            pool_sources=True,
        )["order"]
    except (ShardcoreError, OSError, ValueError) as exc:
        if storage.is_store_error(exc):
            raise
        log.info("no recipe measurement for %s: %s", path, exc)
        return {"error": f"no recipe measurement: {exc}"}
    return out

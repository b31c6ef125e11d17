"""Resume positions in a pool: a sample or token count -> (shard, record, token offset).

Computed by arithmetic and one binary search over the manifest's ``cumulative_records``
(``bisect`` on the list as stored: no array conversion, no scan), so the answer costs
O(log shards) whatever the position and the pool size. A sample is one record of
``seq_len + 1`` tokens (inputs plus the shifted target); a trainer consuming T tokens has
consumed T // seq_len samples and is ``T % seq_len`` tokens into the next one.

``cyclic_shard_order`` is the order in which a streaming reader that resumes at shard k
visits the shards: k, k+1, ..., then wraps around (C, D, E, A, B).
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from shardcore.errors import InputError


def locate_pool(
    manifest: dict[str, Any], *, sample: int | None = None, tokens: int | None = None
) -> dict[str, int | str]:
    """Where sample ``sample`` (or the token at training position ``tokens``) lives."""
    if (sample is None) == (tokens is None):
        raise InputError("locate needs exactly one of sample or tokens")
    seq_len = int(manifest["seq_len"])
    token_offset = 0
    if tokens is not None:
        tokens = int(tokens)
        if tokens < 0:
            raise InputError(f"token position must be >= 0, got {tokens}")
        sample, token_offset = divmod(tokens, seq_len)
    sample = int(sample)
    cumulative = manifest["cumulative_records"]
    total = int(cumulative[-1])
    if not 0 <= sample < total:
        what = f"token {tokens} (sample {sample})" if tokens is not None else f"sample {sample}"
        raise InputError(f"{what} is outside the pool's {total} samples")
    shard = bisect.bisect_right(cumulative, sample) - 1
    return {
        "shard": shard,
        "shard_prefix": manifest["shards"][shard]["prefix"],
        "record": sample,
        "record_in_shard": sample - int(cumulative[shard]),
        "token_offset": token_offset,
    }


def cyclic_shard_order(num_shards: int, start_shard: int) -> np.ndarray:
    """Shards in the order a streaming reader resuming at ``start_shard`` visits them."""
    if num_shards < 0 or not (0 <= start_shard < max(num_shards, 1)):
        raise InputError(f"start shard {start_shard} outside [0, {num_shards})")
    return (np.arange(num_shards, dtype=np.int64) + start_shard) % max(num_shards, 1)

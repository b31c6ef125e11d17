"""Where a sample of a pool or a materialized mixture lives: one binary search over the
manifest's ``cumulative_records`` (``locate_pool``), and the check of a position given as a
sample or a token count (``position``). Needs only the manifest, so the pool's reader and
``shardcore.locate`` (which also reads mixtures) both use it."""

from __future__ import annotations

from typing import Any

from shardcore import manifest as mf
from shardcore.errors import InputError

__all__ = ["locate_pool", "position"]


def position(
    seq_len: int, total: int, what: str, sample: int | None, tokens: int | None
) -> tuple[int, int]:
    """(sample, token offset in it) of a position given as a sample or a token count,
    checked against the ``total`` samples of ``what`` ("pool", "mixture")."""
    if (sample is None) == (tokens is None):
        raise InputError("locate needs exactly one of sample or tokens")
    offset = 0
    if tokens is not None:
        tokens = int(tokens)
        if tokens < 0:
            raise InputError(f"token position must be >= 0, got {tokens}")
        sample, offset = divmod(tokens, seq_len)
    assert sample is not None  # one of the two is given (checked above)
    sample = int(sample)
    if not 0 <= sample < total:
        where = f"token {tokens} (sample {sample})" if tokens is not None else f"sample {sample}"
        raise InputError(f"{where} is outside the {what}'s {total} samples")
    return sample, offset


def locate_pool(
    manifest: dict[str, Any], *, sample: int | None = None, tokens: int | None = None
) -> dict[str, int | str]:
    """Where sample ``sample`` (or the token at training position ``tokens``) lives in a
    pool or a materialized mixture: ``{shard, shard_prefix, record, record_in_shard,
    token_offset}``."""
    cumulative = manifest["cumulative_records"]
    sample, offset = position(int(manifest["seq_len"]), int(cumulative[-1]), "pool", sample, tokens)
    shard = mf.bisect_records(cumulative, sample)
    return {
        "shard": shard,
        "shard_prefix": mf.shard_prefix(manifest, shard),
        "record": sample,
        "record_in_shard": sample - int(cumulative[shard]),
        "token_offset": offset,
    }

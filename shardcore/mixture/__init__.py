"""Mixtures: pools with token-share weights, a token budget, a seed, stages and an
ordering, turned into a schedule of (pool, record) per training sample. No data is copied.

Spec (JSON or YAML, or the dataclasses below)::

    {"tokens": 1000000, "seed": 0, "order": "blend", "max_repetitions": 4,
     "components": [
        {"name": "prose", "weight": 0.7, "components": [
            {"pool": "pools/en", "weight": 0.8}, {"pool": "pools/de", "weight": 0.2}]},
        {"pool": "pools/code", "weight": 0.3}],
     "stages": [{"name": "anneal", "tokens": 100000, "components": [...]}]}

``order_options`` tunes the diversity ordering: ``{"by": ["lang"], "length_bins": true,
"lambda": {"pool": 1, "lang": 1, "length": 0.5}}`` (characteristics and their weights).

Nested groups are flattened to leaf shares (sibling weights are normalized, shares multiply
down the tree: prose 0.7 x en 0.8 = 0.56). The first stage, "main" (or ``first_stage``,
e.g. "anneal" for a run switched inside its anneal), uses the top-level components; each further stage covers the tokens it names, in order, at the end of the
budget (e.g. annealing on other weights over the last N tokens).

Building. Every pool must share the tokenizer and seq_len; a training sample is one record
(seq_len + 1 tokens, seq_len trained on), so token shares equal sample shares. Per stage,
the blend schedule (``shardcore.blend``, Megatron-exact) decides which pool each sample
comes from; then, per pool, samples take the pool's records in pool order (the pool is
already globally shuffled), continuing across stages. A pool that runs out rolls over into
a new epoch with a fresh seeded permutation of its records (so repeats are not in the same
order); ``max_repetitions`` caps the epochs. The optional ``diversity`` ordering then
permutes each stage's samples (``shardcore.order``). The schedule is written as two .npy
arrays, ``schedule/pool.npy`` (int16) and ``schedule/record.npy`` (int64), then the
manifest (kind "mixture"), the commit point.

Continuing a run. A mixture may continue another at one of its samples (``continues``,
from ``continuation(previous, sample)``): a run that read the previous mixture's samples
[0, sample) switches to this one, whose sample 0 is the run's sample ``sample``. Each pool
the two share is read on from where the previous schedule left it at that sample (the
records the run has not read yet in the current epoch, then the same seeded permutations
for later epochs), so nothing the run read is read again before its turn; a pool new in
this mixture starts at its first record. ``max_repetitions`` counts what the run read
before too. The previous mixture is named by fingerprint, so a continuation is only ever
exact against the schedule it was computed from.
"""

from shardcore.mixture.build import (
    _records_for,
    build_mixture,
    build_schedule,
)
from shardcore.mixture.layout import (
    CHUNK_SAMPLES,
    COUNTS_FILE,
    KIND,
    LENGTH_FAMILY,
    MAX_SAMPLES_VARIABLE,
    POOL_FILE,
    RECORD_FILE,
    SCHEDULE_DIR,
    SCHEDULE_UNIT,
    STAGE,
)
from shardcore.mixture.plan import (
    PoolInfo,
    load_pools,
    plan_epochs,
    stage_samples,
)
from shardcore.mixture.reader import Mixture, continuation
from shardcore.mixture.spec import ORDERS, Component, MixtureSpec, Stage, flatten
from shardcore.mixture.stages import plan_mixture

__all__ = [
    "CHUNK_SAMPLES",
    "COUNTS_FILE",
    "KIND",
    "LENGTH_FAMILY",
    "MAX_SAMPLES_VARIABLE",
    "ORDERS",
    "POOL_FILE",
    "RECORD_FILE",
    "SCHEDULE_DIR",
    "SCHEDULE_UNIT",
    "STAGE",
    "Component",
    "Mixture",
    "MixtureSpec",
    "PoolInfo",
    "Stage",
    "_records_for",
    "build_mixture",
    "build_schedule",
    "continuation",
    "flatten",
    "load_pools",
    "plan_epochs",
    "plan_mixture",
    "stage_samples",
]

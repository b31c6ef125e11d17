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

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardcore import atomic, blend, limits, storage, units, verify
from shardcore import manifest as mf
from shardcore.errors import InputError, ManifestError
from shardcore.order import ORDERINGS

KIND = "mixture"
SCHEDULE_DIR = "schedule"
POOL_FILE = f"{SCHEDULE_DIR}/pool.npy"
RECORD_FILE = f"{SCHEDULE_DIR}/record.npy"
ORDERS = tuple(ORDERINGS)  # the names of shardcore.order
LENGTH_FAMILY = "length"


# --------------------------------------------------------------------------- the spec


@dataclass
class Component:
    """A leaf (``pool`` set) or a group (``components`` set) with a positive weight."""

    weight: float
    pool: str | None = None
    name: str | None = None
    components: list[Component] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> Component:
        if not isinstance(data, Mapping):
            raise InputError(f"{where}: expected an object, got {type(data).__name__}")
        unknown = set(data) - {"weight", "pool", "name", "components"}
        if unknown:
            raise InputError(f"{where}: unknown field(s) {sorted(unknown)}")
        if "weight" not in data:
            raise InputError(f"{where}.weight: missing")
        try:
            weight = float(data["weight"])
        except (TypeError, ValueError):
            raise InputError(f"{where}.weight: {data['weight']!r} is not a number") from None
        pool, subs = data.get("pool"), data.get("components")
        if (pool is None) == (subs is None):
            raise InputError(f"{where}: give exactly one of 'pool' or 'components'")
        children = [cls.from_dict(c, f"{where}.components[{i}]") for i, c in enumerate(subs or [])]
        if subs is not None and not children:
            raise InputError(f"{where}.components: a group needs at least one component")
        return cls(weight, None if pool is None else str(pool), data.get("name"), children)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"weight": self.weight}
        if self.name is not None:
            out["name"] = self.name
        if self.pool is not None:
            out["pool"] = self.pool
        else:
            out["components"] = [c.to_dict() for c in self.components]
        return out


@dataclass
class Stage:
    """A stage after the first: ``tokens`` at the end of the budget with its own components."""

    name: str
    tokens: int
    components: list[Component]


@dataclass
class MixtureSpec:
    components: list[Component]
    tokens: int
    seed: int = 0
    order: str = "blend"
    stages: list[Stage] = field(default_factory=list)
    max_repetitions: float = 4.0
    order_options: dict[str, Any] = field(default_factory=dict)
    base_dir: str | None = None  # relative pool paths resolve against this
    # Samples per optimizer step: when set, every stage is a whole number of global
    # batches, so each stage starts exactly at a step (nanotron's start_training_step).
    global_batch_size: int | None = None
    # Where a run switches to this mixture from another (see ``continuation``).
    continues: dict[str, Any] | None = None
    # The first stage's name: "main", or the stage a continued run was in (e.g. "anneal").
    first_stage: str = "main"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base_dir: str | None = None) -> MixtureSpec:
        if not isinstance(data, Mapping):
            raise InputError("mixture spec: expected an object at the top level")
        known = {"components", "tokens", "seed", "order", "stages", "max_repetitions"}
        known |= {"global_batch_size", "continues", "first_stage"}
        unknown = set(data) - known - {"order_options", "base_dir"}
        if unknown:
            raise InputError(f"mixture spec: unknown field(s) {sorted(unknown)}")
        if "components" not in data:
            raise InputError("components: missing")
        if "tokens" not in data:
            raise InputError("tokens: missing (the token budget)")
        comps = [
            Component.from_dict(c, f"components[{i}]")
            for i, c in enumerate(_as_list(data["components"], "components"))
        ]
        stages = []
        for i, st in enumerate(_as_list(data.get("stages") or [], "stages")):
            where = f"stages[{i}]"
            if not isinstance(st, Mapping) or "tokens" not in st or "components" not in st:
                raise InputError(f"{where}: needs 'tokens' and 'components'")
            stages.append(
                Stage(
                    str(st.get("name", f"stage{i + 1}")),
                    _as_int(st["tokens"], f"{where}.tokens"),
                    [
                        Component.from_dict(c, f"{where}.components[{j}]")
                        for j, c in enumerate(_as_list(st["components"], f"{where}.components"))
                    ],
                )
            )
        spec = cls(
            components=comps,
            tokens=_as_int(data["tokens"], "tokens"),
            seed=_as_int(data.get("seed", 0), "seed"),
            order=str(data.get("order", "blend")),
            stages=stages,
            max_repetitions=float(data.get("max_repetitions", 4.0)),
            order_options=dict(data.get("order_options") or {}),
            base_dir=base_dir or data.get("base_dir"),
            global_batch_size=(
                None
                if data.get("global_batch_size") is None
                else _as_int(data["global_batch_size"], "global_batch_size")
            ),
            continues=(None if data.get("continues") is None else _continues(data["continues"])),
            first_stage=data.get("first_stage", "main"),
        )
        spec.validate()
        return spec

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> MixtureSpec:
        """Read a spec from ``.json``, ``.yaml`` or ``.yml``; relative pool paths resolve
        against the file's directory."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise InputError(f"{path}: cannot read mixture spec: {exc}") from exc
        try:
            if path.suffix in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as exc:  # yaml and json raise different types
            raise InputError(f"{path}: not valid {path.suffix[1:] or 'json'}: {exc}") from exc
        return cls.from_dict(data, base_dir=str(path.parent.resolve()))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "components": [c.to_dict() for c in self.components],
            "tokens": self.tokens,
            "seed": self.seed,
            "order": self.order,
            "max_repetitions": self.max_repetitions,
        }
        if self.stages:
            out["stages"] = [
                {
                    "name": s.name,
                    "tokens": s.tokens,
                    "components": [c.to_dict() for c in s.components],
                }
                for s in self.stages
            ]
        if self.order_options:
            out["order_options"] = self.order_options
        if self.global_batch_size is not None:
            out["global_batch_size"] = self.global_batch_size
        if self.continues is not None:
            out["continues"] = self.continues
        if self.first_stage != "main":  # only then: earlier specs keep their fingerprints
            out["first_stage"] = self.first_stage
        return out

    def validate(self) -> None:
        """Checks that need no pool: every number within its range (``shardcore.limits``),
        positive weights and budget, known ordering."""
        if self.tokens <= 0:
            raise InputError(f"tokens: the budget must be positive, got {self.tokens}")
        self.tokens = limits.tokens("tokens", self.tokens)
        self.seed = limits.seed(self.seed)
        if self.order not in ORDERS:
            raise InputError(f"order: unknown ordering {self.order!r}; known: {list(ORDERS)}")
        if self.max_repetitions != math.inf:  # inf: no cap (the builder's predictions)
            self.max_repetitions = limits.check_float(
                "max_repetitions", self.max_repetitions, 0.0, limits.MAX_REPETITIONS, low_open=True
            )
        if self.global_batch_size is not None:
            self.global_batch_size = limits.check_int(
                "global_batch_size", self.global_batch_size, 1, limits.MAX_BATCH
            )
        if not isinstance(self.first_stage, str) or not self.first_stage.strip():
            raise InputError(
                f"first_stage: the first stage's name must be a non-empty string, "
                f"got {self.first_stage!r}"
            )
        names = [self.first_stage] + [s.name for s in self.stages]
        for i, st in enumerate(self.stages):
            st.tokens = limits.tokens(f"stages[{i}].tokens", st.tokens)
            if st.name in names[: i + 1]:
                raise InputError(
                    f"stages[{i}].name: stage {st.name!r} is named twice (stage names are unique)"
                )
        if sum(s.tokens for s in self.stages) >= self.tokens:
            raise InputError(
                f"stages: their {sum(s.tokens for s in self.stages)} tokens leave nothing of "
                f"the {self.tokens}-token budget for the main stage"
            )
        for name, comps in self.stage_components():
            flatten(comps, where=self.field_of(name))

    def stage_components(self) -> list[tuple[str, list[Component]]]:
        return [(self.first_stage, self.components)] + [(s.name, s.components) for s in self.stages]

    def field_of(self, stage: str) -> str:
        """The spec field holding a stage's components, for error messages."""
        for i, s in enumerate(self.stages):
            if s.name == stage:
                return f"stages[{i}].components"
        return "components"

    def resolve(self, pool: str) -> str:
        if "://" in pool or os.path.isabs(pool) or self.base_dir is None:
            return storage.resolve(pool)
        return storage.resolve(storage.join(self.base_dir, pool))


def _continues(data: Any) -> dict[str, Any]:
    """A spec's ``continues`` checked field by field: ``{"mixture": fingerprint, "sample":
    n, "pools": [{"path", "read", "epoch_key": [seed, index]}]}``."""
    if not isinstance(data, Mapping):
        raise InputError("continues: expected an object")
    unknown = set(data) - {"mixture", "sample", "pools"}
    if unknown:
        raise InputError(f"continues: unknown field(s) {sorted(unknown)}")
    if not isinstance(data.get("mixture"), str) or not data["mixture"]:
        raise InputError("continues.mixture: the fingerprint of the mixture it continues")
    sample = _as_int(data.get("sample"), "continues.sample")
    if sample < 0:
        raise InputError(f"continues.sample: must be >= 0, got {sample}")
    pools = []
    for i, p in enumerate(_as_list(data.get("pools", []), "continues.pools")):
        where = f"continues.pools[{i}]"
        if not isinstance(p, Mapping) or set(p) != {"path", "read", "epoch_key"}:
            raise InputError(f"{where}: needs exactly path, read and epoch_key")
        read = _as_int(p["read"], f"{where}.read")
        if read < 0:
            raise InputError(f"{where}.read: must be >= 0, got {read}")
        key = _as_list(p["epoch_key"], f"{where}.epoch_key")
        if len(key) != 2:
            raise InputError(f"{where}.epoch_key: two integers (seed, pool index)")
        pools.append(
            {
                "path": str(p["path"]),
                "read": read,
                "epoch_key": [_as_int(k, f"{where}.epoch_key") for k in key],
            }
        )
    return {"mixture": data["mixture"], "sample": sample, "pools": pools}


def _as_list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise InputError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _as_int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise InputError(f"{where}: {value!r} is not an integer")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {value!r} is not an integer") from None
    if not math.isfinite(f) or f != int(f):
        raise InputError(f"{where}: {value!r} is not an integer")
    return int(f)


def flatten(components: list[Component], *, where: str = "components") -> list[tuple[str, float]]:
    """Leaf (pool, share) pairs: sibling weights normalized, shares multiplied down groups.
    A pool listed twice gets the sum of its shares."""
    if not components:
        raise InputError(f"{where}: no components")
    out: dict[str, float] = {}

    def walk(comps: list[Component], share: float, path: str) -> None:
        for i, c in enumerate(comps):
            if not (math.isfinite(c.weight) and c.weight > 0):
                raise InputError(f"{path}[{i}].weight: {c.weight!r} is not positive")
            limits.weight(f"{path}[{i}].weight", c.weight)
        total = sum(c.weight for c in comps)
        for i, c in enumerate(comps):
            s = share * c.weight / total
            if c.pool is not None:
                out[c.pool] = out.get(c.pool, 0.0) + s
            else:
                walk(c.components, s, f"{path}[{i}].components")

    walk(components, 1.0, where)
    return list(out.items())


# --------------------------------------------------------------------------- pools


@dataclass
class PoolInfo:
    key: str  # as written in the spec
    path: str
    manifest: dict[str, Any]

    @property
    def num_records(self) -> int:
        return int(self.manifest["num_records"])


def load_pools(spec: MixtureSpec) -> list[PoolInfo]:
    """Every pool the spec names, in first-mention order, validated: it exists, is a pool,
    is not empty, and all share one tokenizer and seq_len."""
    keys: list[str] = []
    for _, comps in spec.stage_components():
        for pool, _ in flatten(comps):
            if pool not in keys:
                keys.append(pool)
    if len(keys) > blend.MAX_POOLS:
        raise InputError(f"components: {len(keys)} pools, at most {blend.MAX_POOLS}")
    pools = []
    for key in keys:
        path = spec.resolve(key)
        try:
            manifest = mf.read_manifest(path)
        except ManifestError as exc:
            raise InputError(f"pool {key!r}: unknown pool ({exc})") from None
        if manifest.get("kind") not in ("pool", "materialized"):
            raise InputError(f"pool {key!r}: {path} is a {manifest.get('kind')!r}, not a pool")
        if int(manifest.get("num_records", 0)) <= 0:
            raise InputError(f"pool {key!r}: empty pool (0 records), nothing to sample")
        pools.append(PoolInfo(key, path, manifest))
    first = pools[0].manifest
    for p in pools[1:]:
        if int(p.manifest["seq_len"]) != int(first["seq_len"]):
            raise InputError(
                f"pool {p.key!r}: seq_len {p.manifest['seq_len']} differs from "
                f"{pools[0].key!r}'s {first['seq_len']}"
            )
        fp_a = (p.manifest.get("tokenizer") or {}).get("fingerprint")
        fp_b = (first.get("tokenizer") or {}).get("fingerprint")
        if fp_a != fp_b:
            raise InputError(f"pool {p.key!r}: tokenizer differs from {pools[0].key!r}'s")
    return pools


def _pools_from_manifests(
    spec: MixtureSpec, manifests: Mapping[str, Mapping[str, Any]]
) -> list[PoolInfo]:
    out: list[PoolInfo] = []
    for _, comps in spec.stage_components():
        for key, _ in flatten(comps):
            if any(p.key == key for p in out):
                continue
            if key not in manifests:
                raise InputError(f"pool {key!r}: unknown pool (not among the given manifests)")
            manifest = dict(manifests[key])
            if int(manifest.get("num_records", 0)) <= 0:
                raise InputError(f"pool {key!r}: empty pool (0 records), nothing to sample")
            out.append(PoolInfo(key, spec.resolve(key), manifest))
    return out


# --------------------------------------------------------------------------- planning


def stage_samples(spec: MixtureSpec, seq_len: int) -> list[tuple[str, int]]:
    """Samples per stage. The budget is ceil(tokens / seq_len) samples; each later stage
    takes ceil(its tokens / seq_len) of them at the end; "main" keeps the rest. So stage k
    starts at training token ``first_sample * seq_len``: exactly ``tokens - (tokens of
    the stages from k on)`` when the counts are multiples of seq_len. With a
    ``global_batch_size`` B, the budget and every later stage round up to whole batches of B
    samples, so every stage starts and ends on a step boundary."""

    def whole(n: int) -> int:
        b = spec.global_batch_size or 1
        return -(-n // b) * b

    total = whole(-(-spec.tokens // seq_len))
    later = [(s.name, whole(-(-s.tokens // seq_len))) for s in spec.stages]
    main = total - sum(n for _, n in later)
    if main <= 0:
        raise InputError(
            f"stages: they take all {total} samples of the budget ({spec.tokens} tokens, "
            f"seq_len {seq_len}), none left for the main stage"
        )
    return [(spec.first_stage, main), *later]


# A schedule holds two arrays of one entry per sample (pool: 1-2 bytes, record: 8 bytes)
# in memory while it is built: 2^30 samples is about 10 GiB. Budgets beyond it are refused
# before anything is allocated; raise it on bigger machines.
MAX_SAMPLES_VARIABLE = "SHARDYARD_MAX_SCHEDULE_SAMPLES"
DEFAULT_MAX_SAMPLES = 1 << 30


def max_schedule_samples() -> int:
    raw = os.environ.get("SHARDYARD_MAX_SCHEDULE_SAMPLES", "").strip()
    if not raw:
        return DEFAULT_MAX_SAMPLES
    try:
        value = int(float(raw))
    except ValueError:
        raise InputError(f"{MAX_SAMPLES_VARIABLE}={raw!r} is not a number") from None
    if value < 1:
        raise InputError(f"{MAX_SAMPLES_VARIABLE}={raw!r} must be positive")
    return value


def _stage_weights(spec: MixtureSpec, pools: list[PoolInfo]) -> list[tuple[str, int, np.ndarray]]:
    index = {p.key: i for i, p in enumerate(pools)}
    seq_len = int(pools[0].manifest["seq_len"])
    sizes = dict(stage_samples(spec, seq_len))
    total, limit = sum(sizes.values()), max_schedule_samples()
    if total > limit:
        raise InputError(
            f"tokens: a budget of {spec.tokens:,} tokens is {total:,} samples of {seq_len} "
            f"tokens; a schedule holds at most {limit:,} samples ({MAX_SAMPLES_VARIABLE}, "
            f"about {limit * 9 / 2**30:,.0f} GiB while it is built)"
        )
    out = []
    for name, comps in spec.stage_components():
        leaves = flatten(comps, where=spec.field_of(name))
        n = sizes[name]
        if n < len(leaves):
            raise InputError(
                f"tokens: budget too small: stage {name!r} has {n} samples for "
                f"{len(leaves)} components (need one sample per component)"
            )
        w = np.zeros(len(pools))
        for pool, share in leaves:
            w[index[pool]] = share
        out.append((name, n, w))
    return out


def _continued(spec: MixtureSpec, pools: list[PoolInfo]) -> tuple[np.ndarray, list[list[int]]]:
    """Per pool: the records a continued run already read of it (0 for a new pool) and the
    key of its epoch permutations, [seed, pool index] of the mixture that first read it."""
    read = np.zeros(len(pools), dtype=np.int64)
    keys = [[int(spec.seed), i] for i in range(len(pools))]
    if spec.continues is None:
        return read, keys
    by_path = {os.path.abspath(p["path"]): p for p in spec.continues["pools"]}
    for i, p in enumerate(pools):
        prev = by_path.get(os.path.abspath(p.path))
        if prev is not None:
            read[i] = int(prev["read"])
            keys[i] = [int(k) for k in prev["epoch_key"]]
    return read, keys


def continuation(previous: str | os.PathLike, sample: int) -> dict[str, Any]:
    """The ``continues`` of a mixture that a run switches to after reading samples
    [0, ``sample``) of the mixture at ``previous``: per pool of it, how many of its records
    the run has read by then (what the previous schedule took before ``sample``, plus what
    it continued from) and the key of its epoch permutations. One pass over the int16
    pool column of the schedule prefix."""
    prev = Mixture(previous)
    sample = int(sample)
    if not 0 <= sample <= prev.num_samples:
        raise InputError(
            f"continue at sample {sample}: {prev.path} has samples [0, {prev.num_samples}]"
        )
    counts = np.bincount(
        np.asarray(prev.pool_index[:sample], dtype=np.int64), minlength=len(prev.pools)
    )
    out = []
    for i, p in enumerate(prev.pools):
        out.append(
            {
                "path": os.path.abspath(p["path"]),
                "read": int(p.get("first_read", 0)) + int(counts[i]),
                "epoch_key": list(p.get("epoch_key", [int(prev.manifest["spec"]["seed"]), i])),
            }
        )
    return {"mixture": str(prev.manifest["fingerprint"]), "sample": sample, "pools": out}


def _expected_counts(weights: np.ndarray, n: int) -> np.ndarray:
    """The blend's per-pool counts after n samples, without building it: each count is
    w*n rounded by largest remainder (the blend is never more than one sample behind)."""
    raw = weights * n
    counts = np.floor(raw).astype(np.int64)
    short = n - int(counts.sum())
    if short > 0:
        rem = np.where(weights > 0, raw - counts, -1.0)
        counts[np.argsort(-rem, kind="stable")[:short]] += 1
    return counts


def plan_epochs(
    spec: MixtureSpec | Mapping[str, Any],
    pools: list[PoolInfo] | Mapping[str, Mapping[str, Any]] | None = None,
    *,
    exact: bool = False,
) -> list[dict[str, Any]]:
    """Per pool: samples, tokens taken, epochs (samples / pool records), share. Checks
    ``max_repetitions`` and that every component gets a sample. ``exact`` counts with the
    real blend (O(samples)); otherwise by largest-remainder rounding, within a sample or
    two of it, instant for the mixture builder page. ``pools``: None (read the manifests
    the spec names), ``load_pools``' result, or a mapping from each pool as the spec names
    it to its manifest (e.g. from a catalog, without touching the files)."""
    if not isinstance(spec, MixtureSpec):
        spec = MixtureSpec.from_dict(spec)
    if pools is None:
        pools = load_pools(spec)
    elif isinstance(pools, Mapping):
        pools = _pools_from_manifests(spec, pools)
    seq_len = int(pools[0].manifest["seq_len"])
    taken = np.zeros(len(pools), dtype=np.int64)
    read, _ = _continued(spec, pools)
    per_stage = []
    for name, n, w in _stage_weights(spec, pools):
        if exact:
            di, _ = blend.build_blending_indices(w[w > 0], n)
            counts = np.zeros(len(pools), dtype=np.int64)
            counts[np.flatnonzero(w > 0)] = np.bincount(di, minlength=int((w > 0).sum()))
        else:
            counts = _expected_counts(w, n)
        missing = np.flatnonzero((w > 0) & (counts == 0))
        if missing.size:
            p = pools[int(missing[0])]
            raise InputError(
                f"tokens: budget too small: pool {p.key!r} gets no sample in stage {name!r} "
                f"(share {w[missing[0]]:.3g} x {n} samples < 1)"
            )
        taken += counts
        per_stage.append((name, counts))
    total = int(taken.sum())
    out = []
    _check_repetitions(spec, pools, taken + read, read)
    for i, p in enumerate(pools):
        epochs = taken[i] / p.num_records
        out.append(
            {
                "pool": p.key,
                "path": p.path,
                "records": p.num_records,
                "samples": int(taken[i]),
                "tokens": int(taken[i]) * seq_len,
                "epochs": float(epochs),
                "share": float(taken[i] / total) if total else 0.0,
                "stages": {name: int(c[i]) for name, c in per_stage},
            }
        )
    return out


# --------------------------------------------------------------------------- building


def _epoch_permutation(seed: int, pool: int, epoch: int, n: int) -> np.ndarray:
    """Epoch 0 reads the (already shuffled) pool in order; each repeat a fresh permutation."""
    if epoch == 0:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng([seed, pool, epoch, 0x6D6978])
    return rng.permutation(n).astype(np.int64)


def _records_for(seed: int, pool: int, n_records: int, consumed: np.ndarray) -> np.ndarray:
    """Record index for each consumption index (0, 1, 2, ... across stages) of a pool."""
    out = np.empty(consumed.size, dtype=np.int64)
    epochs = consumed // n_records
    for e in np.unique(epochs).tolist():
        sel = epochs == e
        out[sel] = _epoch_permutation(seed, pool, int(e), n_records)[consumed[sel] % n_records]
    return out


def _families(
    pools: list[PoolInfo], pool_idx: np.ndarray, record: np.ndarray, options: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """Characteristics per sample for the diversity ordering: the pool, each property named
    in ``options["by"]`` (a pool document property, per record its main document's), and a
    document-length bin (log2 of the main document's tokens) unless ``length_bins`` is off."""
    fams: dict[str, np.ndarray] = {"pool": pool_idx.astype(np.int64)}
    by = list(options.get("by") or [])
    want_length = bool(options.get("length_bins", True))
    if not by and not want_length:
        return fams
    from shardcore.pool import DOCUMENTS_NAME, PoolReader

    per_pool = []
    for p in pools:
        pool = PoolReader(p.path)
        # The tables read below (documents, per-shard segments) are checked against the
        # pool's checksums first: a corrupt pool fails the build naming file and range.
        verify.check_files_read(
            pool.path,
            pool.manifest,
            [DOCUMENTS_NAME] + [f"{sh['prefix']}.segments.npz" for sh in pool.manifest["shards"]],
        )
        labels = {prop: pool.record_labels(prop) for prop in by}
        if want_length:
            cols = pool.documents.column_names
            if "n_tokens" in cols:
                n_tok = pool.documents.column("n_tokens").to_numpy()
                labels[LENGTH_FAMILY] = np.floor(
                    np.log2(np.maximum(n_tok[pool.main_documents()], 1))
                ).astype(np.int64)
        per_pool.append(labels)
    names = list(by) + ([LENGTH_FAMILY] if want_length else [])
    for name in names:
        if not all(name in lab for lab in per_pool):
            continue
        values = [lab[name] for lab in per_pool]
        out = np.empty(
            pool_idx.size, dtype=object if values[0].dtype == object else values[0].dtype
        )
        for i, v in enumerate(values):
            sel = pool_idx == i
            out[sel] = v[record[sel]]
        fams[name] = out.astype(str) if out.dtype == object else out
    return fams


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
    read, keys = _continued(spec, pools)
    consumed = read.copy()  # per pool: the next position in its read order
    facts = []
    start = 0
    seq_len = int(pools[0].manifest["seq_len"])
    for k, (name, n, w) in enumerate(stages):
        used = np.flatnonzero(w > 0)
        di, si = blend.build_blending_indices(
            w[used],
            n,
            progress=(lambda d, t, name=name: progress(name, d, t)) if progress else None,
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
            recs[sel] = _records_for(seed, key, pools[i].num_records, order_in_pool)
        consumed += counts
        if spec.order != "blend":
            from shardcore.order import get_ordering

            fams = (
                _families(pools, pools_here, recs, spec.order_options)
                if spec.order == "diversity"
                else {"pool": pools_here}
            )
            lam = spec.order_options.get("lambda") or {}
            perm = get_ordering(spec.order)(
                fams, seed=spec.seed + 7919 * k, weights=lam, pools=[p.path for p in pools],
                records=recs, options=spec.order_options,
            )  # fmt: skip
            pools_here, recs = pools_here[perm], recs[perm]
        pool_idx[start : start + n] = pools_here
        record[start : start + n] = recs
        facts.append(
            {
                "name": name,
                "first_sample": start,
                "num_samples": n,
                "first_token": start * seq_len,
                "num_tokens": n * seq_len,
                "weights": w.tolist(),
                "samples_per_pool": counts.tolist(),
            }
        )
        start += n
    _check_repetitions(spec, pools, consumed, read)  # consumed counts what was read before
    return pool_idx, record, facts


def _check_repetitions(
    spec: MixtureSpec, pools: list[PoolInfo], samples: np.ndarray, before: np.ndarray
) -> None:
    """Refuse a schedule that reads a pool more than ``spec.max_repetitions`` times;
    ``samples`` counts, for a continued run, the ``before`` records it read already."""
    for i, p in enumerate(pools):
        epochs = samples[i] / p.num_records
        if epochs > spec.max_repetitions:
            raise InputError(
                f"max_repetitions: pool {p.key!r} would be read {epochs:.2f} times "
                f"({int(samples[i] - before[i])} samples from {p.num_records} records"
                f"{f', after the {int(before[i])} the run read before' if before[i] else ''}), "
                f"above max_repetitions={spec.max_repetitions:g}; add data, lower its weight "
                f"or the budget, or raise max_repetitions"
            )


def _save_npy(path: Path, arr: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_open(path) as f:
        np.save(f, arr)


def build_mixture(
    spec: MixtureSpec | Mapping[str, Any],
    out: str | os.PathLike,
    *,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Build the mixture's schedule in ``out`` and return its manifest. ``progress(stage,
    done, total)`` reports blend progress. Rebuilding the same spec over the same pools
    gives the same bytes and fingerprint. ``out`` may be ``s3://bucket/prefix``: the
    schedule is built in a local work directory and uploaded, the manifest last."""
    if storage.is_remote(out):
        import shutil

        work = units.work_dir(os.fspath(out))
        shutil.rmtree(work, ignore_errors=True)
        manifest = build_mixture(spec, work, progress=progress)
        storage.publish_directory(work, out)
        shutil.rmtree(work, ignore_errors=True)
        return manifest
    if not isinstance(spec, MixtureSpec):
        spec = MixtureSpec.from_dict(spec)
    spec.validate()
    built = _schedule_write(spec, Path(out), progress=progress)
    return _manifest_write(spec, load_pools(spec), Path(out), built)


def _schedule_write(
    spec: MixtureSpec, out: Path, *, progress: Callable[[str, int, int], None] | None = None
) -> dict[str, Any]:
    """Write the schedule arrays into ``out``; returns what the manifest needs besides
    them: samples and tokens, samples per pool (in ``load_pools`` order), per-stage facts."""
    pools = load_pools(spec)
    plan_epochs(spec, pools)  # fail fast on repetitions and tiny budgets, before any work
    pool_idx, record, stages = build_schedule(spec, pools, progress=progress)
    out.mkdir(parents=True, exist_ok=True)
    _save_npy(out / POOL_FILE, pool_idx)
    _save_npy(out / RECORD_FILE, record)
    seq_len = int(pools[0].manifest["seq_len"])
    return {
        "samples": int(pool_idx.size),
        "tokens": int(pool_idx.size) * seq_len,
        "pool_samples": np.bincount(pool_idx, minlength=len(pools)).tolist(),
        "stages": stages,
    }


def _manifest_write(
    spec: MixtureSpec, pools: list[PoolInfo], out: Path, built: dict[str, Any]
) -> dict[str, Any]:
    """Write the manifest of the schedule in ``out`` (the commit point) and read it back."""
    seq_len = int(pools[0].manifest["seq_len"])
    # Block checksums let ``shardyard verify`` name the corrupt byte range.
    files = [verify.file_entry(out, rel) for rel in (POOL_FILE, RECORD_FILE)]
    fp_params = {
        "spec": spec.to_dict(),
        "pools": [p.manifest.get("fingerprint") for p in pools],
        # The pools' bytes (checksums), not only what they were built from.
        "contents": [mf.content_digest(p.manifest) for p in pools],
    }
    counts = built["pool_samples"]
    read, keys = _continued(spec, pools)
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
        "files": files,
    }
    if spec.continues is not None:
        manifest["continues"] = {k: spec.continues[k] for k in ("mixture", "sample")}
    mf.write_manifest(out, manifest)
    return mf.read_manifest(out)


# Stage "mixture" of the unit-of-work protocol, for a service that builds schedules as jobs:
# one unit writes the schedule arrays (one blend over the whole budget, which does not
# split), finalize writes the manifest. The bytes are those of ``build_mixture``.
STAGE = "mixture"
SCHEDULE_UNIT = "schedule"


def plan_mixture(spec: MixtureSpec | Mapping[str, Any], out: str | os.PathLike) -> units.Plan:
    """The plan of a schedule build into ``out`` (a directory or an ``s3://`` prefix); pool
    paths must be absolute (or URLs). Checks the spec itself, not its pools (the unit reads
    them)."""
    if not isinstance(spec, MixtureSpec):
        spec = MixtureSpec.from_dict(spec)
    spec.validate()
    params = {"spec": spec.to_dict()}
    return units.Plan(STAGE, storage.resolve(out), params, [[{"id": SCHEDULE_UNIT}]])


def _run_unit(plan: units.Plan, unit: dict[str, Any]) -> dict[str, Any]:
    return _schedule_write(MixtureSpec.from_dict(plan.params["spec"]), Path(plan.out))


def _finalize(plan: units.Plan, stats: list[dict[str, Any]]) -> dict[str, Any]:
    spec = MixtureSpec.from_dict(plan.params["spec"])
    return _manifest_write(spec, load_pools(spec), Path(plan.out), stats[0])


units.register_stage(STAGE, run_unit=_run_unit, finalize=_finalize)


# --------------------------------------------------------------------------- reading


class Mixture:
    """A built mixture: ``sample(i) -> (pool index, record)`` by memmap, O(1)."""

    def __init__(self, path: str | os.PathLike):
        # A mixture on object storage is read from a checked local copy.
        self.path = Path(storage.local_artifact(path))
        self.manifest = mf.read_manifest(self.path)
        if self.manifest.get("kind") != KIND:
            raise ManifestError(f"{self.path}: not a mixture (kind {self.manifest.get('kind')!r})")
        self.pool_index = np.load(self.path / POOL_FILE, mmap_mode="r")
        self.record_index = np.load(self.path / RECORD_FILE, mmap_mode="r")

    @property
    def num_samples(self) -> int:
        return int(self.manifest["num_samples"])

    @property
    def seq_len(self) -> int:
        return int(self.manifest["seq_len"])

    @property
    def pools(self) -> list[dict[str, Any]]:
        return self.manifest["pools"]

    def __len__(self) -> int:
        return self.num_samples

    def sample(self, i: int) -> tuple[int, int]:
        i = int(i)
        if not 0 <= i < self.num_samples:
            raise IndexError(f"{self.path}: sample {i} out of range [0, {self.num_samples})")
        return int(self.pool_index[i]), int(self.record_index[i])

    def tokens(self, i: int) -> np.ndarray:
        """The seq_len + 1 tokens of sample i, read from its pool."""
        from shardcore.pool import PoolReader

        p, r = self.sample(i)
        return PoolReader(self.pools[p]["path"]).record(r)

    def epoch_starts(self, stop: int | None = None) -> list[dict[str, int]]:
        """Where a pool's epoch starts among samples [0, ``stop``): ``{"pool": index,
        "epoch": e, "sample": s}`` for each e >= 1 (counting, for a continued pool, the
        records the run read before), sample s being the first of the e-th pass over the
        pool's records. One pass over the int16 pool column."""
        stop = self.num_samples if stop is None else min(int(stop), self.num_samples)
        pidx = np.asarray(self.pool_index[:stop])
        out = []
        for i, p in enumerate(self.pools):
            n, before = int(p["num_records"]), int(p.get("first_read", 0))
            where = np.flatnonzero(pidx == i)
            # The j-th sample of the pool here is its (before + j)-th read overall.
            first = (-before) % n
            for j in range(first, where.size, n):
                if before + j > 0:
                    out.append({"pool": i, "epoch": (before + j) // n, "sample": int(where[j])})
        return sorted(out, key=lambda e: (e["sample"], e["pool"]))

    def labels(self, property: str) -> np.ndarray:
        """Per sample: ``"pool"`` its pool key, ``"stage"`` its stage name, else the
        property of its record's main document (``PoolReader.record_labels``)."""
        pidx = np.asarray(self.pool_index)
        if property == "pool":
            keys = np.array([p["key"] for p in self.pools], dtype=object)
            return keys[pidx].astype(str)
        if property == "stage":
            out = np.empty(self.num_samples, dtype=object)
            for st in self.manifest["stages"]:
                out[st["first_sample"] : st["first_sample"] + st["num_samples"]] = st["name"]
            return out.astype(str)
        from shardcore.pool import PoolReader

        rec = np.asarray(self.record_index)
        out = np.empty(self.num_samples, dtype=object)
        for i, p in enumerate(self.pools):
            sel = pidx == i
            out[sel] = PoolReader(p["path"]).record_labels(property)[rec[sel]]
        return out

"""The mixture spec: components, stages, budget and ordering, parsed and checked field by
field."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from shardcore import limits, storage
from shardcore.errors import InputError
from shardcore.mixture import permute
from shardcore.order import ORDERINGS

ORDERS = tuple(ORDERINGS)  # the names of shardcore.order


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
            # Checked (limits.repetitions) as given, so that "-1" reads the same from a
            # spec file, a flag and the builder.
            max_repetitions=data.get("max_repetitions", 4.0),
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
            data = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
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
        self.tokens = limits.tokens("tokens", self.tokens)
        self.seed = limits.seed(self.seed)
        if self.order not in ORDERS:
            raise InputError(f"order: unknown ordering {self.order!r}; known: {list(ORDERS)}")
        if self.max_repetitions != math.inf:  # inf: no cap (the builder's predictions)
            self.max_repetitions = limits.repetitions(self.max_repetitions)
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
    n, "pools": [{"path", "read", "epoch_key": [seed, index], "permutation"}]}``
    (``permutation``: the algorithm of the continued pool's epochs, ``shardcore.mixture.
    permute``; absent in continuations made before it was recorded: ``"numpy"``)."""
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
        if not isinstance(p, Mapping) or not (
            {"path", "read", "epoch_key"} <= set(p) <= {"path", "read", "epoch_key", "permutation"}
        ):
            raise InputError(f"{where}: needs exactly path, read and epoch_key (and permutation)")
        algorithm = p.get("permutation", permute.NUMPY)
        if algorithm not in permute.ALGORITHMS:
            raise InputError(
                f"{where}.permutation: unknown {algorithm!r}; known: {list(permute.ALGORITHMS)}"
            )
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
                **({"permutation": algorithm} if "permutation" in p else {}),
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

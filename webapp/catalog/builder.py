"""The mixture builder's arithmetic: the page's rows -> a shardcore mixture spec -> the
predicted tokens, epochs and warnings per pool (``shardcore.mixture.plan_epochs``).

The page edits a flat table: each row is a pool with a weight, optionally inside a named
group (rows of one stage sharing a group name form a group whose weight is the first row's
``group_weight``), in a stage ("main" or a later stage with its own token count). That is
one level of nesting, which covers "70% prose (80% en, 20% de), 30% code". Pure functions:
pool facts come in as dicts, so tests need no database.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shardcore import limits
from shardcore.errors import InputError
from shardcore.mixture import MixtureSpec, PoolInfo, plan_epochs

MAIN = "main"


class BuilderError(ValueError):
    """The rows do not make a spec; the message says which row and why."""


def spec_from_rows(
    *,
    rows: Sequence[Mapping[str, Any]],
    stages: Sequence[Mapping[str, Any]] = (),
    tokens: int,
    seed: int = 0,
    order: str = "blend",
    max_repetitions: float = 4.0,
    order_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``shardcore.mixture.MixtureSpec`` dict whose pool keys are catalog pool ids.
    ``order_options`` tune the diversity ordering (``{"by": [...], "length_bins",
    "lambda"}``, see ``shardcore.mixture``)."""
    order_options = _order_options(order_options)
    by_stage: dict[str, list[dict]] = {}
    groups: dict[tuple[str, str], dict] = {}
    for i, row in enumerate(rows):
        try:
            pool = int(row["pool"])
        except (KeyError, TypeError, ValueError):
            raise BuilderError(f"row {i + 1}: choose a pool") from None
        weight = _typed(row.get("weight"), f"row {i + 1}: weight", limits.weight)
        stage = str(row.get("stage") or MAIN).strip() or MAIN
        leaf = {"pool": str(pool), "weight": weight}
        group = str(row.get("group") or "").strip()
        comps = by_stage.setdefault(stage, [])
        if not group:
            comps.append(leaf)
            continue
        key = (stage, group)
        if key not in groups:
            gw = _typed(row.get("group_weight") or 1, f"row {i + 1}: group weight", limits.weight)
            groups[key] = {"name": group, "weight": gw, "components": []}
            comps.append(groups[key])
        groups[key]["components"].append(leaf)
    if MAIN not in by_stage:
        raise BuilderError("add at least one pool to the main stage")
    stage_tokens = {str(s["name"]).strip(): s.get("tokens") for s in stages if s.get("name")}
    later = []
    for name in by_stage:
        if name == MAIN:
            continue
        if stage_tokens.get(name) in (None, ""):
            raise BuilderError(f"stage {name!r}: give its token count")
        n = _typed(stage_tokens[name], f"stage {name!r}: tokens", limits.tokens)
        later.append({"name": name, "tokens": n, "components": by_stage[name]})
    return {
        "components": by_stage[MAIN],
        "tokens": int(tokens),
        "seed": int(seed),
        "order": order,
        "max_repetitions": float(max_repetitions),
        "order_options": order_options,
        "stages": later,
    }


def spec_from_draft(draft: Mapping[str, Any]) -> dict[str, Any]:
    """``spec_from_rows`` of a draft as the page and the API send it: ``rows``,
    ``stages``, ``tokens``, ``seed``, ``order``, ``max_repetitions``, ``order_options``."""
    if draft.get("tokens") in (None, ""):
        raise BuilderError("tokens: give the token budget")
    try:
        return spec_from_rows(
            rows=draft.get("rows") or [],
            stages=draft.get("stages") or [],
            tokens=_typed(draft["tokens"], "tokens", limits.tokens),
            seed=_typed(_or(draft.get("seed"), 0), "seed", lambda n, v: limits.seed(v, n)),
            order=str(draft.get("order") or "blend"),
            max_repetitions=_typed(
                _or(draft.get("max_repetitions"), 4),
                "max_repetitions",
                lambda n, v: limits.repetitions(v, n),
            ),
            order_options=draft.get("order_options"),
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, BuilderError):
            raise
        raise BuilderError(str(exc)) from None


def _or(value: Any, default: Any) -> Any:
    """``default`` for a field left empty (None or ""), the value otherwise (0 included)."""
    return default if value is None or value == "" else value


def _typed(value: Any, name: str, check: Callable[[str, Any], Any]) -> Any:
    """A number as typed (``limits.parse``: ``1e6``, ``1_000_000``, ``1M``) checked by the
    library's own range ``check(name, number)``, with its message, as the command line
    does."""
    try:
        return check(name, limits.parse(name, value))
    except InputError as exc:
        raise BuilderError(str(exc)) from None


def _order_options(options: Any) -> dict[str, Any]:
    """The diversity ordering's options, checked here because shardcore reads them only
    when it builds the schedule: ``by`` property names, ``length_bins`` on/off, ``lambda``
    weights per characteristic."""
    if not options:
        return {}
    if not isinstance(options, Mapping):
        raise BuilderError('order options: an object, e.g. {"by": ["language"]}')
    unknown = set(options) - {"by", "length_bins", "lambda"}
    if unknown:
        raise BuilderError(
            f"order options: unknown {sorted(unknown)}; known: by, length_bins, lambda"
        )
    out: dict[str, Any] = {}
    if "by" in options:
        by = options["by"]
        if not isinstance(by, list | tuple) or not all(isinstance(b, str) and b for b in by):
            raise BuilderError("order options: 'by' lists document property names")
        out["by"] = list(by)
    if "length_bins" in options:
        if not isinstance(options["length_bins"], bool):
            raise BuilderError("order options: 'length_bins' is true or false")
        out["length_bins"] = options["length_bins"]
    if "lambda" in options:
        lam = options["lambda"]
        ok = isinstance(lam, Mapping) and all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
            for v in lam.values()
        )
        if not ok:
            raise BuilderError("order options: 'lambda' maps characteristics to weights >= 0")
        out["lambda"] = {str(k): float(v) for k, v in lam.items()}
    return out


def predict(spec: Mapping[str, Any], pools: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Predicted samples, tokens and epochs per pool, repetition warnings, and stage
    composition. ``pools`` maps pool id -> {"name", "num_records", "seq_len", "path"}.
    Returns ``{"error": message}`` when the spec cannot be planned."""
    try:
        # Plan without the cap, then warn: the page shows the numbers that break it.
        parsed = MixtureSpec.from_dict({**spec, "max_repetitions": math.inf})
        infos: list[PoolInfo] = []
        for _, comps in parsed.stage_components():
            for key in _leaf_keys(comps):
                if any(p.key == key for p in infos):
                    continue
                facts = pools.get(int(key))
                if facts is None:
                    raise InputError(f"pool {key}: no such ready pool")
                if int(facts["num_records"]) <= 0:
                    raise InputError(f"pool {facts['name']}: empty pool (0 records)")
                infos.append(
                    PoolInfo(
                        key,
                        facts.get("path", ""),
                        {
                            "num_records": int(facts["num_records"]),
                            "seq_len": int(facts["seq_len"]),
                        },
                    )
                )
        seq_lens = {int(p.manifest["seq_len"]) for p in infos}
        if len(seq_lens) > 1:
            raise InputError(f"pools of one mixture share a seq_len; got {sorted(seq_lens)}")
        plan = plan_epochs(parsed, infos)
    except (InputError, ValueError, OverflowError) as e:
        return {"error": str(e)}
    cap = float(spec.get("max_repetitions", 4.0))
    rows, warnings, over_cap = [], [], []
    for p in plan:
        name = pools[int(p["pool"])]["name"]
        rows.append(
            {**{k: v for k, v in p.items() if k != "path"}, "pool_id": int(p["pool"]), "pool": name}
        )
        if p["epochs"] > cap:
            over_cap.append(name)
            warnings.append(
                f"{name} would be read {p['epochs']:.2f} times, above max_repetitions={cap:g}: "
                "add data, lower its weight or the budget"
            )
        elif p["epochs"] > 1:
            warnings.append(f"{name} repeats: {p['epochs']:.2f} epochs")
    stage_names = [name for name, _ in parsed.stage_components()]
    totals = {s: sum(r["stages"].get(s, 0) for r in rows) for s in stage_names}
    grand = sum(totals.values()) or 1
    positions, acc = [], 0
    for s in stage_names:
        positions.append((acc + totals[s] / 2) / grand)
        acc += totals[s]
    shares = [
        [r["stages"].get(s, 0) / totals[s] if totals[s] else 0.0 for s in stage_names] for r in rows
    ]
    # The stages as the build lays them out: in order, each as long as its samples.
    seq_len = int(next(iter(seq_lens)))
    schedule, first = [], 0
    for s in stage_names:
        schedule.append(
            {
                "name": s,
                "first_token": first * seq_len,
                "num_tokens": totals[s] * seq_len,
                "samples_per_pool": [r["stages"].get(s, 0) for r in rows],
            }
        )
        first += totals[s]
    return {
        "error": None,
        "rows": rows,
        "warnings": warnings,
        "over_cap": over_cap,
        "stages": stage_names,
        "heatmap": (positions, [r["pool"] for r in rows], shares),
        "schedule": schedule,
    }


def _leaf_keys(comps) -> list[str]:
    out = []
    for c in comps:
        if c.pool is not None:
            out.append(c.pool)
        else:
            out += _leaf_keys(c.components)
    return out

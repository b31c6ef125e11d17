"""``shardyard unit run OUT --phase P --units A-B``, ``unit finalize OUT``, ``unit status OUT``:
run units of a build saved in OUT (its ``_plan.json``), finalize it, or say how far it is.

What a Slurm task (``shardcore.executors.slurm``) or anyone else with the artifact's storage
runs: the plan is read from the output and each unit's completion marker is written there,
so no database or broker is needed. Phases are counted from 1, units of a phase from 0 (in
the plan's order); a unit already done is skipped."""

from __future__ import annotations

import argparse
import time

from shardcore import units
from shardcore.cli import CLIError
from shardcore.manifest import is_complete


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(
        name,
        help="run, finalize or inspect the units of a build saved in its output",
        description="Each build saves its plan beside its output (_plan.json) and marks each "
        "finished unit there (_units/); these commands run units of it anywhere that sees "
        "the output, finalize it, or count what is done.",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    r = verbs.add_parser("run", help="run units of one phase (done ones are skipped)")
    r.add_argument("out", metavar="OUT", help="the build's output directory or URL")
    r.add_argument("--phase", type=int, required=True, help="phase, from 1")
    r.add_argument(
        "--units", required=True, metavar="A-B", help="units A to B of the phase (from 0)"
    )
    r.set_defaults(func=run_units)
    f = verbs.add_parser("finalize", help="write the manifest once every unit is done")
    f.add_argument("out", metavar="OUT", help="the build's output directory or URL")
    f.set_defaults(func=finalize)
    s = verbs.add_parser("status", help="units done per phase")
    s.add_argument("out", metavar="OUT", help="the build's output directory or URL")
    s.set_defaults(func=status)


def _plan(out: str) -> units.Plan:
    try:
        return units.load_plan(out)
    except FileNotFoundError:
        raise CLIError(f"{out} holds no saved plan ({units.PLAN_NAME})") from None


def _range(text: str, n: int) -> range:
    first, sep, last = text.partition("-")
    try:
        a, b = int(first), int(last if sep else first)
    except ValueError:
        raise CLIError(f"--units {text!r}: expected A-B (unit indices from 0)") from None
    if not 0 <= a <= b < n:
        raise CLIError(f"--units {text!r}: the phase has units 0-{n - 1}")
    return range(a, b + 1)


def run_units(args: argparse.Namespace) -> int:
    plan = _plan(args.out)
    if not 1 <= args.phase <= len(plan.phases):
        raise CLIError(f"--phase {args.phase}: the plan has phases 1-{len(plan.phases)}")
    phase = plan.phases[args.phase - 1]
    for i in _range(args.units, len(phase)):
        unit = phase[i]
        if units.unit_result(plan.out, unit["id"]) is not None:
            print(f"unit {i} {unit['id']}: done earlier", flush=True)
            continue
        print(f"unit {i} {unit['id']}: started", flush=True)
        start = time.monotonic()
        units.run_unit(plan, unit["id"], unit=unit)
        print(f"unit {i} {unit['id']}: done in {time.monotonic() - start:.1f}s", flush=True)
    return 0


def finalize(args: argparse.Namespace) -> int:
    plan = _plan(args.out)
    if is_complete(plan.out):
        print(f"{plan.out}: finalized earlier", flush=True)
        return 0
    manifest = units.finalize(plan)
    print(f"{plan.out}: finalized ({manifest.get('kind', plan.stage)})", flush=True)
    return 0


def status(args: argparse.Namespace) -> int:
    plan = _plan(args.out)
    for p, phase in enumerate(plan.phases):
        done = sum(units.unit_result(plan.out, u["id"]) is not None for u in phase)
        print(f"phase {p + 1}: {done}/{len(phase)} units done")
    state = "finalized" if is_complete(plan.out) else "not finalized"
    print(f"{plan.stage} -> {plan.out}: {state}")
    return 0

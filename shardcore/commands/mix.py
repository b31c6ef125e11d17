"""``shardyard mix --component POOL:WEIGHT ... --tokens N --out DIR``: build a mixture's
schedule (no data copied) and print the per-pool plan."""

from __future__ import annotations

import argparse
import json
import os

from shardcore import executors
from shardcore.cli import CLIError, check_new_artifact, number_arg


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(
        name,
        help="blend pools by token share into a mixture schedule",
        description="Weights are token shares; small pools repeat with a fresh permutation "
        "per epoch, large ones are read fractionally. The blend is Megatron-exact.",
    )
    p.add_argument(
        "--component",
        action="append",
        default=[],
        metavar="POOL:WEIGHT",
        help="a pool directory and its weight (repeatable)",
    )
    p.add_argument("--tokens", type=number_arg("tokens"), help="token budget (1e9, 1B, ...)")
    p.add_argument("--out", required=True, help="output mixture directory")
    p.add_argument("--seed", type=number_arg("seed"), help="seed (default 0)")
    p.add_argument(
        "--order", choices=["blend", "diversity", "greedy_block", "random"], help="sample order"
    )
    p.add_argument(
        "--order-by",
        action="append",
        metavar="PROPERTY",
        help="diversity: also balance this document property (repeatable); pool and "
        "document-length bins are always balanced",
    )
    p.add_argument("--spec", help="mixture spec file (.json/.yaml); flags override it")
    p.add_argument(
        "--max-repetitions", type=number_arg("max_repetitions"), help="max epochs of any pool"
    )
    p.add_argument(
        "--global-batch-size",
        type=int,
        help="samples per step: round every stage to whole global batches",
    )
    p.add_argument("--plan-only", action="store_true", help="print the plan, build nothing")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    executors.add_arguments(p)
    p.set_defaults(func=run)


def _component(text: str) -> dict:
    pool, sep, weight = text.rpartition(":")
    if not sep or not pool:
        raise CLIError(f"--component {text!r}: expected POOL:WEIGHT")
    try:
        return {"pool": pool, "weight": float(weight)}
    except ValueError:
        raise CLIError(f"--component {text!r}: weight {weight!r} is not a number") from None


def run(args: argparse.Namespace) -> int:

    from shardcore.mixture import MixtureSpec, build_mixture, plan_epochs, plan_mixture

    data = MixtureSpec.from_file(args.spec).to_dict() if args.spec else {}
    base = MixtureSpec.from_file(args.spec).base_dir if args.spec else None
    if args.component:
        data["components"] = [_component(c) for c in args.component]
    for key, value in (
        ("tokens", args.tokens),
        ("seed", args.seed),
        ("order", args.order),
        ("max_repetitions", args.max_repetitions),
        ("global_batch_size", args.global_batch_size),
    ):
        if value is not None:
            data[key] = value
    if args.order_by:
        data.setdefault("order_options", {})["by"] = list(args.order_by)
    if not data.get("components"):
        raise CLIError("give --component POOL:WEIGHT (one or more) or --spec FILE")
    if "tokens" not in data:
        raise CLIError("give --tokens N (the token budget) or a spec with tokens")
    spec = MixtureSpec.from_dict(data, base_dir=base)
    plan = plan_epochs(spec)
    for row in plan:
        print(
            f"{row['pool']}: {row['samples']:,} samples, {row['tokens']:,} tokens, "
            f"{row['epochs']:.3f} epochs, share {row['share']:.4f}"
        )
    if args.plan_only:
        return 0
    executor = executors.from_args(args)
    if executor.name == "local":
        check_new_artifact(args.out)
        manifest = build_mixture(spec, args.out)
    else:
        # The units run elsewhere (another directory): relative pool paths resolve
        # against this one (the base directory is not part of the spec's fingerprint).
        if spec.base_dir is None:
            spec.base_dir = os.getcwd()
        built = executor.run(plan_mixture(spec, args.out))
        if built is None:  # submitted, not waited for
            return 0
        manifest = built
    if args.json:
        print(json.dumps(manifest, indent=1, sort_keys=True))
    else:
        print(
            f"mixture {manifest['fingerprint']}: {manifest['num_samples']:,} samples, "
            f"{manifest['num_tokens']:,} tokens, {len(manifest['stages'])} stage(s) -> {args.out}"
        )
    return 0

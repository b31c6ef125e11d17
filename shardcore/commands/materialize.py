"""``shardyard materialize MIXTURE --out DIR``: write a mixture's samples as physical
IndexedDataset shards in schedule order, for streaming readers."""

from __future__ import annotations

import argparse

from shardcore import executors
from shardcore.cli import check_new_artifact


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="write a mixture as shards in training order")
    p.add_argument("mixture", metavar="MIXTURE", help="mixture directory")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--workers", type=int, default=1, help="local worker processes")
    p.add_argument("--shard-mb", type=int, default=64, help="target shard size in MiB")
    executors.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    from shardcore.materialize import materialize

    executor = executors.from_args(args, workers=args.workers)
    if executor.name == "local":
        check_new_artifact(args.out, args.workers)
    manifest = materialize(
        args.mixture, args.out, shard_bytes=args.shard_mb << 20, executor=executor
    )
    if manifest is None:  # submitted, not waited for
        return 0
    print(
        f"materialized {manifest['num_records']:,} samples in {len(manifest['shards']):,} "
        f"shard(s) -> {args.out}"
    )
    return 0

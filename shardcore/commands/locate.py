"""``shardyard locate POOL --sample K | --tokens T``: where a training position lives."""

from __future__ import annotations

import argparse
import json

from shardcore.cli import CLIError


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(
        name,
        help="map a sample or token position of a pool to shard, record and offset",
        description="Answer by arithmetic and a binary search over the manifest's cumulative "
        "record counts: no scan, at any position.",
    )
    p.add_argument("pool", metavar="POOL", help="pool directory")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--sample", type=int, help="sample (record) index")
    where.add_argument("--tokens", type=int, help="tokens consumed (samples of seq_len tokens)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shardcore.errors import ShardcoreError
    from shardcore.manifest import read_manifest
    from shardcore.resume import locate_pool

    try:
        manifest = read_manifest(args.pool)
        if manifest.get("kind") != "pool":
            raise CLIError(f"{args.pool} is not a pool (kind {manifest.get('kind')!r})")
        answer = locate_pool(manifest, sample=args.sample, tokens=args.tokens)
    except ShardcoreError as exc:
        raise CLIError(str(exc)) from None
    if args.json:
        print(json.dumps(answer))
    else:
        print(
            f"shard {answer['shard']} ({answer['shard_prefix']}), record {answer['record']} "
            f"(record {answer['record_in_shard']} of the shard), token offset {answer['token_offset']}"
        )
    return 0

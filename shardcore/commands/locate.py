"""``shardyard locate DIR --sample K | --tokens T``: where a training position lives, in a
pool, a mixture (stage, pool, shard, record, offset) or a materialized mixture."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(
        name,
        help="map a sample or token position of a pool or mixture to shard, record and offset",
        description="Answer by arithmetic and a binary search over the manifest's cumulative "
        "record counts: no scan, at any position.",
    )
    p.add_argument("pool", metavar="DIR", help="pool, mixture or materialized mixture directory")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--sample", type=int, help="sample (record) index")
    where.add_argument("--tokens", type=int, help="tokens consumed (samples of seq_len tokens)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    from shardcore.locate import locate_any

    answer = locate_any(args.pool, sample=args.sample, tokens=args.tokens)
    if args.json:
        print(json.dumps(answer, default=str))
        return 0
    if "stage" in answer:
        print(f"stage {answer['stage']}, pool {answer['pool']} ({answer.get('pool_path', '')})")
    print(
        f"shard {answer['shard']} ({answer['shard_prefix']}), record {answer['record']:,} "
        f"(record {answer['record_in_shard']:,} of the shard), token offset "
        f"{answer['token_offset']:,}"
    )
    return 0

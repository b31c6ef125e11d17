"""``shardyard decon``: decontamination against benchmarks.

``shardyard decon compile SPEC --out DIR`` compiles a benchmark spec (its items'
normalized n-grams, ``shardcore.decon.index``) once into a directory that the ``decon``
annotator reads (``--param benchmarks=DIR``) and prints each benchmark's items and those
skipped as too short. ``shardyard decon report`` asks a Shardyard server which documents,
pools, mixture versions and runs hold a benchmark's items (and each run's first step
reading one), or which items a run could have seen."""

from __future__ import annotations

import argparse
import json
import os
from urllib.parse import quote

from shardcore.cli import CLIError
from shardcore.client import ShardyardClient, ShardyardError
from shardcore.decon.index import compile_index, save_index


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(
        name,
        help="decontamination: compile a benchmark index, report what holds benchmark items",
        description="Compile benchmark items into an index the decon annotator reads, or ask "
        "a Shardyard server which documents, pools, versions and runs hold them.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = actions.add_parser("compile", help="compile a benchmark spec into an index directory")
    c.add_argument("spec", metavar="SPEC", help="benchmark spec (JSON), local or s3://")
    c.add_argument("--out", required=True, help="directory of the compiled index")
    c.add_argument("--ngram", type=int, default=13, help="words per n-gram (default 13)")
    c.add_argument(
        "--min-words", type=int, default=8, help="items of fewer words are skipped (default 8)"
    )
    c.add_argument("--json", action="store_true", help="print the index description as JSON")
    c.set_defaults(func=run_compile)
    r = actions.add_parser(
        "report",
        help="what holds a benchmark's items (documents, pools, versions, runs and their "
        "first step), or which items a run could have seen",
    )
    what = r.add_mutually_exclusive_group(required=True)
    what.add_argument("--benchmark", help="a benchmark's name")
    what.add_argument("--run", type=int, help="a training run's id")
    r.add_argument("--item", help="one item of --benchmark (its id)")
    r.add_argument(
        "--server",
        default=os.environ.get("SHARDYARD_URL", "http://127.0.0.1:8000"),
        help="the Shardyard server (default $SHARDYARD_URL or http://127.0.0.1:8000)",
    )
    r.add_argument(
        "--token",
        default=os.environ.get("SHARDYARD_TOKEN", ""),
        help="an API token (default $SHARDYARD_TOKEN)",
    )
    r.add_argument("--json", action="store_true", help="print the server's answer as JSON")
    r.set_defaults(func=run_report)


def run_compile(args: argparse.Namespace) -> int:
    index = compile_index(args.spec, ngram=args.ngram, min_words=args.min_words)
    save_index(index, args.out)
    desc = index.describe()
    if args.json:
        print(json.dumps(desc))
        return 0
    for b in desc["benchmarks"]:
        skipped = ""
        if b["skipped"]:
            skipped = f", {b['skipped']} skipped as shorter than {index.min_words} words"
            skipped += f" ({', '.join(b['skipped_ids'][:5])}{', ...' if b['skipped'] > 5 else ''})"
        print(f"{b['name']}: {b['items']} items, {b['indexed']} indexed{skipped}")
    print(
        f"{args.out}: {desc['items']} items, {desc['ngrams']:,} distinct {index.ngram}-grams, "
        f"{index.nbytes():,} bytes in memory, fingerprint {index.fingerprint}"
    )
    return 0


def run_report(args: argparse.Namespace) -> int:
    if args.item and not args.benchmark:
        raise CLIError("--item names an item of --benchmark")
    client = ShardyardClient(args.server, token=args.token, retries=1)
    try:
        if args.run is not None:
            answer = client.request("GET", f"/api/decon/runs/{args.run}/")
        else:
            path = f"/api/decon/benchmarks/{args.benchmark}/"
            if args.item:
                path += f"?item={quote(args.item)}"
            answer = client.request("GET", path)
    except ShardyardError as exc:
        raise CLIError(str(exc)) from None
    if args.json:
        print(json.dumps(answer))
        return 0
    if args.run is not None:
        _print_run(answer)
    else:
        _print_benchmark(answer)
    return 0


def _print_benchmark(a: dict) -> None:
    item = f" item {a['item']}" if a.get("item") else ""
    print(f"benchmark {a['benchmark']}{item}: {_count(a['documents'])} overlapping documents")
    for s in a.get("sources", []):
        flag = f", flag {s['flag']}" if s.get("flag") else ", not flagged"
        print(
            f"  source {s['source']}: {_count(s['documents'])} documents "
            f"(annotation {s['annotation']}{flag})"
        )
    for kind in ("pools", "versions"):
        for row in a.get(kind, []):
            print(f"  {kind[:-1]} {row['label']}: {row['documents']:,} documents")
    for run in a.get("runs", []):
        print(f"  run {run['name']} (#{run['id']}): {run['first_read']}")
    if not a.get("flagged"):
        print("  not flagged: flag them to find the pools, versions and runs holding them")
    elif not a.get("runs"):
        print("  no run read any of them" if a.get("complete", True) else "  still computing")


def _count(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def _print_run(a: dict) -> None:
    print(f"run {a['run']['name']} (#{a['run']['id']}) could have seen:")
    if not a["benchmarks"]:
        print("  no benchmark item")
    for b in a["benchmarks"]:
        ids = ", ".join(b["items"][:20]) + (", ..." if len(b["items"]) > 20 else "")
        print(f"  {b['benchmark']}: {b['count']} items ({ids}); first read {b['first_read']}")

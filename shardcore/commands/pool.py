"""``shardyard pool TOKENIZED... --out DIR --seq-len L``: build a training-ready pool."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import TYPE_CHECKING, Any

from shardcore import executors, storage
from shardcore.cli import CLIError, check_new_artifact, number_arg, size_arg
from shardcore.errors import EmptySelectionError
from shardcore.limits import MAX_VAL_FRACTION

if TYPE_CHECKING:
    from shardcore.units import Plan


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(
        name,
        help="select, globally shuffle, pack and shard tokenized sources into a pool",
        description="Select documents of tokenized sources with a filter, hold out a "
        "validation slice, shuffle them globally at document level within a memory budget, "
        "pack them into records of seq_len+1 tokens and write IndexedDataset shards.",
    )
    p.add_argument("tokenized", nargs="+", metavar="TOKENIZED", help="tokenized source directories")
    p.add_argument("--out", required=True, help="output directory (must not hold a result)")
    p.add_argument(
        "--seq-len", type=number_arg("seq_len"), required=True, help="tokens per training sample"
    )
    p.add_argument(
        "--filter", help="DuckDB expression over document properties, e.g. \"lang = 'de'\""
    )
    p.add_argument(
        "--shuffle",
        choices=("exact", "grid", "local", "buffer"),
        default="exact",
        help="exact (default) is a uniform global shuffle; the others are baselines",
    )
    p.add_argument("--seed", type=number_arg("seed"), default=0, help="shuffle seed (default 0)")
    p.add_argument(
        "--memory", type=size_arg, default=1 << 30, help="memory budget per worker (default 1GiB)"
    )
    p.add_argument(
        "--val-fraction",
        type=number_arg("val_fraction"),
        default=0.0,
        help=f"share of documents held out for validation, at most {MAX_VAL_FRACTION}",
    )
    p.add_argument(
        "--shard-size", type=size_arg, default=64 << 20, help="target shard size (default 64MiB)"
    )
    p.add_argument(
        "--bos", action="store_true", help="prepend the tokenizer's BOS to every document"
    )
    p.add_argument("--grid-columns", type=int, help="grid shuffle: number of columns")
    p.add_argument("--buffer", type=int, help="buffer shuffle: buffer size in documents")
    p.add_argument(
        "--staging",
        choices=("auto", "references", "tokens"),
        default="auto",
        help="what pass 1 writes for pass 2: references (a few bytes per document; pass 2 "
        "reads the tokens from the inputs), tokens (a copy grouped by bucket, read "
        "sequentially; for inputs where random reads are slow) or auto (default: references "
        "unless an input is on a network or FUSE file system). Same pool bytes either way",
    )
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="build the pool even if the filter selects no document (an error otherwise)",
    )
    p.add_argument(
        "--annotation",
        action="append",
        default=[],
        metavar="DIR",
        help="an annotation of an input to join: its columns read as <annotator>.<column> "
        "in --filter and in the pool's documents (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print the manifest's totals as JSON")
    executors.add_arguments(p)
    p.set_defaults(func=run)


# Inputs of more documents than this are planned by units (``shardcore.pool.select``) when
# the build runs in local processes with several workers: about 1.4 us of CPU per document
# with a filter (13 CPU-s per 10^7, bench/scale/README.md) spread over the workers instead
# of one process.
SPLIT_DOCUMENTS = 10_000_000


def _plan(args: argparse.Namespace, out: str, *, local: bool, **kwargs: Any) -> Plan:
    """The pool's plan: made here, or by the planning units on the build's workers when it
    runs in local processes (``--workers`` above 1, a local ``--out``) over more than
    ``SPLIT_DOCUMENTS`` documents."""
    from shardcore import planning, units
    from shardcore.pool import plan_pool, select

    tokenized = [storage.resolve(p) for p in args.tokenized]
    split = local and args.workers > 1 and not storage.is_remote(out)
    if split:
        documents = sum(_documents(select.load_tokenized(p)) for p in tokenized)
        split = documents > SPLIT_DOCUMENTS
    if not split:
        return plan_pool(args.tokenized, out, **kwargs)
    # Planned from scratch: an earlier planning into this output may have read other
    # arguments (its units' files are reused only within one planning).
    shutil.rmtree(os.path.join(out, planning.DIR), ignore_errors=True)
    prepare = select.deferred(
        kwargs={"tokenized": tokenized, "out": out, **kwargs}, out=out, what=f"planning {out}"
    )
    units.run_local(prepare, workers=args.workers)
    return units.load_plan(out)


def _documents(tokenized: dict[str, Any]) -> int:
    """A tokenized source's documents (its totals; the shards' sum in manifests without)."""
    from shardcore import manifest as mf

    if "totals" in tokenized:
        return int(tokenized["totals"]["documents"])
    return int(mf.shard_column(tokenized, "documents").sum())


def run(args: argparse.Namespace) -> int:

    import numpy as np

    from shardcore.pool import SPLITS
    from shardcore.progress import Progress

    out = storage.resolve(args.out)
    executor = executors.from_args(args, workers=args.workers)
    if executor.name == "local":
        check_new_artifact(out, args.workers)
    options = {}
    if args.grid_columns is not None:
        options["columns"] = args.grid_columns
    if args.buffer is not None:
        options["buffer"] = args.buffer
    try:
        plan = _plan(
            args,
            str(out),
            local=executor.name == "local",
            seq_len=args.seq_len,
            filter=args.filter,
            shuffle=args.shuffle,
            seed=args.seed,
            memory=args.memory,
            val_fraction=args.val_fraction,
            bos=args.bos,
            shard_size=args.shard_size,
            shuffle_options=options,
            staging=args.staging,
            allow_empty=args.allow_empty,
            annotations=args.annotation,
        )
        itemsize = np.dtype(plan.meta["dtype"]).itemsize
        selected = sum(plan.meta["splits"][s]["tokens"] for s in SPLITS) * itemsize
        progress = Progress(2 * selected, label="pool", enabled=not args.quiet)

        def on_unit_done(unit: dict, stats: dict) -> None:
            # Each token is read and written twice (pass 1, pass 2): progress counts both.
            nbytes = int(stats.get("tokens", stats.get("selected_tokens", 0))) * itemsize
            if "group" in unit or "level" in unit:
                return  # the merge (its last level, the levels below it) moves metadata only
            if "input" in unit:
                progress.update(nbytes=nbytes)
            else:
                progress.update(documents=stats["documents"], tokens=stats["tokens"], nbytes=nbytes)

        manifest = executor.run(plan, on_unit_done=on_unit_done)
        progress.close()
    except EmptySelectionError as exc:
        raise CLIError(f"{exc}; pass --allow-empty to build an empty pool") from None
    if manifest is None:  # submitted, not waited for
        return 0
    totals = {
        "pool": str(out),
        "fingerprint": manifest["fingerprint"],
        "documents": manifest["documents"],
        "records": manifest["num_records"],
        "tokens": manifest["num_tokens"],
        "padding_tokens": manifest["padding_tokens"],
        "shards": len(manifest["shards"]),
        "buckets": manifest["shuffle"]["num_buckets"],
        "val": manifest.get("val"),
        # What "auto" chose; not in the manifest (either staging writes the same bytes).
        "staging": plan.meta["staging"],
    }
    if args.json:
        print(json.dumps(totals, indent=1))
    else:
        waste = totals["padding_tokens"] / max(1, totals["records"] * (args.seq_len + 1))
        print(
            f"{out}: {totals['records']:,} records of {args.seq_len + 1:,} tokens from "
            f"{totals['documents']:,} documents in {totals['shards']:,} shards "
            f"(padding {waste:.3%})"
            + (
                f"; validation: {totals['val']['num_records']:,} records in {storage.join(out, 'val')}"
                if totals["val"]
                else ""
            ),
            file=sys.stdout,
        )
    return 0

"""``shardyard annotate TOKENIZED --annotator NAME [--param k=v] --out DIR``: per-document
columns computed from a tokenized source's text, written as an annotation artifact
(shardcore.annotate.artifact); a rerun into the same directory completes a partial build.
Several tokenized sources with ``--annotator minhash``: near-duplicate clusters across
them (shardcore.annotate.neardup), one annotation per source under ``DIR/sources/<i>``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from shardcore import annotate as registry
from shardcore import executors
from shardcore.annotate.artifact import annotate
from shardcore.annotate.neardup import dedup_group, plan_group
from shardcore.annotate.stage import plan_annotation
from shardcore.cli import CLIError


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(
        name,
        help="compute per-document columns (language, quality, duplicates...) of a tokenized source",
        description="Write an annotation: one Parquet file per tokenized shard, aligned with "
        "its documents, read from the source files (or decoded tokens), manifest last.",
    )
    p.add_argument(
        "tokenized",
        metavar="TOKENIZED",
        nargs="+",
        help="tokenized source directory (several, in priority order, for minhash across them)",
    )
    p.add_argument(
        "--annotator",
        required=True,
        help="quality, pii, lang_id, minhash, topics, decon, or one registered under the entry-point "
        "group shardyard.annotators (an unknown name lists them)",
    )
    p.add_argument(
        "--param", action="append", default=[], metavar="K=V", help="annotator parameter"
    )
    p.add_argument("--out", required=True, help="output directory of the annotation")
    p.add_argument(
        "--text-from",
        choices=("auto", "source", "tokens"),
        default="auto",
        help="read text from the source files, decode the tokens, or auto (default)",
    )
    p.add_argument("--workers", type=int, default=1, help="processes running shards at once")
    p.add_argument("--batch-size", type=int, default=1024, help="documents per annotate call")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    executors.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    if args.workers < 1:
        raise CLIError("--workers must be at least 1")
    if args.batch_size < 1:
        raise CLIError("--batch-size must be at least 1")
    cls = registry.get(args.annotator)
    params = registry.parse_params(cls, args.param)
    executor = executors.from_args(args, workers=args.workers)
    if len(args.tokenized) > 1:
        return _group(args, params, executor)

    def progress(r: dict) -> None:
        if not args.json:
            state = "skipped (done)" if r["skipped"] else f"from {r['text_from']}"
            print(f"shard {r['shard']}: {r['documents']:,} documents {state}", flush=True)

    if executor.name == "local" and not _as_units(args.annotator):
        m = annotate(
            args.tokenized[0],
            args.out,
            args.annotator,
            params,
            batch_size=args.batch_size,
            text_from=args.text_from,
            workers=args.workers,
            progress=progress,
        )
    else:  # one unit per shard (then minhash's clusters as units), here or on the cluster
        plan = plan_annotation(
            args.tokenized[0],
            args.out,
            annotator=args.annotator,
            params=params,
            text_from=args.text_from,
            batch_size=args.batch_size,
        )
        built = executor.run(plan, on_unit_done=_unit_progress(args, plan))
        if built is None:  # submitted, not waited for
            return 0
        m = built
    if args.json:
        print(json.dumps(m, default=_plain))
        return 0
    t = m["totals"]
    print(
        f"{args.out}: {m['annotator']['name']} v{m['annotator']['version']}, "
        f"{t['documents']:,} documents, {t['bytes']:,} bytes "
        f"({t['bytes_per_document']} bytes per document), fingerprint {m['fingerprint']}"
    )
    return 0


def _as_units(annotator: str) -> bool:
    """minhash runs as the stage's units here too: its clusters then go by ranges of
    documents (``shardcore.annotate.dedup_units``), never every document in one process."""
    return annotator == "minhash"


def _unit_progress(args: argparse.Namespace, plan: Any) -> executors.OnUnitDone | None:
    """A line per finished shard, and one per finished phase of the clusters' units (a
    round over thousands of ranges is one line); none with --json."""
    if args.json:
        return None
    phase_of = {u["id"]: k for k, phase in enumerate(plan.phases) for u in phase}
    left = [len(phase) for phase in plan.phases]

    def done(unit: dict[str, Any], stats: dict[str, Any]) -> None:
        k = phase_of.get(unit["id"])
        if "shard" in unit and "documents" in stats:
            print(f"shard {unit['shard']}: {stats['documents']:,} documents", flush=True)
        if k is None:
            return
        left[k] -= 1
        if left[k] == 0 and k > 0:
            kind = unit["id"].rsplit("-", 1)[0] if "part" in unit else unit["id"].split("-")[0]
            n = len(plan.phases[k])
            print(f"clusters: {kind} done ({n:,} unit{'' if n == 1 else 's'})", flush=True)

    return done


def _group(args: argparse.Namespace, params: dict[str, Any], executor: executors.Executor) -> int:

    if args.annotator != "minhash":
        raise CLIError(
            f"--annotator {args.annotator} reads one tokenized source; only minhash "
            f"clusters across several ({len(args.tokenized)} given)"
        )
    if executor.name == "local":
        m = dedup_group(args.tokenized, args.out, params, workers=args.workers)
    else:
        built = executor.run(plan_group(args.tokenized, args.out, params))
        if built is None:  # submitted, not waited for
            return 0
        m = built
    if args.json:
        print(json.dumps(m, default=_plain))
        return 0
    t = m["totals"]
    for s in m["sources"]:
        print(f"{s['path']}: {s['documents']:,} documents -> {args.out}/{s['annotation']}")
    print(
        f"{args.out}: near-duplicates across {len(m['sources'])} sources, "
        f"{t['documents']:,} documents, {t['clustered_documents']:,} in a duplicate "
        f"cluster, fingerprint {m['fingerprint']}"
    )
    return 0


def _plain(value: Any) -> Any:
    """JSON for what a manifest reads lazily: its table's views as lists, numpy scalars as
    numbers."""
    if isinstance(value, Sequence):
        return list(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")

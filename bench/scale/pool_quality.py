"""Peak memory and CPU of a pool's quality measurement (the pool recorder's ``_measure``:
``shardcore.pool.quality.pool_quality`` on the first 2^16 records; with ``--by recipe`` its
recipe measurement, ``recipe_measure``, on the first 200,000), each in a fresh process
(VmHWM minus the RSS before the call; user + system CPU of the call), at pool sizes 10x
apart, with the growth fitted. Not a test.

    PYTHONPATH=$PWD .venv/bin/python bench/scale/pool_quality.py \
        [--docs 1000000,10000000,100000000] [--by ,length] [--before REV --before-docs ...]

The pools are synthetic and hold what the measurement reads: a manifest of partitioned
shards (documents table: the shards' sidecars), each shard's documents sidecar (source,
input shard, row, tokens), and the segments of the shards holding the first 200,000 records.
Documents: two sources, input shards of 100,000 documents (the second source's rows with
one in ten missing, as a validation slice leaves them), 100-999 tokens, in a pseudo-random
order (an affine permutation of the input order), packed into records of 2,048 tokens.
``--before REV`` also measures the code of commit ``REV`` (``git archive``) on the same
pools.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale.common import fit_power, machine  # noqa: E402

SEQ_LEN = 2047
INPUT_DOCS = 100_000
SHARD_DOCS = 1 << 16
# Segments for the records the measurements read: the quality report's first 2^16, the
# recipe's first 200,000 (webapp.catalog.services.recipe.RECIPE_RECORDS).
SEGMENT_RECORDS = 200_000

STEP = r"""
import json, os, resource, sys, time
sys.path.insert(0, {root!r})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
os.environ.setdefault("DEBUG", "1")  # no production SECRET_KEY needed to measure
import django
django.setup()
from webapp.catalog.measures import pools
from webapp.catalog.services.recipe import recipe_measure

def vm(name):
    for line in open("/proc/self/status"):
        if line.startswith(name):
            return int(line.split()[1]) * 1024

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

before, c0, t0 = vm("VmRSS"), cpu(), time.perf_counter()
if {by!r} == "recipe":
    report = recipe_measure(path={path!r})
    report = {{"label": "recipe", "error": report.get("error")}}
else:
    report = pools._measure({path!r}, by={by!r})
print(json.dumps({{"peak": vm("VmHWM") - before, "cpu": cpu() - c0,
                   "wall": time.perf_counter() - t0, "label": report.get("label"),
                   "error": report.get("error")}}))
"""


def _input_of(q: np.ndarray, groups: int) -> dict[str, np.ndarray]:
    """The (source, input shard, row) of input positions ``q``: the first half of the
    input shards are source 0's, the rest source 1's (one row in ten missing)."""
    g, rank = q // INPUT_DOCS, q % INPUT_DOCS
    half = groups // 2
    source = (g >= half).astype(np.int32)
    return {
        "source": source,
        "source_shard": np.where(source == 0, g, g - half).astype(np.int32),
        "source_row": np.where(source == 0, rank, rank + rank // 9).astype(np.int64),
        "n_tokens": (100 + (q * 2654435761) % 900).astype(np.int32),
    }


def _multiplier(docs: int) -> int:
    a = 40_503 * 65_537  # odd: a step of 2 keeps it odd
    while math.gcd(a, docs) != 1:
        a += 2
    return a % docs or 1


def build(work: Path, docs: int) -> Path:
    """The synthetic pool of ``docs`` documents (kept in ``work`` for the next run)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardcore import manifest as mf
    from shardcore import pack

    out = work / f"pool-{docs}"
    if (out / "manifest.json").exists():
        return _with_segments(out)
    shutil.rmtree(out, ignore_errors=True)
    groups = -(-docs // INPUT_DOCS)
    a = _multiplier(docs)
    shards, cumulative, width = [], [0], SEQ_LEN + 1
    for k, first in enumerate(range(0, docs, SHARD_DOCS)):
        pool_doc = np.arange(first, min(docs, first + SHARD_DOCS), dtype=np.int64)
        cols = _input_of((pool_doc * a + 12_345) % docs, groups)
        prefix = f"shards/{k // 1000:04d}/pool-{k:07d}"
        (out / prefix).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(cols), out / f"{prefix}.docs.parquet")
        tokens = int(cols["n_tokens"].sum())
        records = -(-tokens // width)
        if cumulative[-1] <= SEGMENT_RECORDS:  # the records measured: their segments
            packing = pack.plan_packing(cols["n_tokens"], SEQ_LEN)
            pack.save_segments(out / f"{prefix}.segments.npz", packing.segments)
            records = packing.segments.num_records  # ceil(tokens / width), as estimated
        shards.append(
            {
                "prefix": prefix,
                "records": records,
                "documents": int(pool_doc.size),
                "first_document": first,
                "first_record": cumulative[-1],
                "tokens": tokens,
                "padding": records * width - tokens,
            }
        )
        cumulative.append(cumulative[-1] + records)
    manifest = {
        "kind": "pool",
        "split": "train",
        "fingerprint": f"bench-pool-quality-{docs}",
        "sources": [{"path": f"/bench/source-{s}", "fingerprint": f"source-{s}"} for s in range(2)],
        "params": {"bos": False, "seq_len": SEQ_LEN},
        "seq_len": SEQ_LEN,
        "record_tokens": width,
        "dtype": "uint16",
        "num_records": cumulative[-1],
        "documents": docs,
        "documents_table": "shards",
        "shards": shards,
        "cumulative_records": cumulative,
        "files": [],
    }
    mf.write_manifest(out, manifest)
    return out


def _with_segments(out: Path) -> Path:
    """A pool built before ``SEGMENT_RECORDS`` grew: the segments it lacks, written."""
    import pyarrow.parquet as pq

    from shardcore import manifest as mf
    from shardcore import pack

    manifest = mf.read_manifest(out)
    for k, first in enumerate(mf.shard_column(manifest, "first_record").tolist()):
        prefix = mf.shard_prefix(manifest, k)
        if first > SEGMENT_RECORDS:
            break
        if not (out / f"{prefix}.segments.npz").exists():
            lengths = pq.read_table(out / f"{prefix}.docs.parquet", columns=["n_tokens"])
            packing = pack.plan_packing(lengths.column(0).to_numpy(), SEQ_LEN)
            pack.save_segments(out / f"{prefix}.segments.npz", packing.segments)
    return out


def measure(path: Path, by: str, root: str = str(ROOT)) -> dict:
    code = STEP.format(root=root, path=str(path), by=by)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(res.stderr[-3000:])
    return json.loads(res.stdout.splitlines()[-1])


def _before(rev: str, work: Path) -> str:
    """The code of commit ``rev`` (shardcore, webapp, workers), as a directory to run."""
    tree = work / f"tree-{rev}"
    if not tree.exists():
        tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, "shardcore", "webapp", "workers"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return str(tree)


def _row(name: str, docs: int, by: str, got: dict) -> dict:
    row = {
        "code": name,
        "docs": docs,
        "by": by or "(default)",
        "label": got["label"],
        "peak_MB": round(got["peak"] / 2**20, 1),
        "cpu_s": round(got["cpu"], 2),
        "wall_s": round(got["wall"], 2),
        "load": round(os.getloadavg()[0], 2),
        **({"error": got["error"]} if got.get("error") else {}),
    }
    print(json.dumps(row), flush=True)
    return row


def _fits(rows: list[dict]) -> None:
    for code in sorted({r["code"] for r in rows}):
        for by in sorted({r["by"] for r in rows}):
            sel = [r for r in rows if r["code"] == code and r["by"] == by]
            if len(sel) < 2:
                continue
            sizes = [r["docs"] for r in sel]
            for key, unit in (("peak_MB", 2**20), ("cpu_s", 1e9)):
                fit = fit_power(sizes, [r[key] for r in sel])
                # Beside the power law (a fixed cost flattens its slope): the cost each
                # document adds between the smallest and the largest pool.
                per_doc = (sel[-1][key] - sel[0][key]) * unit / (sizes[-1] - sizes[0])
                print(
                    f"{code} by {by}: {key} ~ docs^{fit.slope:.2f}; at 1e9 docs "
                    f"{fit.at(1e9):,.1f}, at 1e10 {fit.at(1e10):,.1f}; per document "
                    f"{per_doc:,.2f} {'bytes' if key == 'peak_MB' else 'ns of CPU'}"
                )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", default="1000000,10000000")
    ap.add_argument(
        "--by",
        default=",length",
        help="labellings, comma-separated ('': default; 'recipe': the recipe measurement)",
    )
    ap.add_argument("--before", default="", help="also measure this commit's measurement")
    ap.add_argument("--before-docs", default="1000000,10000000")
    ap.add_argument("--workdir", default="/tmp/shardyard-bench-pool-quality")
    ap.add_argument("--fresh", action="store_true")
    args = ap.parse_args()
    work = Path(args.workdir)
    if args.fresh:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    print(machine())
    codes = [("now", str(ROOT), [int(float(x)) for x in args.docs.split(",")])]
    if args.before:
        sizes = [int(float(x)) for x in args.before_docs.split(",")]
        codes.append((args.before, _before(args.before, work), sizes))
    rows = []
    for docs in sorted({d for _, _, sizes in codes for d in sizes}):
        path = build(work, docs)
        for name, tree, sizes in codes:
            if docs in sizes:
                for by in args.by.split(","):
                    rows.append(_row(name, docs, by, measure(path, by, tree)))
    _fits(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

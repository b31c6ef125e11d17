"""Benchmark: a pool read from an S3-compatible server (moto's, on this machine) through
Shardyard's streaming loader, with a cold and a warm cache, side by side with
mosaicml-streaming reading the same records (written in its MDS format) through its own S3
path from the same server. Every sample of both is hashed in order: the digests must be
equal. Not a test.

    .venv/bin/python bench/loader/stream.py [--text-mb 20] [--out /tmp/shardyard-bench-stream]

mosaicml-streaming 0.13 pins numpy<2.2 and more; it runs in a virtual environment of its
own, bench/.venv-streaming (created on first use by ``loaders.ensure_venv``: the package
without its dependencies, then only what its reader imports; this environment's torch is
seen through a .pth file), never in the project's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from shardcore.storage import artifact_cache

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.loader.peer_streaming import read_all  # noqa: E402


def ensure_peer_venv() -> Path:
    """mosaicml-streaming's environment, shared with bench/loader/loaders.py."""
    from bench.loader.loaders import ensure_venv

    return ensure_venv("streaming")


def build_pool(out: Path, text_mb: int, seq_len: int, shard_size: int) -> Path:
    from shardcore.demo import build_demo_corpus
    from shardcore.pool import build_pool as pool
    from shardcore.tokenize import tokenize

    target = out / "pool"
    if (target / "manifest.json").exists():
        return target
    corpus = build_demo_corpus(out / "corpus", max_bytes_per_source=text_mb << 20)
    toks = []
    for name in sorted(corpus):  # the four demo sources: module code, tests, docs, reference
        tok = out / "tok" / name
        if not (tok / "manifest.json").exists():
            shutil.rmtree(tok, ignore_errors=True)
            tokenize([str(corpus[name])], str(tok), workers=2)
        toks.append(str(tok))
    pool(toks, str(target), seq_len=seq_len, shard_size=shard_size, workers=2)
    return target


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"moto_server did not start on port {port}") from None
            time.sleep(0.1)


def read_ours(url: str, cache: Path, cache_limit: int) -> dict:
    from shardcore.loader import ShardyardIterableDataset

    t = time.perf_counter()
    dataset = ShardyardIterableDataset(url, cache_dir=cache, cache_limit=cache_limit, prefetch=2)
    return read_all((sample["tokens"].numpy() for sample in dataset), t)


def read_peer(python: Path, env: dict, url: str, cache: Path, cache_limit: int) -> dict:
    done = subprocess.run(
        [str(python), str(HERE / "peer_streaming.py"), "read", url, str(cache), str(cache_limit)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"mosaicml-streaming failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/shardyard-bench-stream")
    ap.add_argument("--text-mb", type=int, default=20, help="most MiB of text per source")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--shard-size", type=int, default=1 << 20, help="bytes per pool shard")
    ap.add_argument("--cache-limit", type=int, default=64 << 20, help="bytes, both loaders")
    ap.add_argument(
        "--bounded",
        type=float,
        default=0.4,
        help="a third pass, cold, with the cache limited to this share of the pool",
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measure (median)")
    ap.add_argument("--results", default=str(HERE / "results.md"))
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    python = ensure_peer_venv()
    # Imported before any clock starts, as the peer's process imports it before its own.
    import torch  # noqa: F401

    pool = build_pool(out, args.text_mb, args.seq_len, args.shard_size)
    from shardcore import manifest as mf
    from shardcore.loader import Samples

    manifest = mf.read_manifest(pool)
    moto, endpoint = start_moto()
    try:
        env = dict(os.environ)
        env.update(
            AWS_ENDPOINT_URL=endpoint, S3_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
        )  # fmt: skip
        os.environ.update(env)
        import boto3

        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
        artifact_cache.publish_directory(pool, "s3://bench/pool")

        # The same records, in sample order, as MDS shards of about the same size.
        samples = Samples(str(pool))
        records = np.stack([np.asarray(samples[i], dtype=np.int32) for i in range(len(samples))])
        np.save(out / "records.npy", records)
        mds_local = out / "mds"
        shutil.rmtree(mds_local, ignore_errors=True)
        wrote = subprocess.run(
            [str(python), str(HERE / "peer_streaming.py"), "write", str(out / "records.npy"),
             str(mds_local), "s3://bench/mds", str(args.shard_size)],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if wrote.returncode != 0:
            raise SystemExit(f"MDS write failed:\n{wrote.stderr[-4000:]}")

        pool_bytes = sum(f["size"] for f in manifest["files"])
        # At least what the loader keeps open: the current shard, the last, 2 prefetched.
        largest = max(f["size"] for f in manifest["files"] if f["path"].endswith(".bin"))
        bounded = max(int(pool_bytes * args.bounded), 5 * largest)
        states = {"cold": args.cache_limit, "warm": args.cache_limit, "bounded": bounded}
        runs: dict[str, list[dict]] = {f"{w}-{s}": [] for w in ("ours", "peer") for s in states}
        for r in range(args.repeat):
            for who in ("ours", "peer"):
                cache = out / f"cache-{who}-{r}"
                shutil.rmtree(cache, ignore_errors=True)
                for state, limit in states.items():
                    if state == "bounded":
                        cache = out / f"cache-{who}-{r}-bounded"
                        shutil.rmtree(cache, ignore_errors=True)
                    if who == "ours":
                        res = read_ours("s3://bench/pool", cache, limit)
                    else:
                        res = read_peer(python, env, "s3://bench/mds", cache, limit)
                    res["cache_bytes"] = dir_bytes(cache)
                    runs[f"{who}-{state}"].append(res)
    finally:
        moto.terminate()
        moto.wait(timeout=10)

    digests = {res["digest"] for rs in runs.values() for res in rs}
    if len(digests) != 1:
        raise SystemExit(f"the loaders read different samples: {digests}")
    med = {k: sorted(rs, key=lambda x: x["seconds"])[len(rs) // 2] for k, rs in runs.items()}
    n, tokens = med["ours-cold"]["samples"], med["ours-cold"]["tokens"]
    lines = [
        f"Pool: {n:,} samples of {args.seq_len + 1} tokens ({tokens / 1e6:.1f} M tokens), "
        f"{len(manifest['shards'])} shards, {pool_bytes / 2**20:.1f} MiB; cache limit "
        f"{args.cache_limit / 2**20:.0f} MiB for both (bounded: {bounded / 2**20:.1f} MiB, "
        f"{bounded / pool_bytes:.0%} of the pool, from a cold cache); median of {args.repeat} runs; every "
        f"sample of every run hashed in order, one digest for all ({digests.pop()[:16]}).",
        "",
        "| cache | Shardyard | mosaicml-streaming 0.13.0 | Shardyard / streaming (time) |",
        "|---|---:|---:|---:|",
    ]
    for state in states:
        ours, peer = med[f"ours-{state}"], med[f"peer-{state}"]
        lines.append(
            f"| {state} | {ours['seconds']:.2f} s, {tokens / ours['seconds'] / 1e6:.1f} M tok/s "
            f"| {peer['seconds']:.2f} s, {tokens / peer['seconds'] / 1e6:.1f} M tok/s "
            f"| **{ours['seconds'] / peer['seconds']:.2f}x** |"
        )
    for state in ("warm", "bounded"):
        lines.append(
            f"| cache on disk after the {state} pass | "
            f"{med[f'ours-{state}']['cache_bytes'] / 2**20:.1f} MiB | "
            f"{med[f'peer-{state}']['cache_bytes'] / 2**20:.1f} MiB | |"
        )
    text = "\n".join(lines)
    print(text)
    heading = "# Loader: a pool streamed from S3, beside mosaicml-streaming"
    section = (
        f"{heading}\n\n"
        f"`bench/loader/stream.py`, {time.strftime('%Y-%m-%d')}, moto's S3 server on this "
        f"machine ({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end). "
        + text
        + "\n"
    )
    results = Path(args.results)
    old = results.read_text() if results.exists() else ""
    # This script's section replaces its previous one; the other sections stay.
    rest = re.sub(rf"{re.escape(heading)}\n.*?(?=^# |\Z)", "", old, flags=re.S | re.M)
    results.write_text((rest.rstrip() + "\n\n" if rest.strip() else "") + section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

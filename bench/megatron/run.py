"""Benchmark megatron-core's dataset start-up with Shardyard's prebuilt index cache versus
without it, side by side in one script run. Not a test.

    .venv/bin/python bench/megatron/run.py [--samples 100000000] [--pools 20]
        [--records-per-pool 20000] [--seq-len 64] [--workdir /tmp/bench-megatron]

Setup (timed, reported, not compared): ``--pools`` pools of random tokens (random tokens
are fine for speed: the index work does not look at token values), each built by the real
``build_pool`` in several shards, one mixture of ``--samples`` samples over them (each pool
repeated as often as the budget needs), and ``shardyard export --format megatron --out``,
which writes megatron-core's index cache.

Measured, each in a fresh process, same arguments (the ones the export printed), under a
one-process gloo torch.distributed group as Megatron-LM runs:

1. megatron-core ``BlendedMegatronDatasetBuilder(GPTDataset, ...).build()`` with
   ``path_to_cache`` = the export's cache: it loads the indices (a counter on its index
   builders must stay at 0);
2. the same build with an empty cache directory: megatron-core builds and saves every
   GPTDataset and the BlendedDataset index itself, as it does at the start of every run
   that has no cache.

Reported: wall and CPU seconds of ``build()`` (and of importing megatron-core, separately),
peak RSS (VmHWM) of each process, and 1,000 random samples of the cached build checked against
``Mixture.tokens(i)``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.common import cpu_seconds, machine, peak_rss_mb  # noqa: E402
from bench.megatron.counting import count_calls  # noqa: E402

# --------------------------------------------------------------------------- setup


def make_pools(work: Path, pools: int, records: int, seq_len: int) -> list[Path]:
    """``pools`` pools of ``records`` records, random tokens, built by ``build_pool``."""
    from shardcore.pool import build_pool
    from tests.unit.pool_fixtures import write_tokenized

    rng = np.random.default_rng(0)
    out = []
    for p in range(pools):
        path = work / f"pool-{p:02d}"
        out.append(path)
        if (path / "manifest.json").exists():
            continue
        tokens_needed = records * (seq_len + 1)
        docs, total = [], 0
        while total < tokens_needed:
            n = int(rng.integers(50, 2000))
            ids = rng.integers(0, 100_000, n, dtype=np.int32)
            ids[-1] = 100_257  # EOS
            props = {"kind": "code", "lang": "en", "package": f"p{p:02d}", "license": "PSF"}
            docs.append((props, ids))
            total += n
        src = work / f"tok-{p:02d}"
        if src.exists():
            shutil.rmtree(src)
        write_tokenized(src, tuple(docs), shard_docs=2000, name=f"p{p:02d}")
        shard_size = max(1 << 16, tokens_needed * 4 // 4)  # about four shards per pool
        build_pool([str(src)], str(path), seq_len=seq_len, seed=p, shard_size=shard_size)
        shutil.rmtree(src)
    return out


def make_mixture(work: Path, pools: list[Path], samples: int, seq_len: int) -> Path:
    from shardcore.mixture import MixtureSpec, build_mixture
    from shardcore.pool import Pool

    out = work / "mixture"
    if (out / "manifest.json").exists():
        return out
    rng = np.random.default_rng(1)
    weights = (rng.random(len(pools)) + 0.05).tolist()
    total_records = sum(Pool(p).num_records for p in pools)
    spec = MixtureSpec.from_dict(
        {
            "tokens": samples * seq_len,
            "seed": 3,
            "max_repetitions": float(samples / total_records * 40 + 4),
            "components": [
                {"pool": str(p), "weight": w} for p, w in zip(pools, weights, strict=True)
            ],
        }
    )
    build_mixture(spec, out)
    return out


# --------------------------------------------------------------------------- children


def child(args: argparse.Namespace) -> None:
    """One measured megatron-core build in this process; prints a JSON line."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    import torch.distributed as td
    from megatron.core.datasets import gpt_dataset, helpers
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.utils import get_blend_from_list
    from megatron.core.tokenizers import MegatronTokenizer

    import_s, import_cpu = time.perf_counter() - t0, cpu_seconds() - c0
    calls = count_calls(
        [
            (helpers, "build_sample_idx"),
            (helpers, "build_blending_indices"),
            (gpt_dataset, "_build_document_index"),
        ]
    )
    store = td.FileStore(str(Path(args.cache) / ".." / f"store-{os.getpid()}"), 1)
    td.init_process_group("gloo", store=store, rank=0, world_size=1)
    tok = MegatronTokenizer.from_pretrained(
        metadata_path={"library": "null"}, vocab_size=args.vocab
    )
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=args.seq_len,
        blend=get_blend_from_list(Path(args.data_args).read_text().split()),
        split="100,0,0",
        path_to_cache=args.cache,
        tokenizer=tok,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    t1, c1 = time.perf_counter(), cpu_seconds()
    ds = BlendedMegatronDatasetBuilder(
        GPTDataset, [args.train_samples, 0, 0], lambda: True, config
    ).build()[0]
    build_s, build_cpu = time.perf_counter() - t1, cpu_seconds() - c1
    peak = peak_rss_mb()  # through start-up; the spot check below maps more pages
    checked = equal = 0
    if args.check:
        from shardcore.mixture import Mixture

        mix = Mixture(args.check)
        for i in np.random.default_rng(7).integers(0, args.train_samples, 1000).tolist():
            item = ds[i]
            got = np.concatenate([item["tokens"].numpy(), item["labels"].numpy()[-1:]])
            equal += bool(np.array_equal(got, mix.tokens(i)))
            checked += 1
    td.destroy_process_group()
    print(json.dumps({"import_s": import_s, "import_cpu_s": import_cpu, "build_s": build_s,
                      "build_cpu_s": build_cpu, "index_builds": calls["n"], "len": len(ds),
                      "checked": checked, "equal": equal, "peak_rss_mb": peak}))  # fmt: skip


def run_child(argv: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, __file__, "--child", *argv], capture_output=True, text=True, env=env
    )
    if out.returncode != 0:
        raise SystemExit(f"child failed:\n{out.stdout}\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=100_000_000)
    ap.add_argument("--pools", type=int, default=20)
    ap.add_argument("--records-per-pool", type=int, default=20_000)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--workdir", default="/tmp/bench-megatron")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--cache")
    ap.add_argument("--data-args")
    ap.add_argument("--train-samples", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--check")
    args = ap.parse_args()
    if args.child:
        child(args)
        return

    from shardcore.export import export
    from shardcore.mixture import Mixture

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}; load average at start {load_average()}", flush=True)
    t = time.perf_counter()
    pools = make_pools(work, args.pools, args.records_per_pool, args.seq_len)
    print(f"pools: {args.pools} built in {time.perf_counter() - t:.1f} s", flush=True)
    t = time.perf_counter()
    mixture = make_mixture(work, pools, args.samples, args.seq_len)
    mix = Mixture(mixture)
    print(f"mixture: {mix.num_samples} samples in {time.perf_counter() - t:.1f} s", flush=True)
    vocab = int(mix.manifest["tokenizer"]["vocab_size"])
    identity = json.dumps(
        {
            "class": "megatron.core.tokenizers.text.models.default_tokenizer.DefaultTokenizerText",
            "tokenizer_path": None,
            "vocab_size": str(vocab),
        }
    )
    out = work / "export"
    if out.exists():
        shutil.rmtree(out)
    t, c = time.perf_counter(), cpu_seconds()
    export(mixture, "megatron", out=out, tokenizer=identity)
    export_s, export_cpu = time.perf_counter() - t, cpu_seconds() - c
    # The cache's index arrays are hard-linked under each tokenizer build's key: count each
    # file once.
    inodes = {p.stat().st_ino: p.stat().st_size for p in (out / "cache").iterdir()}
    cache_bytes = sum(inodes.values())
    record = json.loads((out / "export.json").read_text())
    key = record["stages"][0]["keys"][0]
    prefixes = sum(f.endswith("-GPTDataset-train") for f in key["files"])
    print(f"export (writes the cache, {prefixes} prefixes, {cache_bytes / 2**30:.2f} GiB): "
          f"{export_s:.1f} s wall, {export_cpu:.1f} s CPU", flush=True)  # fmt: skip
    common = ["--data-args", str(out / "data-args-main.txt"),
              "--train-samples", str(mix.num_samples), "--seq-len", str(args.seq_len),
              "--vocab", str(vocab)]  # fmt: skip
    load_before = load_average()
    cached = run_child([*common, "--cache", str(out / "cache"), "--check", str(mixture)])
    print("with cache:", json.dumps(cached), flush=True)
    empty = work / "empty-cache"
    if empty.exists():
        shutil.rmtree(empty)
    empty.mkdir()
    fresh = run_child([*common, "--cache", str(empty)])
    print("without cache:", json.dumps(fresh), flush=True)
    built_bytes = sum(p.stat().st_size for p in empty.iterdir())
    shutil.rmtree(empty)
    result = {
        "samples": mix.num_samples,
        "pools": args.pools,
        "prefixes": prefixes,
        "seq_len": args.seq_len,
        "export_s": export_s,
        "export_cpu_s": export_cpu,
        "setup_and_export_peak_rss_mb": peak_rss_mb(),
        "cache_gib": cache_bytes / 2**30,
        "megatron_built_gib": built_bytes / 2**30,
        "with_cache": cached,
        "without_cache": fresh,
        "wall_ratio": fresh["build_s"] / cached["build_s"],
        "cpu_ratio": fresh["build_cpu_s"] / max(cached["build_cpu_s"], 1e-9),
        "load_average": [load_before, load_average()],
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

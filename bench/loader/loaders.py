"""Benchmark: the same records read from local disk by Shardyard, litdata and
mosaicml-streaming, each from its own format through its own dataset and DataLoader, in
one run: one process reading sample by sample, and a DataLoader with workers returning
batches. Every contender is a fresh process (torch imported before its clock starts; the
clock includes making the dataset and starting the workers) that reads every record once;
the digests of the records read (as a multiset: workers may reorder them) must be equal.
Not a test.

Shardyard's DataLoader is the README's recipe, executed as written (``readme_loader``:
the README's Python block with ``RECIPE_MARK``, up to its loop, the artifact's path
replaced by the pool's), so that the number measured is the one a user who copies it gets;
its batch size and workers must be the run's ``--batch`` and ``--workers``. A plain
``torch.utils.data.DataLoader`` over the same dataset, which the README advises against,
is measured beside it.

    .venv/bin/python bench/loader/loaders.py [--seq-len 2048] [--workers 2] [--batch 8]

Shardyard reads the pool; litdata 0.2.76 reads the same records written with its
BinaryWriter (litdata chunks), mosaicml-streaming 0.13.0 the same records as MDS shards of
about the same size. The peers run in virtual environments of their own
(bench/.venv-litdata, bench/.venv-streaming, made on first use: the package without its
dependencies, then what its reader imports; torch and the rest come from this environment
through a .pth file, so no second torch is downloaded), never in the project's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

PEERS = {
    "litdata": {
        "venv": ROOT / "bench" / ".venv-litdata",
        "package": "litdata==0.2.76",
        # What litdata's reader imports beyond torch and numpy.
        "modules": ["lightning-utilities", "filelock", "tifffile", "obstore", "xxhash"],
        "label": "litdata 0.2.76",
    },
    "streaming": {
        "venv": ROOT / "bench" / ".venv-streaming",
        "package": "mosaicml-streaming==0.13.0",
        # streaming 0.13 pins numpy<2.2: its own numpy shadows this environment's.
        "modules": [
            "numpy<2.2", "boto3", "xxhash<4", "zstd", "brotli", "python-snappy", "tqdm",
            "catalogue", "pillow",
        ],
        "label": "mosaicml-streaming 0.13.0",
    },
}  # fmt: skip


def ensure_venv(name: str) -> Path:
    """The peer's interpreter: a virtual environment with the peer and its reader's
    imports installed, which sees this environment's packages (torch) after its own."""
    peer = PEERS[name]
    python = peer["venv"] / "bin" / "python"
    if python.exists():
        return python
    base = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base), "-m", "venv", str(peer["venv"])], check=True)
    site = subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    # Appended after the venv's own site-packages: the peer's pins win, torch comes from here.
    (Path(site) / "zz-project-packages.pth").write_text(ours + "\n")
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--no-deps", peer["package"]], check=True)
    subprocess.run([*pip, *peer["modules"]], check=True)
    return python


RECIPE_PAGE = ROOT / "docs" / "trainers.md"
# The docs' DataLoader recipe is the Python block of that page holding this line.
RECIPE_MARK = "assert isinstance(loader, torch.utils.data.DataLoader)"
README_ARTIFACT = '"mixes/prose-code"'  # the artifact the README's examples read


def readme_recipe(readme: Path | None = None) -> str:
    """The README's DataLoader recipe up to its loop: the code that makes ``loader``."""
    readme = readme or RECIPE_PAGE
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)
    found = [b for b in blocks if RECIPE_MARK in b]
    if len(found) != 1:
        raise SystemExit(f"{readme}: {len(found)} Python blocks hold {RECIPE_MARK!r}, not 1")
    lines = []
    for line in found[0].splitlines():
        if line.startswith("for "):
            break
        lines.append(line)
    code = "\n".join(lines) + "\n"
    if README_ARTIFACT not in code:
        raise SystemExit(f"{readme}: the DataLoader recipe reads no {README_ARTIFACT}")
    return code


def readme_loader(pool: str, readme: Path | None = None) -> tuple[Any, str]:
    """(the README recipe's ``loader`` over ``pool``, the code that made it)."""
    readme = readme or RECIPE_PAGE
    code = readme_recipe(readme)
    scope: dict[str, Any] = {}
    exec(compile(code.replace(README_ARTIFACT, repr(str(pool))), str(readme), "exec"), scope)
    return scope["loader"], code


def read_ours(
    pool: str, seq_len: str, workers: str, batch: str, passes: str, how: str = "readme"
) -> dict:
    """Reads ``pool`` ``passes`` times: ``how`` "single" (the dataset in this process),
    "readme" (the README's recipe, which must have ``batch`` and ``workers``) or "plain"
    (a plain torch DataLoader over the dataset)."""
    import torch  # (imported before the clock, as in every contender)

    from bench.loader.consume import consume, passes_over
    from shardcore.loader import ShardyardIterableDataset

    t = time.perf_counter()
    if how == "single":
        dataset = ShardyardIterableDataset(pool)
        return consume((s["tokens"] for s in passes_over(dataset, int(passes))), t, int(seq_len))
    extra: dict[str, Any] = {}
    if how == "readme":
        loader, code = readme_loader(pool)
        made = (loader.batch_size, loader.num_workers)
        if made != (int(batch), int(workers)):
            raise SystemExit(
                f"the README's DataLoader recipe reads batches of {made[0]} with {made[1]} "
                f"workers: run with --batch {made[0]} --workers {made[1]}"
            )
        extra = {"recipe": code, "loader": type(loader).__name__}
    elif how == "plain":
        dataset = ShardyardIterableDataset(pool, batch_size=int(batch))
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=int(batch), num_workers=int(workers)
        )
    else:
        raise SystemExit(f"read-ours: unknown way {how!r} (single, readme or plain)")
    done = consume((b["tokens"] for b in passes_over(loader, int(passes))), t, int(seq_len))
    return {**done, **extra}


def run(argv: list[str], env: dict | None = None) -> dict:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/shardyard-bench-loaders")
    ap.add_argument("--text-mb", type=int, default=20, help="most MiB of text per source")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--shard-size", type=int, default=8 << 20, help="bytes per shard/chunk")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    ap.add_argument("--batch", type=int, default=8, help="samples per batch")
    ap.add_argument("--passes", type=int, default=3, help="passes over the records a run")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each (median)")
    ap.add_argument("--results", default=str(HERE / "results.md"))
    ap.add_argument("--note", default="", help="a sentence on the machine's load")
    args = ap.parse_args()

    from bench.common import machine
    from bench.loader.stream import build_pool
    from shardcore import manifest as mf
    from shardcore.loader import Samples

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pythons = {name: ensure_venv(name) for name in PEERS}
    pool = build_pool(out, args.text_mb, args.seq_len, args.shard_size)
    manifest = mf.read_manifest(pool)
    samples = Samples(str(pool))
    records = np.stack([np.asarray(samples[i], dtype=np.int32) for i in range(len(samples))])
    np.save(out / "records.npy", records)
    formats = {"litdata": out / "litdata", "streaming": out / "mds"}
    for where in formats.values():
        shutil.rmtree(where, ignore_errors=True)
    run([str(pythons["litdata"]), str(HERE / "peer_litdata.py"), "write",
         str(out / "records.npy"), str(formats["litdata"]), str(args.shard_size)])  # fmt: skip
    run([str(pythons["streaming"]), str(HERE / "peer_streaming.py"), "write",
         str(out / "records.npy"), str(formats["streaming"]), "-", str(args.shard_size)])  # fmt: skip

    seq = str(args.seq_len)
    passes = str(args.passes)
    modes = {"single": ["-1", "1", passes], "loader": [str(args.workers), str(args.batch), passes]}
    ours = [sys.executable, str(Path(__file__)), "read-ours", str(pool), seq]
    argvs = {
        "ours": ours,
        "litdata": [str(pythons["litdata"]), str(HERE / "peer_litdata.py"), "read",
                    str(formats["litdata"]), seq],
        "streaming": [str(pythons["streaming"]), str(HERE / "peer_streaming.py"),
                      "read-local", str(formats["streaming"]), seq],
    }  # fmt: skip
    ways = {"single": "single", "loader": "readme"}  # Shardyard's way of reading each mode
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs: dict[tuple[str, str], list[dict]] = {(w, m): [] for w in argvs for m in modes}
    runs[("ours", "plain")] = []
    loads = [os.getloadavg()[0]]
    for _ in range(args.repeat):
        for mode, extra in modes.items():
            for who, argv in argvs.items():
                tail = [ways[mode]] if who == "ours" else []
                runs[(who, mode)].append(run([*argv, *extra, *tail], env))
        runs[("ours", "plain")].append(run([*ours, *modes["loader"], "plain"], env))
        loads.append(os.getloadavg()[0])

    digests = {r["digest"] for rs in runs.values() for r in rs}
    counts = {r["samples"] for rs in runs.values() for r in rs}
    if len(digests) != 1 or counts != {len(records) * args.passes}:
        raise SystemExit(f"the loaders read different records: {digests} {counts}")
    med = {k: sorted(rs, key=lambda r: r["seconds"])[len(rs) // 2] for k, rs in runs.items()}
    rate = {k: r["samples"] / r["seconds"] for k, r in med.items()}
    recipe = runs[("ours", "loader")][0]
    names = {
        "single": "one process, sample by sample",
        "loader": f"DataLoader, {args.workers} workers, batches of {args.batch} (Shardyard: "
        f"the README's recipe, `{recipe['loader']}`)",
    }
    shard_bytes = sum(f["size"] for f in manifest["files"])
    lines = [
        f"Records: {len(records):,} samples of {args.seq_len + 1} tokens, the same in each "
        f"loader's own format (Shardyard's pool, {len(manifest['shards'])} shards, "
        f"{shard_bytes / 2**20:.1f} MiB; litdata chunks and MDS shards of at most "
        f"{args.shard_size / 2**20:.0f} MiB), in the page cache. Each cell: the median of "
        f"{args.repeat} fresh processes, samples per second from making the dataset to the "
        f"last sample of {args.passes} passes (epochs; each starts its workers anew); every "
        f"run read every record once a pass, one digest for all ({digests.pop()[:16]}).",
        "",
        f"| read | Shardyard | {PEERS['litdata']['label']} | {PEERS['streaming']['label']} "
        "| Shardyard / litdata | Shardyard / streaming |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for mode in modes:
        mine, lit, mos = rate[("ours", mode)], rate[("litdata", mode)], rate[("streaming", mode)]
        lines.append(
            f"| {names[mode]} | {mine:,.0f}/s | {lit:,.0f}/s | {mos:,.0f}/s "
            f"| **{mine / lit:.2f}x** | **{mine / mos:.2f}x** |"
        )
    plain = rate[("ours", "plain")]
    lit, mos = rate[("litdata", "loader")], rate[("streaming", "loader")]
    lines += [
        f"| a plain `torch.utils.data.DataLoader` over Shardyard's dataset, {args.workers} "
        f"workers, batches of {args.batch} (the peers: their loaders above) | {plain:,.0f}/s "
        f"| | | {plain / lit:.2f}x | {plain / mos:.2f}x |",
        "",
        "The README's recipe, executed as written with the pool's path:",
        "",
        "```python",
        recipe["recipe"].rstrip("\n"),
        "```",
    ]
    text = "\n".join(lines)
    print(text)
    heading = "# Loader: local reads beside litdata and mosaicml-streaming"
    section = (
        f"{heading}\n\n`bench/loader/loaders.py --workers {args.workers} --batch "
        f"{args.batch} --passes {args.passes} --repeat {args.repeat}`, {time.strftime('%Y-%m-%d %H:%M')} UTC, "
        f"{machine()}; 1-minute load average {min(loads):.1f}-{max(loads):.1f} during the "
        f"run. {args.note}".rstrip()
        + f"\n\n{text}\n"
    )
    results = Path(args.results)
    old = results.read_text() if results.exists() else ""
    # This script's section replaces its previous one; the other sections stay.
    rest = re.sub(rf"{re.escape(heading)}\n.*?(?=^# |\Z)", "", old, flags=re.S | re.M)
    results.write_text(section + ("\n" + rest.lstrip() if rest.strip() else ""))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "read-ours":
        print(json.dumps(read_ours(*sys.argv[2:])))
        sys.exit(0)
    sys.exit(main())

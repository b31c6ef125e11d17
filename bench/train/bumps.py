"""The loss bumps, reproduced: the tiny GPT trained on the same two sources (CPython module
code and docstrings) pooled two ways, read in pool order for one pass:

* ``local``: the shard-local shuffle, whose shards are the inputs grouped by source (every
  record of a shard comes from one source, the code shards first);
* ``exact``: Shardyard's exact global shuffle of the same documents.

Training loss per step is written with each pool's shard boundaries (in steps), the mean
loss just before and just after each boundary, the validation loss per source at the end,
and an SVG chart of both curves (``--svg``).

    python bench/train/bumps.py --data /tmp/tiny-data --out /tmp/bumps --svg bench/train/bumps.svg

With ``--server`` it trains on two mixture versions of the server instead, each reading one
pool alone in pool order (``--local-version``, ``--exact-version``: the same documents
pooled by each shuffle), and reports both runs' progress and losses through
``shardcore.client``: the pool page overlays their training loss with each pool's shard
boundaries.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from bench.train.prepare import prepare  # noqa: E402
from bench.train.tiny_gpt import Config, Reporter, train  # noqa: E402
from shardcore import manifest as mf  # noqa: E402

COLOURS = {"local": "#c0392b", "exact": "#2a6fdb"}


def shard_steps(pool: str | Path, batch_size: int) -> list[float]:
    """The step at which each shard after the first starts, in a pass in pool order."""
    cumulative = mf.read_manifest(pool)["cumulative_records"]
    return [c / batch_size for c in cumulative[1:-1]]


def around(losses: list[float], step: float, window: int) -> tuple[float, float]:
    """Mean training loss of the ``window`` steps before and after ``step`` (1-based steps)."""
    arr = np.asarray(losses)
    i = int(round(step))
    return float(arr[max(0, i - window) : i].mean()), float(arr[i : i + window].mean())


def svg(curves: dict[str, list[float]], boundaries: dict[str, list[float]], path: Path,
        *, smooth: int = 5) -> None:  # fmt: skip
    """Both curves (a moving average over ``smooth`` steps) with each pool's shard
    boundaries as dashed vertical lines in its colour; plain SVG, no plotting library."""
    w, h, left, bottom, top, right = 760, 340, 50, 40, 30, 20
    n = max(len(v) for v in curves.values())
    sm = {k: np.convolve(v, np.ones(smooth) / smooth, mode="valid") for k, v in curves.items()}
    lo = min(float(v.min()) for v in sm.values())
    hi = max(float(v.max()) for v in sm.values())
    lo, hi = np.floor(lo * 2) / 2, np.ceil(hi * 2) / 2

    def x(step: float) -> float:
        return left + (w - left - right) * step / n

    def y(loss: float) -> float:
        return top + (h - top - bottom) * (hi - loss) / (hi - lo)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{left}" y="18" font-size="13">Training loss ({smooth}-step mean) reading each pool '
        "once in order; dashed: shard boundaries</text>",
    ]
    for v in np.arange(lo, hi + 1e-9, 0.5):
        out.append(
            f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>'
        )
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    for s in range(0, n + 1, 50):
        out.append(f'<text x="{x(s):.1f}" y="{h - bottom + 16}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{(w + left) / 2}" y="{h - 6}" text-anchor="middle">step</text>')
    for name, steps in boundaries.items():
        for s in steps:
            out.append(
                f'<line x1="{x(s):.1f}" x2="{x(s):.1f}" y1="{top}" y2="{h - bottom}" '
                f'stroke="{COLOURS[name]}" stroke-dasharray="4 3" stroke-opacity="0.6"/>'
            )
    for k, (name, v) in enumerate(sm.items()):
        offset = (smooth - 1) / 2 + 1
        pts = " ".join(f"{x(i + offset):.1f},{y(float(val)):.1f}" for i, val in enumerate(v))
        out.append(
            f'<polyline fill="none" stroke="{COLOURS[name]}" stroke-width="1.5" points="{pts}"/>'
        )
        out.append(
            f'<text x="{w - right - 150}" y="{top + 16 + 14 * k}" fill="{COLOURS[name]}">'
            f"{name} shuffle</text>"
        )
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def run(data_dir: Path, out: Path, cfg: Config, *, max_kb: int, window: int, server=None) -> dict:
    """Both runs. ``server``: ``{"client", "versions": {"local": id, "exact": id},
    "prefix": run name prefix}`` to train on the server's versions and report to it."""
    result: dict = {"config": cfg.__dict__, "pools": {}}
    if server is None:
        # A fifth held out: module files are long documents, a smaller slice may hold none.
        paths = prepare(data_dir, max_kb=max_kb, shuffles=True, val_fraction=0.2)
    for name in ("local", "exact"):
        reporter = None
        if server is None:
            pool = data = paths[f"pool/both-{name}"]
            records = mf.read_manifest(pool)["num_records"]
        else:
            version = server["client"].request(
                "GET", f"api/mixture-versions/{server['versions'][name]}/"
            )
            if len(version["components"]) != 1:
                raise SystemExit(f"--{name}-version: give a version of one pool, read alone")
            pool = server["client"].request(
                "GET", f"api/pools/{version['components'][0]['pool']}/"
            )["path"]
            data = version["path"]
            records = min(mf.read_manifest(pool)["num_records"], version["num_samples"])
            reporter = Reporter(server["client"], mixture_version=version["id"],
                                run_name=f"{server['prefix']}-{name}")  # fmt: skip
        steps = records // cfg.batch_size  # one pass in pool order
        run_cfg = Config(**{**cfg.__dict__, "steps": steps, "eval_every": steps})
        shutil.rmtree(out / name, ignore_errors=True)
        history = train(data, out / name, run_cfg, reporter=reporter, log=lambda *a: None)
        losses = [loss for _, loss in history["train"]]
        bounds = shard_steps(pool, cfg.batch_size)
        result["pools"][name] = {
            "records": records,
            "steps": steps,
            "shard_boundaries": bounds,
            "train_loss": losses,
            "around_boundaries": [
                {
                    "step": b,
                    "before": around(losses, b, window)[0],
                    "after": around(losses, b, window)[1],
                }
                for b in bounds
                if window <= b <= steps - window
            ],
            "val": history["val"][-1]["losses"],
            "cpu_seconds": history["cpu_seconds"],
        }
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="prepare.py's directory (built if missing)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-kb", type=int, default=600)
    ap.add_argument("--window", type=int, default=10, help="steps averaged each side of a boundary")
    ap.add_argument("--svg", help="write the chart here")
    ap.add_argument("--server", help="Shardyard URL; the token is in $SHARDYARD_TOKEN")
    ap.add_argument("--local-version", type=int, help="the server's version of the local pool")
    ap.add_argument("--exact-version", type=int, help="the server's version of the exact pool")
    ap.add_argument("--run-prefix", default="bumps", help="run names: PREFIX-local, PREFIX-exact")
    ap.add_argument("--batch-size", type=int, default=Config.batch_size)
    ap.add_argument("--d-model", type=int, default=Config.d_model)
    ap.add_argument("--vocab", type=int, default=Config.vocab)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server = None
    if args.server:
        import os

        from shardcore.client import ShardyardClient

        if not (args.local_version and args.exact_version):
            ap.error("--server needs --local-version and --exact-version")
        server = {
            "client": ShardyardClient(args.server, os.environ["SHARDYARD_TOKEN"]),
            "versions": {"local": args.local_version, "exact": args.exact_version},
            "prefix": args.run_prefix,
        }
    cfg = Config(batch_size=args.batch_size, d_model=args.d_model, vocab=args.vocab)
    result = run(Path(args.data), out, cfg, max_kb=args.max_kb, window=args.window, server=server)
    (out / "bumps.json").write_text(json.dumps(result))
    if args.svg:
        svg(
            {k: v["train_loss"] for k, v in result["pools"].items()},
            {k: v["shard_boundaries"] for k, v in result["pools"].items()},
            Path(args.svg),
        )
    for name, r in result["pools"].items():
        print(f"{name}: {r['records']} records, {r['steps']} steps, {r['cpu_seconds']:.1f} s CPU")
        for b in r["around_boundaries"]:
            print(f"  boundary at step {b['step']:.1f}: {b['before']:.3f} -> {b['after']:.3f}")
        val = ", ".join(f"{v['source'] or 'all'} {v['loss']:.3f}" for v in r["val"])
        print(f"  final validation loss: {val}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Static against adaptive, with the tiny GPT: the same data and budget trained twice from
a mixture that under-weights one source (module code 10%, docstrings 90%):

* ``static`` reads that mixture to the end;
* ``adaptive`` reads it up to a checkpoint, then switches to the weights DoReMi's rule
  proposes (``shardcore.adapt.propose_weights``: its validation loss per pool against a
  ``reference`` run's, here the same model on the 50/50 mixture) for the rest of the
  budget: a version built to continue from the run's position
  (``shardcore.mixture.continuation``), read by the same loader from the next step
  (``ShardyardIterableDataset.switch``).

Everything runs in the library (no server): the proposal, the continuing version and the
switch are the functions the server's ``POST /api/runs/{id}/switch/`` calls. Validation
loss per pool of both runs is written side by side, per evaluation.

    python bench/train/adapt.py --data /tmp/tiny-data --out /tmp/adapt
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.train.prepare import prepare  # noqa: E402
from bench.train.tiny_gpt import Config, train  # noqa: E402
from shardcore.adapt import propose_weights  # noqa: E402
from shardcore.mixture import build_mixture, continuation  # noqa: E402

SKEW = {"pool/stdlib-code": 0.1, "pool/docstrings": 0.9}


def _losses(history: dict, step: int) -> dict[str, float]:
    """Validation loss per pool (whole pool, not per source) at the evaluation of ``step``."""
    row = next(v for v in history["val"] if v["step"] == step)
    return {s["pool"]: s["loss"] for s in row["losses"] if not s["source"]}


def run(
    data_dir: Path, out: Path, cfg: Config, *, max_kb: int, adapt_at: int, eta: float,
    smoothing: float = 1e-3,
) -> dict:  # fmt: skip
    # A fifth held out: module files are long documents, a smaller slice holds a few.
    paths = prepare(data_dir, max_kb=max_kb, val_fraction=0.2)
    budget = cfg.steps * cfg.batch_size * 64  # seq_len 64: the samples the runs read
    skewed = out / "mixtures" / "skewed"
    shutil.rmtree(out, ignore_errors=True)
    build_mixture(
        {"components": [{"pool": paths[k], "weight": w} for k, w in SKEW.items()],
         "tokens": budget, "seed": 2, "max_repetitions": 100_000},
        skewed,
    )  # fmt: skip
    uniform = out / "mixtures" / "uniform"
    build_mixture(
        {"components": [{"pool": paths[k], "weight": 0.5} for k in SKEW],
         "tokens": budget, "seed": 2, "max_repetitions": 100_000},
        uniform,
    )  # fmt: skip
    quiet = lambda *a: None  # noqa: E731
    reference = train(uniform, out / "reference", cfg, log=quiet)
    static = train(skewed, out / "static", cfg, log=quiet)
    proposals = []

    def adapt(step: int, next_sample: int, history: dict):
        if step != adapt_at:
            return None
        weights = {paths[k]: w for k, w in SKEW.items()}
        proposal = propose_weights(
            weights,
            _losses(history, step),
            _losses(reference, step),
            eta=eta,
            smoothing=smoothing,
        )
        proposals.append({"step": step, "sample": next_sample, "pools": proposal})
        new = out / "mixtures" / "skewed-continued"
        build_mixture(
            {"components": [{"pool": p, "weight": v["proposed"]} for p, v in proposal.items()],
             "tokens": budget - next_sample * 64, "seed": 2, "max_repetitions": 100_000,
             "continues": continuation(skewed, next_sample)},
            new,
        )  # fmt: skip
        return [{"path": str(skewed), "first_sample": 0},
                {"path": str(new), "first_sample": next_sample}]  # fmt: skip

    adaptive = train(skewed, out / "adaptive", cfg, adapt=adapt, log=quiet)
    names = {paths[k]: k.split("/", 1)[1] for k in SKEW}
    curves = []
    for s, a in zip(static["val"], adaptive["val"], strict=True):
        curves.append(
            {
                "step": s["step"],
                "static": {names[p]: x for p, x in _losses(static, s["step"]).items()},
                "adaptive": {names[p]: x for p, x in _losses(adaptive, a["step"]).items()},
            }
        )
    return {
        "config": cfg.__dict__,
        "skew": {names[paths[k]]: w for k, w in SKEW.items()},
        "adapt_at": adapt_at,
        "eta": eta,
        "smoothing": smoothing,
        "proposal": [
            {**p, "pools": {names[k]: v for k, v in p["pools"].items()}} for p in proposals
        ],
        "switches": adaptive["switches"],
        "val": curves,
        "reference_final": {names[p]: x for p, x in _losses(reference, cfg.steps).items()},
        "cpu_seconds": {
            "reference": reference["cpu_seconds"],
            "static": static["cpu_seconds"],
            "adaptive": adaptive["cpu_seconds"],
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="prepare.py's directory (built if missing)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-kb", type=int, default=600)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--adapt-at", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eta", type=float, default=4.0)
    ap.add_argument(
        "--smoothing",
        type=float,
        default=1e-3,
        help="the share of the proposal spread evenly over the pools",
    )
    args = ap.parse_args(argv)
    cfg = Config(steps=args.steps, eval_every=args.eval_every)
    result = run(Path(args.data), Path(args.out), cfg, max_kb=args.max_kb,
                 adapt_at=args.adapt_at, eta=args.eta, smoothing=args.smoothing)  # fmt: skip
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "adapt.json").write_text(json.dumps(result, indent=1))
    for p in result["proposal"]:
        moved = ", ".join(
            f"{k} {v['weight']:.3f} -> {v['proposed']:.3f} (excess {v['excess']:.3f})"
            for k, v in p["pools"].items()
        )
        print(f"step {p['step']} (sample {p['sample']}): {moved}")
    print("step  " + "  ".join(f"{r}/{k:>12}" for r in ("static", "adaptive")
                               for k in result["skew"]))  # fmt: skip
    for row in result["val"]:
        cells = [f"{row[r][k]:>19.3f}" for r in ("static", "adaptive") for k in result["skew"]]
        print(f"{row['step']:>4}  " + "  ".join(cells))
    print(json.dumps({"reference_final": result["reference_final"],
                      "cpu_seconds": result["cpu_seconds"]}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

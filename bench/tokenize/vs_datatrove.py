"""Benchmark: ``shardyard tokenize`` beside datatrove's tokenizer stage, whole process each,
on the same files and the same tokenizer, in one script run.

    .venv/bin/python bench/tokenize/vs_datatrove.py [--size-mb 40] [--rounds 1]
                                                    [--data DIR] [--max-load 0.5]

Corpus: the one ``bench/tokenize/run.py`` builds (CPython's sources and docs interleaved
with real non-English text, as ``.jsonl.zst`` files, and a byte-level BPE
``tokenizer.json`` of 32,000 ids trained on it); both sides read those files and that
``tokenizer.json``:

  datatrove     ``JsonlReader`` -> ``DocumentTokenizer`` (the tokenizers library's
                ``encode_batch``, an EOS after each document, ``shuffle_documents=False``:
                its cheapest setting, no second pass) under ``LocalPipelineExecutor`` with
                one task, writing its ``.ds`` tokens and ``.index`` document ends;
  shardyard     ``shardcore.tokenize.tokenize`` with ``hf:`` on the same tokenizer.json,
                engine auto, one worker: Megatron shards, sidecars, checksums, manifest.

Each is its own process, timed from its start (imports and tokenizer load included) to its
exit: wall time, CPU time (user + system, children included) and peak RSS. Rounds run
interleaved so load from others hits both alike; the median round is reported. Identity:
every document's ids, EOS stripped, are compared between the two outputs (datatrove lets
the text's own special-token strings, such as a literal ``</s>``, become special ids, which
Shardyard encodes as text: those documents are counted apart). Prints a table and one JSON
line (the last) for ``bench/run_all.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402
from bench.tokenize.run import build  # noqa: E402

EOS = "<|endoftext|>"
SIDES = ("datatrove", "shardyard")


def _usage() -> tuple[float, float]:
    """CPU seconds of this process and its children, and its peak RSS in MB."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    return cpu, max(me.ru_maxrss, kids.ru_maxrss) / 1024


def run_datatrove(data: Path, out: Path) -> dict:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    shutil.rmtree(out, ignore_errors=True)
    LocalPipelineExecutor(
        pipeline=[
            JsonlReader(str(data), glob_pattern="*.jsonl.zst", compression="zstd", recursive=False),
            DocumentTokenizer(
                str(out / "tokens"),
                tokenizer_name_or_path=str(data / "hf" / "tokenizer.json"),
                eos_token=EOS,
                shuffle_documents=False,
            ),
        ],
        tasks=1,
        workers=1,
        logging_dir=str(out / "logs"),
        skip_completed=False,
    ).run()
    ds = sorted((out / "tokens").glob("*.ds"))
    return {"tokens": sum(p.stat().st_size for p in ds) // 2, "files": [str(p) for p in ds]}


def run_shardyard(data: Path, out: Path) -> dict:
    from shardcore.tokenize import tokenize

    shutil.rmtree(out, ignore_errors=True)
    inputs = [str(p) for p in sorted(data.glob("*.jsonl.zst"))]
    m = tokenize(inputs, str(out), workers=1, engine="auto", tokenizer=f"hf:{data / 'hf'}")
    return {"tokens": int(m["totals"]["tokens"]), "documents": int(m["totals"]["documents"])}


def child(side: str, data: Path, out: Path) -> dict:
    t0 = time.perf_counter()
    r = (run_datatrove if side == "datatrove" else run_shardyard)(data, out)
    cpu, rss = _usage()
    return {**r, "side": side, "wall_s": time.perf_counter() - t0, "cpu_s": cpu, "rss_mb": rss}


def _datatrove_documents(out: Path) -> list[list[int]]:
    """datatrove's documents as id lists, EOS stripped: its ``.ds`` file holds uint16
    tokens (a vocabulary under 65,536), its ``.index`` each document's end (uint64, in
    tokens)."""
    import numpy as np

    docs: list[list[int]] = []
    for ds in sorted((out / "tokens").glob("*.ds")):
        tokens = np.fromfile(ds, dtype=np.uint16)
        ends = np.fromfile(f"{ds}.index", dtype=np.uint64).astype(np.int64)
        starts = np.r_[0, ends[:-1]]
        docs.extend(tokens[a : b - 1].tolist() for a, b in zip(starts, ends, strict=True))
    return docs


def compare(data: Path, work: Path) -> dict:
    """Documents whose ids agree, differ, or differ because their text holds a special
    token's string."""
    from shardcore.readers import Document, read_segment
    from shardcore.tokenized import TokenizedSource

    theirs = _datatrove_documents(work / "datatrove")
    ours = TokenizedSource(work / "shardyard")
    texts = [
        d.text
        for f in sorted(data.glob("*.jsonl.zst"))
        for d in read_segment(str(f))
        if isinstance(d, Document)
    ]
    specials = ("<s>", "</s>", EOS)
    same = special = other = 0
    first_other = None
    for i in range(min(len(theirs), ours.num_documents)):
        mine = ours.tokens(i).tolist()[:-1]  # EOS stripped
        if mine == theirs[i]:
            same += 1
        elif any(s in texts[i] for s in specials):
            special += 1
        else:
            other += 1
            first_other = i if first_other is None else first_other
    return {
        "documents": [len(theirs), ours.num_documents],
        "identical": same,
        "special_strings": special,
        "different": other,
        "first_different": first_other,
    }


def _sub(side: str, data: Path, out: Path, max_load: float) -> dict:
    while max_load and os.getloadavg()[0] >= max_load:
        time.sleep(5)
    argv = [sys.executable, __file__, "--child", side, "--data", str(data), "--out", str(out)]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{side} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=40)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--data", default="/tmp/shardyard-bench-tokenize-dt")
    ap.add_argument("--max-load", type=float, default=0.0)
    ap.add_argument("--child", choices=SIDES)
    ap.add_argument("--out")
    a = ap.parse_args()
    data = Path(a.data)
    if a.child:
        print(json.dumps(child(a.child, data, Path(a.out))))
        return
    info = build(data / "corpus", a.size_mb, a.files)
    work = data / "work"
    load0 = os.getloadavg()
    rounds = [
        {side: _sub(side, data / "corpus", work / side, a.max_load) for side in SIDES}
        for _ in range(a.rounds)
    ]
    load1 = os.getloadavg()
    ident = compare(data / "corpus", work)
    ratios = sorted(
        (r["datatrove"]["cpu_s"] / r["datatrove"]["tokens"])
        / (r["shardyard"]["cpu_s"] / r["shardyard"]["tokens"])
        for r in rounds
    )
    med = rounds[sorted(range(len(rounds)), key=lambda k: ratios[k])[len(rounds) // 2]]
    print(f"# shardyard tokenize vs datatrove DocumentTokenizer, {machine()}")
    print(
        f"corpus: {info['text_bytes'] / 1e6:.0f} MB of text, {info['documents']:,} documents; "
        f"load {load0[0]:.1f} -> {load1[0]:.1f}; median of {len(rounds)} round(s)"
    )
    print("| contender | wall s | CPU s | peak RSS MB | tokens | tokens per CPU-s |")
    print("|---|---:|---:|---:|---:|---:|")
    for side in SIDES:
        r = med[side]
        print(
            f"| {side} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['rss_mb']:.0f} | "
            f"{r['tokens']:,} | {r['tokens'] / r['cpu_s'] / 1e6:.2f} M |"
        )
    ratio = ratios[len(ratios) // 2]
    print(f"speed per CPU-second, Shardyard over datatrove: {ratio:.2f}x; ids: {ident}")
    result = {"size_mb": a.size_mb, "ratio_cpu": ratio, "identity": ident, "rounds": rounds}
    result["load"] = [load0[0], load1[0]]
    print(json.dumps(result))


if __name__ == "__main__":
    main()

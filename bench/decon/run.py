"""Decontamination side by side with datatrove's n-gram decontamination and
lm-evaluation-harness's decontamination janitor, on the same planted contamination from real
text, in one run; then the growth of ours against documents and benchmark items,
extrapolated to 10^10 documents.

    PYTHONPATH=$PWD .venv/bin/python bench/decon/run.py [--items 1000] [--docs 3000] \\
        [--datatrove-python /tmp/dt-venv/bin/python] [--janitor-python /tmp/lm-venv/bin/python] \\
        [--growth]

Plants (``tests/support/decon_plants.py``): CPython docstrings as benchmark items planted
into pieces of its sources (documents of ``--doc-words`` words): whole, with case,
punctuation and whitespace changed, as a fragment holding 60% of the item's 13-grams, as a
near miss holding at most 35%, and clean documents sharing short phrases and one 13-gram
with the items. Recall is over the documents planted above the threshold, precision over
the documents each flags. Ours: the ``decon`` annotator's index (``shardcore.decon``),
documents matched in batches of 1024 as the annotation's units do. datatrove: its
``NGramsDecontFilter`` (13-grams, any n-gram a hit; spaCy's English word tokenizer, its
default) in its own environment (``bench/decon/datatrove_side.py``). lm-evaluation-harness:
its ``Janitor`` (13-grams, any n-gram a hit; lowercased, punctuation deleted, whitespace
words) in its own environment (``bench/decon/janitor_side.py``). CPU seconds are each
process's own (``time.process_time``), index building apart from matching.

Growth (``--growth``): ours alone, documents of 100 words at 10^2, 10^4, 10^6 documents
against 10^3 items, and 10^3, 10^4, 10^5 items (40-word windows of the standard library's
package sources past the docstrings) against 10^4 documents: CPU seconds, index bytes, the
fitted exponent and the extrapolation to 10^10 documents.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine
from shardcore.decon.index import compile_index
from shardcore.decon.text import words
from tests.support import decon_plants

BATCH = 1024


def _write(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def _spec(tmp: Path, items: list[dict]) -> Path:
    (tmp / "items.jsonl").write_text(
        "".join(json.dumps({"id": it["id"], "q": it["text"]}) + "\n" for it in items)
    )
    spec = tmp / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "benchmarks": [
                    {"name": "bench", "files": ["items.jsonl"], "fields": ["q"], "id": "id"}
                ]
            }
        )  # fmt: skip
    )
    return spec


def ours(tmp: Path, items: list[dict], docs: list[str], threshold: float = 0.5) -> dict:
    t0 = time.process_time()
    index = compile_index(_spec(tmp, items))
    build = time.process_time() - t0
    found: list[set[str]] = []
    t0 = time.process_time()
    for lo in range(0, len(docs), BATCH):
        _, _, hit = index.match(docs[lo : lo + BATCH], threshold)
        found += [{index.item_ids[i].split(":", 1)[1] for i in h} for h in hit]
    match = time.process_time() - t0
    return {"found": found, "build_cpu": build, "match_cpu": match, "index_bytes": index.nbytes(),
            "ngrams": int(index.keys.size)}  # fmt: skip


def doc_scores(flagged: list[bool], plants: decon_plants.Plants) -> dict:
    positive = [bool(t) for t in plants.truth]
    tp = sum(f and p for f, p in zip(flagged, positive, strict=True))
    out = {
        "recall": tp / max(1, sum(positive)),
        "precision": tp / max(1, sum(flagged)),
    }
    for kind in decon_plants.KINDS:
        got = [f for f, k in zip(flagged, plants.kinds, strict=True) if k == kind]
        out[kind] = sum(got) / max(1, len(got))
    return out


def _other(python: str, script: str, tmp: Path, items: Path, docs: Path) -> dict | None:
    """Run another implementation's side script in its own environment; None without one."""
    if not python:
        return None
    out = tmp / f"{script}.json"
    subprocess.run(
        [python, str(Path(__file__).with_name(script)), "--items", str(items),
         "--docs", str(docs), "--out", str(out)],
        check=True, cwd=tmp,
    )  # fmt: skip
    return json.loads(out.read_text())


def side_by_side(args) -> list[str]:
    plants = decon_plants.make(args.items, args.docs, seed=1, doc_words=args.doc_words)
    mb = sum(len(d.encode()) for d in plants.docs) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mine = ours(tmp, plants.items, plants.docs)
        items = _write(tmp / "other-items.jsonl", [it["text"] for it in plants.items])
        docs = _write(tmp / "other-docs.jsonl", plants.docs)
        theirs = _other(args.datatrove_python, "datatrove_side.py", tmp, items, docs)
        janitor = _other(args.janitor_python, "janitor_side.py", tmp, items, docs)
    short = sum(1 for it in plants.items if len(words(it["text"])) < 13)
    item_level = decon_plants.scores(mine["found"], plants)
    rows = [("Shardyard decon", doc_scores([bool(f) for f in mine["found"]], plants),
             mine["build_cpu"], mine["match_cpu"])]  # fmt: skip
    if theirs is not None:
        rows.append(("datatrove NGramsDecontFilter", doc_scores(theirs["flagged"], plants),
                     theirs["build_cpu"], theirs["filter_cpu"]))  # fmt: skip
    if janitor is not None:
        rows.append(("lm-evaluation-harness Janitor", doc_scores(janitor["flagged"], plants),
                     janitor["build_cpu"], janitor["filter_cpu"]))  # fmt: skip
    lines = [
        f"{args.items:,} items ({short} shorter than 13 words), {args.docs:,} documents of "
        f"~{args.doc_words} words ({mb:.1f} MB), {sum(1 for t in plants.truth if t)} planted "
        "above the threshold",
        "",
        "| | recall | precision | whole | changed | fragment | near miss | common phrases | "
        "clean | index CPU s | match CPU s | MB per CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s, build, match in rows:
        lines.append(
            f"| {name} | {s['recall']:.4f} | {s['precision']:.4f} | {s['whole']:.2f} | "
            f"{s['changed']:.2f} | {s['fragment']:.2f} | {s['near_miss']:.2f} | "
            f"{s['common']:.2f} | {s['clean']:.2f} | {build:.2f} | {match:.2f} | "
            f"{mb / match:.2f} |"
        )
    if theirs is not None:
        lines += ["", f"Speed (match CPU seconds, datatrove / ours): "
                      f"{theirs['filter_cpu'] / mine['match_cpu']:.1f}x"]  # fmt: skip
    if janitor is not None:
        lines += ["", f"Speed (match CPU seconds, lm-evaluation-harness Janitor / ours): "
                      f"{janitor['filter_cpu'] / mine['match_cpu']:.1f}x (its C++ "
                      f"janitor_util {'loaded' if janitor['cpp'] else 'absent: Python path'}; "
                      f"{janitor['short_docs']} documents of 200 characters or fewer)"]  # fmt: skip
    lines += [
        "",
        f"Ours per (document, item) pair: recall {item_level['recall']:.4f}, precision "
        f"{item_level['precision']:.4f} ({item_level['positives']} planted pairs, "
        f"{item_level['reported']} reported).",
    ]
    return lines


def windows(n: int, size: int = 40) -> list[dict]:
    """``n`` items of real text: docstrings of the item side, then ``size``-word windows of
    the standard library's package sources (distinct)."""
    out = [d for d in decon_plants.docstrings(
        sorted(p for p in decon_plants.STDLIB.glob("*.py") if p.stat().st_size > 2000)[0::2]
    ) if len(d.split()) >= 20][:n]  # fmt: skip
    seen = set(out)
    for p in sorted(decon_plants.STDLIB.glob("*/**/*.py")):
        if len(out) >= n:
            break
        ws = p.read_text(encoding="utf-8", errors="replace").split()
        for lo in range(0, len(ws) - size, size):
            w = " ".join(ws[lo : lo + size])
            if w not in seen:
                seen.add(w)
                out.append(w)
    if len(out) < n:
        raise SystemExit(f"the standard library gives {len(out)} items, {n} asked")
    return [{"id": f"w{i}", "text": t} for i, t in enumerate(out[:n])]


def _fit(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )


def growth() -> list[str]:
    lines = ["Documents (100 words each) against 1,000 items:", "",
             "| documents | MB | match CPU s | CPU µs per document |", "|---|---|---|---|"]  # fmt: skip
    base = decon_plants.make(1000, 10_000, seed=2, doc_words=100)
    xs, ys = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (100, 10_000, 1_000_000):
            docs = (base.docs * (n // len(base.docs) + 1))[:n]
            r = ours(Path(tmp), base.items, docs)
            mb = sum(len(d.encode()) for d in docs) / 1e6
            xs.append(n)
            ys.append(r["match_cpu"])
            lines.append(
                f"| {n:,} | {mb:,.1f} | {r['match_cpu']:.2f} | {1e6 * r['match_cpu'] / n:.1f} |"
            )
            del docs
        b = _fit(xs[1:], ys[1:])
        at = ys[-1] * (1e10 / xs[-1]) ** b
        lines += [
            "",
            f"Fitted exponent (10^4 to 10^6 documents): {b:.2f}. At 10^10 documents of 100 "
            f"words: {at / 3600:,.0f} CPU-hours ({at / 3600 / 1000:,.1f} hours on 1,000 cores); "
            "memory per process is the index plus one batch, whatever the corpus.",
            "",
            "Benchmark items (real text) against 10,000 documents of 100 words:",
            "",
            "| items | n-grams | index MB | index CPU s | match CPU s |",
            "|---|---|---|---|---|",
        ]
        docs = base.docs[:10_000]
        for n in (1_000, 10_000, 100_000):
            items = windows(n)
            r = ours(Path(tmp), items, docs)
            lines.append(
                f"| {n:,} | {r['ngrams']:,} | {r['index_bytes'] / 1e6:,.1f} | "
                f"{r['build_cpu']:.2f} | {r['match_cpu']:.2f} |"
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--doc-words", type=int, default=400)
    ap.add_argument("--datatrove-python", default="/tmp/dt-venv/bin/python")
    ap.add_argument("--janitor-python", default="/tmp/lm-venv/bin/python")
    ap.add_argument("--growth", action="store_true")
    args = ap.parse_args()
    if args.datatrove_python and not Path(args.datatrove_python).exists():
        args.datatrove_python = ""
    if args.janitor_python and not Path(args.janitor_python).exists():
        args.janitor_python = ""
    out = [f"Machine: {machine()}; load average {os.getloadavg()[0]:.2f} "
           f"{os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min) at the start", ""]  # fmt: skip
    out += side_by_side(args)
    if args.growth:
        out += ["", *growth()]
    out += ["", f"load average at the end {os.getloadavg()[0]:.2f}"]
    print("\n".join(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
